"""The microbenchmark: real forward + backward + update of a set of tables on one device.

Where fbgemm-gpu(-cpu) is installed, a set runs as FBGEMM table-batched ops
(``SplitTableBatchedEmbeddingBagsCodegen``, the sparse update fused into backward): one op per
(precision, optimizer) group of its tables, as TorchRec groups them; fp32 or fp16 weights, exact
SGD, row-wise Adagrad or Adagrad. Else one torch ``EmbeddingBag`` per table with sparse gradients
and SGD (fp32 only). ``check_benchable`` refuses what a mode's kernels cannot train. CPU steps are timed with
``time.thread_time`` (CPU time of this thread, robust to other tenants) at a pinned thread count;
CUDA steps with CUDA events. Each measurement is ``warmups`` untimed steps and the median of
``repeats`` timed ones.

Tables larger than ``row_cap_bytes`` are benchmarked with fewer physical rows (recorded in the
trace); past a few times the last-level cache, more rows change random-access cost little.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import torch

from autoshard.core.errors import InputError
from autoshard.core.types import Optimizer, Table
from cost_model.bench.indices import bag_lengths, zipf_rows
from cost_model.features import op_key, physical_rows
from cost_model.profile import ExecutionMode
from cost_model.traces.records import BenchConfig, Measurement, Stats

# What FBGEMM TBE trains (fbgemm-gpu(-cpu) 1.8.0; docs/profiles.md, "Measurement settings"): weights
# bytes -> SparseType name, and optimizer -> EmbOptimType name. INT8/FP8 weights have no CPU
# backward kernel, BF16 no CPU forward kernel, and there is no fp64 SparseType.
TBE_PRECISIONS = {4: "FP32", 2: "FP16"}
TBE_OPTIMIZERS = {
    Optimizer.SGD: "EXACT_SGD",
    Optimizer.ROWWISE_ADAGRAD: "EXACT_ROWWISE_ADAGRAD",
    Optimizer.ADAGRAD: "EXACT_ADAGRAD",
}


def check_benchable(tables: Sequence[Table], mode: ExecutionMode) -> None:
    """Raise ``InputError`` (naming the table) for a precision or optimizer ``mode`` cannot train."""
    tbe = mode is ExecutionMode.FBGEMM_TBE
    precisions = TBE_PRECISIONS if tbe else {4: "FP32"}
    optimizers = TBE_OPTIMIZERS if tbe else {Optimizer.SGD: "SGD"}
    hint = "" if tbe else ", or benchmark with --mode fbgemm_tbe (fp16, rowwise_adagrad and adagrad)"
    for i, t in enumerate(tables):
        if t.bytes_per_element not in precisions:
            raise InputError(
                "bytes_per_element",
                f"table {t.name!r}: {mode.value} cannot train {t.bytes_per_element}-byte weights",
                f"use bytes_per_element {' or '.join(map(str, precisions))}{hint}",
                where=f"tables[{i}]",
            )
        if t.optimizer not in optimizers:
            raise InputError(
                "optimizer",
                f"table {t.name!r}: {mode.value} cannot run {t.optimizer.value}",
                f"use {' or '.join(o.value for o in optimizers)}{hint}",
                where=f"tables[{i}]",
            )


def groups(tables: Sequence[Table]) -> list[tuple[Table, ...]]:
    """Tables grouped by (precision, optimizer), groups in order of first appearance: one TBE op each."""
    out: dict[tuple[int, Optimizer], list[Table]] = {}
    for t in tables:
        out.setdefault(op_key(t), []).append(t)
    return [tuple(g) for g in out.values()]


def make_batch(
    tables: Sequence[Table], config: BenchConfig, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices and offsets in TBE layout (table-major bags), drawn from each table's distribution."""
    all_indices, all_lengths = [], []
    for table in tables:
        lengths = bag_lengths(config.batch_size, table.pooling_factor)
        rows = physical_rows(table, config.row_cap_bytes)
        all_indices.append(zipf_rows(rows, table.zipf_alpha, int(lengths.sum()), rng))
        all_lengths.append(lengths)
    lengths = np.concatenate(all_lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return (
        torch.from_numpy(np.concatenate(all_indices)).to(config.device),
        torch.from_numpy(offsets).to(config.device),
    )


Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _build_tbe(tables: Sequence[Table], config: BenchConfig) -> tuple[Step, Callable[[torch.Tensor], None]]:
    """One TBE op per (precision, optimizer) group; ``tables`` must list each group contiguously."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    cuda = config.device.startswith("cuda")
    location = EmbeddingLocation.DEVICE if cuda else EmbeddingLocation.HOST
    compute = ComputeDevice.CUDA if cuda else ComputeDevice.CPU
    ops, bounds, start = [], [], 0
    for group in groups(tables):
        specs = [(physical_rows(t, config.row_cap_bytes), t.embedding_dim, location, compute) for t in group]
        ops.append(
            SplitTableBatchedEmbeddingBagsCodegen(
                specs,
                optimizer=EmbOptimType[TBE_OPTIMIZERS[group[0].optimizer]],
                weights_precision=SparseType[TBE_PRECISIONS[group[0].bytes_per_element]],
                learning_rate=config.learning_rate,
                device=torch.device(config.device),
            )
        )
        bounds.append((start * config.batch_size, (start + len(group)) * config.batch_size))
        start += len(group)

    def forward(indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        if len(ops) == 1:
            return ops[0](indices, offsets)
        outs = []
        for op, (first, last) in zip(ops, bounds):  # the group's bags: offsets[first : last + 1]
            begin = offsets[first]
            outs.append(op(indices[begin : offsets[last]], offsets[first : last + 1] - begin))
        return torch.cat(outs, dim=1)

    return forward, (lambda out: out.backward(torch.ones_like(out)))


def _build_embedding_bags(tables: Sequence[Table], config: BenchConfig) -> tuple[Step, Callable[[torch.Tensor], None]]:
    bags = [
        torch.nn.EmbeddingBag(
            physical_rows(t, config.row_cap_bytes), t.embedding_dim, mode="sum", sparse=True, device=config.device
        )
        for t in tables
    ]
    optimizer = torch.optim.SGD([p for b in bags for p in b.parameters()], lr=config.learning_rate)
    batch = config.batch_size

    def forward(indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        outs = []
        for i, bag in enumerate(bags):  # bags of table i are offsets[i*B : (i+1)*B + 1]
            start, end = offsets[i * batch], offsets[(i + 1) * batch]
            outs.append(bag(indices[start:end], offsets[i * batch : (i + 1) * batch] - start))
        return torch.cat(outs, dim=1)

    def backward(out: torch.Tensor) -> None:
        out.backward(torch.ones_like(out))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return forward, backward


_T = TypeVar("_T")


class _Timer:
    """Thread CPU time on the CPU; CUDA events on a GPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def run(self, fn: Callable[[], _T]) -> tuple[_T, float]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = fn()
            end.record()
            torch.cuda.synchronize()
            return result, start.elapsed_time(end)
        t0 = time.thread_time()
        result = fn()
        return result, (time.thread_time() - t0) * 1e3


MAX_REPEATS = 200  # ``min_total_ms`` repeats a short step at most this often


def measure(tables: Sequence[Table], config: BenchConfig, seed: int = 0, min_total_ms: float = 0.0) -> Measurement:
    """Build the set's execution, then time warm-ups + repeats of forward and backward+update;
    with ``min_total_ms``, keep repeating (up to ``MAX_REPEATS``) until the timed steps add up to
    that much: a few repeats of a sub-millisecond step are too noisy to rank plans by
    (docs/decisions.md, 24).

    Raises ``InputError`` for a table ``config.mode`` cannot train (``check_benchable``)."""
    if not tables:
        raise ValueError("measure() needs at least one table")
    check_benchable(tables, config.mode)
    tables = [t for group in groups(tables) for t in group]  # each group's tables contiguous
    torch.set_num_threads(config.threads)
    rng = np.random.default_rng(seed)
    build = _build_tbe if config.mode is ExecutionMode.FBGEMM_TBE else _build_embedding_bags
    forward, backward = build(tables, config)
    batches = [make_batch(tables, config, rng) for _ in range(2)]
    timer = _Timer(config.device)
    fwd: list[float] = []
    bwd: list[float] = []
    step, timed_ms = 0, 0.0
    while step < config.warmups + config.repeats or (timed_ms < min_total_ms and len(fwd) < MAX_REPEATS):
        indices, offsets = batches[step % len(batches)]
        out, f_ms = timer.run(lambda: forward(indices, offsets))
        _, b_ms = timer.run(lambda: backward(out))
        if step >= config.warmups:
            fwd.append(f_ms)
            bwd.append(b_ms)
            timed_ms += f_ms + b_ms
        step += 1
    return Measurement(Stats.of(fwd), Stats.of(bwd), Stats.of([f + b for f, b in zip(fwd, bwd)]))
