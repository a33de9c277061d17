"""One rank of `bench comm`, launched by torchrun: time the collectives a sharded DMP step runs.

Run as ``torchrun ... -m cost_model.bench.comm_worker --sizes 65536,1048576 --repeats 10 --out
F.json``. Every rank joins each collective on a buffer of each size (bytes a rank holds: its
all-to-all input, its reduce-scatter input, its all-gather output, its all-reduce tensor), after a
barrier; the time of one call is the slowest rank's wall time (waiting on the link is the cost, so
wall time, not thread time), and rank 0 writes the median over ``repeats`` (after 2 warm-ups) for
every (collective, size) to ``--out``. The collectives are TorchRec's, as DMP runs them:

- ``input_dist``: the ids' all-to-all (int64 ids, ``all_to_all_single``);
- ``all_to_all``: the pooled embeddings of table-, column- and table-column-wise shards (fp32);
- ``reduce_scatter``: the partial sums of row-wise, table-row-wise and grid shards (forward);
- ``all_gather``: their gradients (backward);
- ``all_reduce``: a data-parallel table's gradient.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

COLLECTIVES = ("input_dist", "all_to_all", "reduce_scatter", "all_gather", "all_reduce")
WARMUPS = 2


def _call(name: str, nbytes: int, world: int, device: torch.device) -> tuple[Callable[[], object], int]:
    """One call of collective ``name`` on ``nbytes`` a rank (rounded down to whole elements per
    rank), and the bytes a rank then holds."""
    dtype = torch.int64 if name == "input_dist" else torch.float32
    n = max(world, nbytes // dtype.itemsize // world * world)
    x = torch.ones(n, dtype=dtype, device=device)
    if name in ("input_dist", "all_to_all"):
        y = torch.empty_like(x)
        return (lambda: dist.all_to_all_single(y, x)), n * dtype.itemsize
    if name == "reduce_scatter":
        part = torch.empty(n // world, dtype=dtype, device=device)
        return (lambda: dist.reduce_scatter_single(part, x)), n * dtype.itemsize
    if name == "all_gather":
        part = torch.ones(n // world, dtype=dtype, device=device)
        return (lambda: dist.all_gather_single(x, part)), n * dtype.itemsize
    return (lambda: dist.all_reduce(x)), n * dtype.itemsize


def _median_ms(call: Callable[[], object], repeats: int, cuda: bool) -> float:
    times = []
    for step in range(repeats + WARMUPS):
        dist.barrier()
        start = time.perf_counter()
        call()
        if cuda:
            torch.cuda.synchronize()
        elapsed = torch.tensor([time.perf_counter() - start], device="cuda" if cuda else "cpu")
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if step >= WARMUPS:
            times.append(float(elapsed) * 1e3)
    return statistics.median(times)


def measure(collectives: list[str], sizes: list[int], repeats: int, cuda: bool) -> dict[str, list[list[float]]]:
    """``{collective: [[bytes a rank holds, median ms], ...]}`` over ``sizes``."""
    world = dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    out: dict[str, list[list[float]]] = {}
    for name in collectives:
        out[name] = []
        for size in sizes:
            call, held = _call(name, size, world, device)
            out[name].append([held, _median_ms(call, repeats, cuda)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", required=True, help="bytes a rank holds, comma-separated")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("nccl" if args.cuda else "gloo")
    try:
        points = measure(args.collectives.split(","), [int(s) for s in args.sizes.split(",")], args.repeats, args.cuda)
        if dist.get_rank() == 0:
            result = {"world_size": dist.get_world_size(), "backend": dist.get_backend(), "points": points}
            Path(args.out).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
