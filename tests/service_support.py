"""Shared by the service, client and container tests: a cost model folder, request bodies, a served
process, and planning workers killed mid-request."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.types import Workload
from autoshard.core.workload_file import workload_to_dict

EIGHT_DEVICES = {"num_devices": 8, "device_memory_gb": 16}
SHIPPED_PROFILE = Path(__file__).resolve().parents[1] / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1"


def save_test_model(folder: Path, metrics: dict[str, Any] | None = None) -> Path:
    """An untrained cost model saved as ``folder/<profile id>/cost_model.pt``; returns ``folder``."""
    from cost_model.checkpoint import save_checkpoint
    from tests.test_cost_model import untrained_model

    model = untrained_model()
    save_checkpoint(model, folder / model.profile.id, metrics)
    return folder


def copy_shipped_profile(folder: Path, policy: bool | bytes = True, device_errors: bool | bytes = True) -> Path:
    """The shipped profile's cost model (trained ranges: fp32, SGD) and all-to-all copied to
    ``folder/<profile>/``, with its trained policy (``policy=True``), without one (``False``), or
    with these bytes as ``policy.pt`` (a corrupt policy); its measured device errors alike;
    returns ``folder``."""
    import shutil

    target = folder / SHIPPED_PROFILE.name
    target.mkdir(parents=True, exist_ok=True)
    for name in ("cost_model.pt", "communication.json"):
        shutil.copyfile(SHIPPED_PROFILE / name, target / name)
    for name, wanted in (("policy.pt", policy), ("device_errors.json", device_errors)):
        if wanted is True:
            shutil.copyfile(SHIPPED_PROFILE / name, target / name)
        elif wanted:
            (target / name).write_bytes(wanted)
    return folder


def synthetic_workload(num_tables: int = 80, seed: int = 0) -> Workload:
    pool = generate_pool(PoolConfig(size=500, seed=seed, max_log10_rows=7.0))  # every table < 10 GiB
    return sample_task(pool.train, num_tables, np.random.default_rng(seed), name=f"synthetic{num_tables}")


def plan_body(num_tables: int = 80, topology: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A POST /v1/plans body: ``num_tables`` synthetic tables (80 fit 8 x 16 GiB)."""
    workload = workload_to_dict(synthetic_workload(num_tables))
    return {"workload": workload, "topology": topology or EIGHT_DEVICES, **extra}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedProcess:
    """``autoshard serve`` in a subprocess on a free 127.0.0.1 port, ready when /readyz answers."""

    def __init__(self, model_dir: Path, env: dict[str, str] | None = None, timeout_s: float = 120) -> None:
        import subprocess

        import httpx

        from tests.conftest import autoshard_cmd

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "AUTOSHARD_NO_REEXEC": "1", **(env or {})}
        self.process = subprocess.Popen(
            [
                *autoshard_cmd(),
                "serve",
                "--port",
                str(self.port),
                "--model-dir",
                str(model_dir),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"autoshard serve exited {self.process.returncode}: {self.process.stdout.read()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"autoshard serve did not become ready in {timeout_s} s")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 20) -> int:
        """SIGTERM, then the exit code (0 for a graceful stop)."""

        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except Exception:
            self.process.kill()
            raise

    def output(self) -> str:
        return self.process.stdout.read() if self.process.stdout else ""


def kill_workers_while(request, pool) -> Any:
    """Send ``request()`` in a thread, kill every planning worker once it is planning, and
    return the request's answer."""
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.setdefault("response", request()))
    busy = {pid: _cpu_ticks(pid) for pid in pool._executor._processes}
    thread.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(_cpu_ticks(pid) > busy[pid] + 10 for pid in busy):
        time.sleep(0.02)  # until a worker has spent 0.1 s of CPU on the request
    for pid in list(pool._executor._processes):
        os.kill(pid, signal.SIGKILL)
    thread.join(60)
    return answer["response"]


def _cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
