"""One rank of `bench comm`, launched by torchrun: time TorchRec's dist modules as a sharded DMP step runs them.

Run by ``cost_model.bench.communication`` as ``torchrun ... -m autoshard.torchrec.comm_worker
--sizes 65536,1048576 --repeats 10 --out F.json``. Every rank calls each module on inputs of each
size (``size``: the bytes a rank holds, counted as ``autoshard.core.collectives`` counts them),
after a barrier; the time of one call is the slowest rank's wall time (waiting on the link is the
cost, so wall time, not thread time), and rank 0 writes the median over ``repeats`` (after 2
warm-ups) for every (collective, size) to ``--out``. Each "op" is what one DMP iteration runs of
a collective, with TorchRec's own CPU work in it (KJT permutes, bucketizing, splits, copies),
which bare ``torch.distributed`` calls miss:

- ``input_dist``: the ids' ``KJTAllToAll`` (lengths, then ids) of a KeyedJaggedTensor of W
  features (one a rank, ``POOLING`` ids a sample, int64 as ``dmp_run`` feeds DMP), the way
  ``TwSparseFeaturesDist`` runs it; row-wise shards' ``RwSparseFeaturesDist`` also bucketizes the
  ids first (``input_dist_row_wise``);
- ``all_to_all``: ``PooledEmbeddingsAllToAll`` forward and its backward (the gradients), fp32
  pooled outputs of ``DIM`` columns a rank;
- ``reduce_scatter`` / ``all_gather``: ``PooledEmbeddingsReduceScatter`` forward / its backward;
- ``all_reduce``: data-parallel gradients as DMP's DDP runs them: flattened into one bucket,
  all-reduced, averaged and copied back (``autoshard.torchrec.dmp_steps`` does the same).

A point is (bytes a rank holds over the op, median ms of the op); ``comm_fit`` turns it into bytes
sent per call.
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

from autoshard.core.collectives import ID_BYTES, LENGTH_BYTES, OUTPUT_BYTES

COLLECTIVES = ("input_dist", "input_dist_row_wise", "all_to_all", "reduce_scatter", "all_gather", "all_reduce")
WARMUPS = 2
POOLING = 10  # ids a sample of the swept KJTs
DIM = 64  # pooled output columns a rank of the swept all-to-alls and reduce-scatters
ROWS = 1_000_000  # the row-wise tables' hash size (ids drawn below it)


def _kjt(samples: int, world: int, device: torch.device) -> object:
    """A KeyedJaggedTensor of ``world`` features of ``samples`` bags of ``POOLING`` ids each."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    generator = torch.Generator().manual_seed(0)
    values = torch.randint(0, ROWS, (world * samples * POOLING,), generator=generator, dtype=torch.int64)
    lengths = torch.full((world * samples,), POOLING, dtype=torch.int64)
    keys = [f"f{i}" for i in range(world)]
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values.to(device), lengths=lengths.to(device))


def _input_dist(nbytes: int, world: int, device: torch.device, row_wise: bool) -> tuple[Callable[[], object], int]:
    from torchrec.distributed.sharding.rw_sharding import RwSparseFeaturesDist
    from torchrec.distributed.sharding.tw_sharding import TwSparseFeaturesDist

    per_sample = ID_BYTES * POOLING + LENGTH_BYTES
    samples = max(1, nbytes // (world * per_sample))
    features = _kjt(samples, world, device)
    pg = dist.group.WORLD
    if row_wise:
        module: torch.nn.Module = RwSparseFeaturesDist(pg, world, [ROWS] * world, device=device)
    else:
        module = TwSparseFeaturesDist(pg, [1] * world)
    return (lambda: module(features).wait().wait()), world * samples * per_sample


def _all_to_all(nbytes: int, world: int, device: torch.device) -> tuple[Callable[[], object], int]:
    from torchrec.distributed.dist_data import PooledEmbeddingsAllToAll

    samples = max(1, nbytes // (2 * world * DIM * OUTPUT_BYTES))  # a rank's batch; forward + backward
    module = PooledEmbeddingsAllToAll(dist.group.WORLD, [DIM] * world, device=device)
    local = torch.ones(world * samples, DIM, device=device, requires_grad=True)

    def call() -> None:
        out = module(local).wait()
        out.backward(torch.ones_like(out))

    return call, 2 * world * samples * DIM * OUTPUT_BYTES


def _reduce_scatter(nbytes: int, world: int, device: torch.device, backward: bool) -> tuple[Callable[[], object], int]:
    """Forward (reduce-scatter) or backward (all-gather) of ``PooledEmbeddingsReduceScatter``."""
    from torchrec.distributed.dist_data import PooledEmbeddingsReduceScatter

    samples = max(1, nbytes // (world * DIM * OUTPUT_BYTES))  # a rank's batch
    module = PooledEmbeddingsReduceScatter(dist.group.WORLD)
    local = torch.ones(world * samples, DIM, device=device, requires_grad=True)
    held = world * samples * DIM * OUTPUT_BYTES
    if not backward:
        return (lambda: module(local).wait()), held
    state: dict[str, torch.Tensor] = {}

    def prepare() -> None:
        state["out"] = module(local).wait()

    def call() -> None:
        state["out"].backward(torch.ones_like(state["out"]))

    return _Prepared(prepare, call), held


def _all_reduce(nbytes: int, world: int, device: torch.device) -> tuple[Callable[[], object], int]:
    """Two replicas' gradients, as DDP's bucket all-reduces them (mean)."""
    n = max(2, nbytes // 4)
    grads = [torch.ones(n // 2, device=device), torch.ones(n - n // 2, device=device)]

    def call() -> None:
        flat = torch.cat(grads)
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for i, g in enumerate(grads):
            grads[i] = flat[offset : offset + g.numel()].view_as(g)
            offset += g.numel()

    return call, n * 4


class _Prepared:
    """A call with an untimed preparation before each (a backward needs its forward)."""

    def __init__(self, prepare: Callable[[], object], call: Callable[[], object]) -> None:
        self.prepare, self.call = prepare, call

    def __call__(self) -> object:
        return self.call()


def _op(name: str, nbytes: int, world: int, device: torch.device) -> tuple[Callable[[], object], int]:
    """One op of collective ``name`` on about ``nbytes`` a rank, and the bytes a rank then holds."""
    if name in ("input_dist", "input_dist_row_wise"):
        return _input_dist(nbytes, world, device, row_wise=name == "input_dist_row_wise")
    if name == "all_to_all":
        return _all_to_all(nbytes, world, device)
    if name in ("reduce_scatter", "all_gather"):
        return _reduce_scatter(nbytes, world, device, backward=name == "all_gather")
    if name == "all_reduce":
        return _all_reduce(nbytes, world, device)
    raise ValueError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")


def _median_ms(call: Callable[[], object], repeats: int, cuda: bool) -> float:
    times = []
    for step in range(repeats + WARMUPS):
        if isinstance(call, _Prepared):
            call.prepare()
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
            call, held = _op(name, size, world, device)
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
        dist.barrier()  # no rank tears gloo down while another still writes or sends
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
