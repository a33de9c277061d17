"""`bench comm`: measure the collectives of a sharded DMP step per link tier, and fit each one.

Ranks are launched with torchrun (gloo on the CPU, NCCL on GPUs), two per tier:

- **intra** (within a host): one torchrun of 2 ranks on this machine's loopback;
- **inter** (between hosts): two emulated hosts (``netns.EmulatedHosts``: network namespaces and a
  veth pair shaped by ``tc`` to ``LinkShape``'s rate and delay), one torchrun of one rank in each,
  so every byte crosses the shaped link. It needs root; without it, or left out of ``tiers``, the
  inter tier takes TorchRec's constant, marked "declared, not measured".

Each rank runs ``WORKER`` (``autoshard.torchrec.comm_worker``, launched, not imported: only
``autoshard.torchrec`` imports TorchRec): TorchRec's dist modules as a DMP step runs them (``KJTAllToAll``,
``PooledEmbeddingsAllToAll``, ``PooledEmbeddingsReduceScatter``, DDP's bucketed all-reduce), so
the fits price TorchRec's CPU work around the transfers (permutes, splits, copies), which bare
``torch.distributed`` collectives miss; ``comm_fit`` fits latency (the fixed cost of a call) and
bandwidth per (collective, tier), and the result is a ``CommunicationModel`` whose fits keep
their points. Timings are wall time (waiting on the link is the cost); the ranks get the
allocator settings (``MALLOC_SETTINGS``) and one thread each, as every measurement here does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from autoshard.core.collectives import Collective, LinkFit, Tier
from autoshard.core.communication import CommunicationModel
from autoshard.core.errors import InputError, MeasurementError
from autoshard.core.types import GIB, INTER_HOST_BW_GBPS, INTRA_HOST_BW_GBPS
from cost_model.bench.comm_fit import fit_collective
from cost_model.bench.netns import EmulatedHosts, LinkShape, require_root
from cost_model.profile import MALLOC_SETTINGS, cpu_model, device_name

SIZES = (16 * 1024, 64 * 1024, 256 * 1024, 1 << 20, 4 << 20, 16 << 20)
"""Bytes a rank holds per op: 16 KiB (the fixed cost of a call) to 16 MiB (bandwidth)."""
MODULES = "TorchRec's dist modules as DMP runs them"
WORKER = "autoshard.torchrec.comm_worker"
RANKS = 2
TIMEOUT_S = 1800
_ROOT = Path(__file__).resolve().parents[2]


def measure_communication(
    tiers: Sequence[Tier] = (Tier.INTRA, Tier.INTER),
    sizes: Sequence[int] = SIZES,
    repeats: int = 10,
    device: str = "cpu",
    link: LinkShape | None = None,
    rounds: int = 3,
) -> CommunicationModel:
    """Measure every collective on each of ``tiers`` and fit it; a tier left out is declared
    (TorchRec's constant). ``link``: the emulated inter-host link (default 10 Gbit/s). The tiers
    are measured ``rounds`` times, interleaved, and each point keeps its fastest round's median:
    other processes on the machine only ever add time."""
    if not tiers:
        raise InputError("--tiers", "names no tier", "pass intra, inter or intra,inter")
    if rounds < 1:
        raise InputError("--rounds", f"must be >= 1, got {rounds}", "e.g. --rounds 3")
    link = link or LinkShape()
    if importlib.util.find_spec("torchrec") is None:
        raise InputError(
            "torchrec", "is not installed: bench comm times its dist modules", "install the torchrec extra"
        )
    if Tier.INTER in tiers:
        require_root()
    measured: dict[Tier, list[dict]] = {t: [] for t in Tier if t in tiers}
    for _ in range(rounds):
        for tier, runs in measured.items():
            runs.append(_measured_tier(tier, sizes, repeats, device, link))
    fits: list[LinkFit] = []
    labels = []
    for tier in Tier:
        if tier not in measured:
            fits += declared_fits(tier)
            labels.append(f"{tier.value}: declared, not measured (TorchRec's {_declared_gibps(tier):g} GiB/s)")
            continue
        raw = fastest(measured[tier])
        where = "loopback" if tier is Tier.INTRA else f"2 emulated hosts, {link.describe()}"
        fits += [
            fit_collective(Collective(name), tier, points, raw["world_size"], where)
            for name, points in raw["points"].items()
        ]
        labels.append(f"{tier.value}: {raw['world_size']} ranks ({raw['backend']}), {where}")
    label = f"{_machine(device)}; {MODULES}; " + "; ".join(labels) + f"; the fastest of {rounds} rounds' medians"
    return CommunicationModel.tiered(fits, label)


def _measured_tier(tier: Tier, sizes: Sequence[int], repeats: int, device: str, link: LinkShape) -> dict:
    """One sweep of ``tier``; a failed launch is run once more (a gloo rank can abort on a loaded
    machine), and a second failure raises its ``MeasurementError``."""

    def sweep() -> dict:
        return _run_intra(sizes, repeats, device) if tier is Tier.INTRA else _run_inter(sizes, repeats, device, link)

    try:
        return sweep()
    except MeasurementError:
        return sweep()


def _tail(log: Path) -> str:
    return "\n".join(log.read_text().splitlines()[-15:])


def fastest(runs: Sequence[dict]) -> dict:
    """One worker result of several rounds of it: each (collective, size) at its fastest median."""
    points = {
        name: [[held, min(run["points"][name][i][1] for run in runs)] for i, (held, _) in enumerate(first)]
        for name, first in runs[0]["points"].items()
    }
    return {**runs[0], "points": points}


def declared_fits(tier: Tier, gibps: float | None = None, link: str = "TorchRec 1.8.0's constant") -> list[LinkFit]:
    """Every collective on ``tier`` at a declared bandwidth (GiB/s; default TorchRec's), latency 0."""
    gbps = (gibps if gibps is not None else _declared_gibps(tier)) * GIB / 1e9
    return [LinkFit(c, tier, 0.0, round(gbps, 4), "declared", (), 0, link) for c in Collective]


def declared_model(label: str) -> CommunicationModel:
    """TorchRec's constants on both tiers (600 GiB/s within a host, 12.5 between), declared, not
    measured: a GPU profile made where no GPUs are."""
    return CommunicationModel.tiered(declared_fits(Tier.INTRA) + declared_fits(Tier.INTER), label)


def _declared_gibps(tier: Tier) -> float:
    return INTRA_HOST_BW_GBPS if tier is Tier.INTRA else INTER_HOST_BW_GBPS


def _machine(device: str) -> str:
    name = device_name("cuda:0" if device == "cuda" else "cpu")
    cpu = f" ({cpu_model('cpu')})" if cpu_model("cpu") else ""
    return f"{device}: {name}{cpu}, {os.cpu_count()} cores, torch {torch.__version__.split('+')[0]}"


def _worker_argv(nnodes: int, node_rank: int, per_node: int, addr: str, port: int, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        f"--nproc-per-node={per_node}",
        f"--master-addr={addr}",
        f"--master-port={port}",
        "-m",
        WORKER,
        *args,
    ]


def _env(device: str, interface: str) -> dict[str, str]:
    env = {**os.environ, **MALLOC_SETTINGS, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": interface}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    if device == "cuda" and interface != "lo":  # NCCL across the emulated link: sockets only
        env.update(NCCL_SOCKET_IFNAME=interface, NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_IB_DISABLE="1")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_args(sizes: Sequence[int], repeats: int, device: str, out: Path) -> list[str]:
    args = ["--sizes", ",".join(str(int(s)) for s in sizes), "--repeats", str(repeats), "--out", str(out)]
    args += ["--collectives", ",".join(c.value for c in Collective)]
    return [*args, "--cuda"] if device == "cuda" else args


def _run_intra(sizes: Sequence[int], repeats: int, device: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "points.json"
        argv = _worker_argv(1, 0, RANKS, "127.0.0.1", _free_port(), _worker_args(sizes, repeats, device, out))
        _wait([_start(argv, _env(device, "lo"), Path(tmp) / "intra.log")])
        return json.loads(out.read_text())


def _run_inter(sizes: Sequence[int], repeats: int, device: str, link: LinkShape) -> dict:
    with tempfile.TemporaryDirectory() as tmp, EmulatedHosts(link) as hosts:
        out = Path(tmp) / "points.json"
        launches = []
        for host in range(hosts.num_hosts):
            args = _worker_args(sizes, repeats, device, out if host == 0 else Path(tmp) / f"host{host}.json")
            argv = _worker_argv(hosts.num_hosts, host, RANKS // hosts.num_hosts, hosts.address(0), 29500, args)
            launches.append(_start(hosts.command(host, argv), _env(device, "aslink"), Path(tmp) / f"host{host}.log"))
        _wait(launches)
        return json.loads(out.read_text())


def _start(argv: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen, Path]:
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def _wait(launches: list[tuple[subprocess.Popen, Path]]) -> None:
    """Wait for every launch; as soon as one fails, or at the timeout, stop the others (their
    process groups, which this function started) and raise with the failed launch's log tail."""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            codes = [proc.poll() for proc, _ in launches]
            for (_, log), code in zip(launches, codes):
                if code not in (None, 0):
                    raise MeasurementError(f"a `bench comm` launch failed (exit {code}):\n{_tail(log)}")
            if all(code == 0 for code in codes):
                return
            if time.monotonic() > deadline:
                raise MeasurementError(f"a `bench comm` launch ran past {TIMEOUT_S} s:\n{_tail(launches[0][1])}")
            time.sleep(0.1)
    finally:
        for proc, _ in launches:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
