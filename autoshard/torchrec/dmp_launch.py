"""Where the ranks of a DMP verification run: on this host's loopback (``torch.multiprocessing``
spawns them), or each emulated host's ranks in its own network namespace, the hosts joined by a
tc-shaped veth pair (``cost_model.bench.netns.EmulatedHosts``, as `bench comm` measures the
inter-host tier), launched there by ``torchrun`` (one launch a host, ``--nnodes`` = hosts).

A namespaced rank starts as ``python -m autoshard.torchrec.dmp_rank JOB``: ``JOB`` is a pickle of
what ``mp.spawn`` would pass it (the verification's config, the plans, the built workload, the
result file); torchrun sets its rank and world. Gloo talks over the veth (``GLOO_SOCKET_IFNAME``).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoshard.core.errors import InputError
from cost_model.profile import MALLOC_SETTINGS

if TYPE_CHECKING:
    from autoshard.torchrec.dmp_verify import DmpVerifyConfig

_ROOT = Path(__file__).resolve().parents[2]
HOSTS = 2  # EmulatedHosts makes two
LINK_PORT = 29511


def loopback_network() -> str:
    return "loopback (every rank on this host)"


def check_namespaces(config: DmpVerifyConfig) -> None:
    """``InputError`` where the ranks cannot run in emulated hosts here."""
    from cost_model.bench.netns import missing_privilege

    problem = missing_privilege()
    if problem:
        raise InputError("namespaces", problem, "run the ranks on loopback (namespaces off), or run as root")
    if config.run.world_size != HOSTS * config.ranks_per_host:
        raise InputError(
            "local_world_size",
            f"emulated hosts are {HOSTS}; {config.run.world_size} ranks of {config.ranks_per_host} a host "
            f"make {config.run.world_size // config.ranks_per_host}",
            f"verify on {HOSTS} hosts (local_world_size = world_size / {HOSTS})",
        )


def run_in_namespaces(config: DmpVerifyConfig, job: tuple[Any, ...], folder: Path) -> str:
    """Run every rank (``job``: ``_rank``'s arguments after its rank and port) in its emulated
    host; returns the network as the report names it."""
    from cost_model.bench.netns import EmulatedHosts, LinkShape

    path = folder / "job.pkl"
    path.write_bytes(pickle.dumps(job))
    shape = LinkShape(rate_gbit=config.link_gbit)
    per_host = config.ranks_per_host
    env = _environment(config)
    with EmulatedHosts(shape) as hosts:
        launches = []
        for host in range(HOSTS):
            argv = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nnodes={HOSTS}",
                f"--node-rank={host}",
                f"--nproc-per-node={per_host}",
                f"--master-addr={hosts.address(0)}",
                f"--master-port={LINK_PORT}",
                "-m",
                "autoshard.torchrec.dmp_rank",
                str(path),
            ]
            launches.append(_start(hosts.command(host, argv), env, folder / f"host{host}.log"))
        _wait(launches, config.run.timeout_s * 4)
    return f"{HOSTS} emulated hosts of {per_host} in network namespaces, {shape.describe()}"


def _environment(config: DmpVerifyConfig) -> dict[str, str]:
    env = {**os.environ, **MALLOC_SETTINGS, "OMP_NUM_THREADS": str(config.run.threads_per_rank)}
    env["GLOO_SOCKET_IFNAME"] = "aslink"  # the veth, not the namespace's loopback
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _start(argv: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen, Path]:
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def _wait(launches: list[tuple[subprocess.Popen, Path]], timeout_s: float) -> None:
    """Wait for every host's launch; on a failure or the timeout, stop the others (the process
    groups this module started) and raise with the failed launch's log tail."""
    from autoshard.torchrec.dmp_run import DistributedRunError

    try:
        for host, (proc, log) in enumerate(launches):
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise DistributedRunError(f"emulated host {host} did not finish in {timeout_s:.0f} s") from None
            if code != 0:
                tail = "\n".join(log.read_text().splitlines()[-20:])
                raise DistributedRunError(f"emulated host {host}'s ranks failed (exit {code}):\n{tail}")
    finally:
        for proc, _ in launches:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)


__all__ = ["HOSTS", "check_namespaces", "loopback_network", "run_in_namespaces"]
