"""Measure the all-to-all on this machine's ranks and fit ``time = latency + bytes / bandwidth``.

Each of ``world_size`` processes (gloo on the CPU, NCCL on GPUs) runs ``all_to_all_single`` on
buffers of several sizes after a barrier; the median over repeats of the slowest rank is fitted
by least squares. Bytes are those one device sends and receives (its buffer).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from autoshard.core.communication import CommunicationModel

SIZES_MB = (0.25, 1.0, 4.0, 16.0)


def _worker(rank: int, world: int, port: int, sizes_mb: Sequence[float], repeats: int, out: str, cuda: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    medians = []
    try:
        for mb in sizes_mb:
            n = max(world, int(mb * 2**20 / 4) // world * world)
            x, y = torch.randn(n, device=device), torch.empty(n, device=device)
            times = []
            for step in range(repeats + 2):
                dist.barrier()
                start = time.perf_counter()
                dist.all_to_all_single(y, x)
                if cuda:
                    torch.cuda.synchronize()
                elapsed = torch.tensor([time.perf_counter() - start])
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                if step >= 2:
                    times.append(float(elapsed) * 1e3)
            medians.append((n * 4, statistics.median(times)))
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(medians))


def measure_all_to_all(
    world_size: int = 2, sizes_mb: Sequence[float] = SIZES_MB, repeats: int = 10, device: str = "cpu"
) -> tuple[CommunicationModel, list[tuple[int, float]]]:
    """The fitted model and the (bytes, median ms) points it was fitted on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "points.json")
        mp.spawn(_worker, args=(world_size, port, tuple(sizes_mb), repeats, out, device == "cuda"), nprocs=world_size)
        points = [tuple(p) for p in json.loads(Path(out).read_text())]
    x = np.array([[1.0, b / 1e6] for b, _ in points])
    y = np.array([ms for _, ms in points])
    (latency, ms_per_mb), *_ = np.linalg.lstsq(x, y, rcond=None)
    bandwidth = 1.0 / max(ms_per_mb, 1e-9)  # MB per ms = GB/s
    label = f"{device} all_to_all, {world_size} ranks, {'nccl' if device == 'cuda' else 'gloo'}"
    return CommunicationModel(round(float(bandwidth), 4), round(max(float(latency), 0.0), 4), label), points
