"""`autoshard bench collect`: sample table sets from a seeded synthetic pool, measure them on this
device and append traces (``cost_model.bench.collect``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from autoshard.cli.support import (
    ADVANCED,
    MEASUREMENT,
    OUTPUT,
    console,
    ensure_malloc_settings,
    friendly_errors,
    progress_bar,
)
from autoshard.core.errors import InputError

SAMPLES, POOL = "Samples", "Table pool"  # help panels beside support's

Out = Annotated[
    Path, typer.Option(help="Trace file to append to (.jsonl); resumed if it exists.", rich_help_panel=OUTPUT)
]
Samples = Annotated[int, typer.Option(min=0, help="Table sets of 1..max-tables tables.", rich_help_panel=SAMPLES)]
MaxTables = Annotated[
    int, typer.Option(min=1, help="Tables in the largest of the --samples sets.", rich_help_panel=SAMPLES)
]
LargeSamples = Annotated[
    int, typer.Option(min=0, help="Extra sets of max-tables+1..large-max-tables.", rich_help_panel=SAMPLES)
]
LargeMaxTables = Annotated[
    int, typer.Option(min=2, help="Tables in the largest of the --large-samples sets.", rich_help_panel=SAMPLES)
]
Passes = Annotated[
    int,
    typer.Option(
        min=1,
        help="Measure every sample this many times, pass by pass; its label is the median.",
        rich_help_panel=SAMPLES,
    ),
]
BatchSizes = Annotated[
    str,
    typer.Option(
        help="Batch sizes drawn for each sample, comma-separated (e.g. 512,1024,2048,4096,8192,16384; "
        "one value: every sample's).",
        rich_help_panel=SAMPLES,
    ),
]
Precisions = Annotated[
    str,
    typer.Option(
        help="Bytes per element drawn for each pool table, comma-separated from 1, 2, 4, 8 (e.g. 4,2 for fp32 "
        "and fp16; fbgemm_tbe only beyond 4).",
        rich_help_panel=SAMPLES,
    ),
]
Optimizers = Annotated[
    str,
    typer.Option(
        help="Optimizers drawn for each pool table, comma-separated from sgd, rowwise_adagrad, adagrad "
        "(fbgemm_tbe only beyond sgd).",
        rich_help_panel=SAMPLES,
    ),
]
ColumnShards = Annotated[
    float,
    typer.Option(
        min=0,
        max=1,
        help="Share of each set's tables measured as a column shard of them (a half, quarter or eighth of the "
        "dim), as split plans hold.",
        rich_help_panel=SAMPLES,
    ),
]
RowShards = Annotated[
    float,
    typer.Option(
        min=0,
        max=1,
        help="Share of each set's tables measured as one row block of them (row_wise: R / k rows, k from "
        "2-32, the block's share of the lookups, possibly under 1 a bag).",
        rich_help_panel=SAMPLES,
    ),
]
Replicas = Annotated[
    float,
    typer.Option(
        min=0,
        max=1,
        help="Share of each set's tables measured as a data-parallel replica (all rows, pooling factor / W, "
        "W from 8-128); at most 1 - --row-shards.",
        rich_help_panel=SAMPLES,
    ),
]
Singles = Annotated[bool, typer.Option(help="Also measure every pool table alone.", rich_help_panel=SAMPLES)]
Seed = Annotated[int, typer.Option(min=0, help="Seed of the sampled sets and index batches.", rich_help_panel=SAMPLES)]
PoolSize = Annotated[int, typer.Option(min=2, help="Synthetic pool size (train + test).", rich_help_panel=POOL)]
PoolSeed = Annotated[int, typer.Option(min=0, help="Seed of the synthetic table pool.", rich_help_panel=POOL)]
MinLog10Rows = Annotated[
    float,
    typer.Option(
        min=0,
        help="Pool tables' rows are log-uniform from 10^this (0: tables down to 1 row, as Criteo's smallest).",
        rich_help_panel=POOL,
    ),
]
Dims = Annotated[
    str | None,
    typer.Option(
        help="Pool tables' dims drawn uniformly from these, comma-separated (e.g. 16,32,64; default: 4-256, "
        "mostly 16-128).",
        rich_help_panel=POOL,
    ),
]
OneHotShare = Annotated[
    float,
    typer.Option(
        min=0,
        max=1,
        help="Share of pool tables with pooling factor 1 (1: every table one-hot, as Criteo's).",
        rich_help_panel=POOL,
    ),
]
Pooling = Annotated[
    str | None,
    typer.Option(
        help="LOW,HIGH: draw every pool table's pooling factor log-uniformly from it (e.g. 10,200: heavy "
        "multi-hot tables; default: 30% one-hot, else log-normal).",
        rich_help_panel=POOL,
    ),
]
Device = Annotated[str, typer.Option(help="cpu, cuda, or auto.", rich_help_panel=MEASUREMENT)]
Mode = Annotated[
    str | None,
    typer.Option(help="fbgemm_tbe or embedding_bag (default: fbgemm_tbe if installed).", rich_help_panel=MEASUREMENT),
]
RowCapMb = Annotated[
    int, typer.Option(min=1, help="Benchmark at most this many MiB of rows per table.", rich_help_panel=MEASUREMENT)
]
SetMemoryGb = Annotated[
    float,
    typer.Option(
        help="Benchmarked GiB (after the row cap) of one set, at most: a set stops growing at it (large sets of "
        "big tables need more; mind the host's memory).",
        rich_help_panel=MEASUREMENT,
    ),
]
Warmups = Annotated[int, typer.Option(min=0, help="Untimed steps before each measurement.", rich_help_panel=ADVANCED)]
Repeats = Annotated[
    int, typer.Option(min=1, help="Timed steps per measurement; the median is kept.", rich_help_panel=ADVANCED)
]


@friendly_errors
def collect_cmd(
    out: Out,
    samples: Samples = 1000,
    max_tables: MaxTables = 10,
    large_samples: LargeSamples = 0,
    large_max_tables: LargeMaxTables = 20,
    passes: Passes = 1,
    batch_sizes: BatchSizes = "2048",
    precisions: Precisions = "4",
    optimizers: Optimizers = "sgd",
    column_shards: ColumnShards = 0.0,
    row_shards: RowShards = 0.0,
    replicas: Replicas = 0.0,
    singles: Singles = True,
    seed: Seed = 0,
    pool_size: PoolSize = 500,
    pool_seed: PoolSeed = 0,
    min_log10_rows: MinLog10Rows = 2.0,
    dims: Dims = None,
    one_hot_share: OneHotShare = 0.3,
    pooling: Pooling = None,
    device: Device = "auto",
    mode: Mode = None,
    row_cap_mb: RowCapMb = 128,
    set_memory_gb: SetMemoryGb = 3.0,
    warmups: Warmups = 2,
    repeats: Repeats = 5,
) -> None:
    """Sample random table sets from a synthetic pool, measure them, and append traces."""
    batches = positive_ints("--batch-sizes", batch_sizes)  # before re-exec and the heavy imports: a typo fails at once
    precision_values, optimizer_values = _precisions(precisions), _optimizers(optimizers)
    dim_values = positive_ints("--dims", dims) if dims is not None else ()
    pooling_range = _pooling_range(pooling) if pooling is not None else None
    ensure_malloc_settings()
    from autoshard.core.synthetic import PoolConfig
    from cost_model.bench.collect import CollectConfig

    pool = PoolConfig(pool_size, seed=pool_seed, min_log10_rows=min_log10_rows, dims=dim_values)
    config = CollectConfig(
        bench=_bench_config(device, mode, batches[0] if len(batches) == 1 else 2048, warmups, repeats, row_cap_mb),
        pool=replace(pool, one_hot_share=one_hot_share, pooling=pooling_range),
        samples=samples,
        max_tables=max_tables,
        large_samples=large_samples,
        large_max_tables=large_max_tables,
        passes=passes,
        singles=singles,
        seed=seed,
        precisions=precision_values,
        optimizers=optimizer_values,
        batch_sizes=batches if len(batches) > 1 else (),
        column_shard_share=column_shards,
        row_shard_share=row_shards,
        replica_share=replicas,
        set_memory_gb=set_memory_gb,
    )
    console.print(f"measured {_collect(config, out)} samples into {out}")


def _bench_config(device: str, mode: str | None, batch_size: int, warmups: int, repeats: int, row_cap_mb: int):
    """The benchmark settings of ``bench collect``: ``InputError`` naming ``--device`` or ``--mode``
    where this machine cannot run them."""
    from cost_model.profile import ExecutionMode, default_device, default_mode, fbgemm_available
    from cost_model.traces.records import BenchConfig

    device = default_device() if device == "auto" else device
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError("--device", f"unknown device {device!r}", "use cpu, cuda or auto")
    require_cuda_if_asked(device)
    try:
        chosen = ExecutionMode(mode) if mode else default_mode()
    except ValueError:
        raise InputError("mode", f"unknown mode {mode!r}", "use fbgemm_tbe or embedding_bag") from None
    if chosen is ExecutionMode.FBGEMM_TBE and not fbgemm_available():
        raise InputError(
            "mode", "fbgemm_tbe needs fbgemm-gpu(-cpu)", "install the `fbgemm` extra, or use embedding_bag"
        )
    return BenchConfig(batch_size, warmups, repeats, device, chosen, 1, row_cap_mb * 1024**2)


def _collect(config, out: Path) -> int:
    """``cost_model.bench.collect.collect`` with a progress bar; the samples measured now."""
    from cost_model.bench.collect import collect

    with progress_bar("collect") as (progress, task):
        return collect(config, out, lambda done, total: progress.update(task, completed=done, total=total))


_EXAMPLES = {
    "--pooling": "10,200",
    "--precisions": "4,2",
    "--optimizers": "sgd,rowwise_adagrad",
    "--batch-sizes": "512,2048,16384",
    "--devices": "4,8,16,32,64",
    "--dims": "16,32,64",
    "--row-shard-ways": "2,4,8,16,32",
    "--replica-world-sizes": "8,16,32,64,128",
}


def _items(option: str, value: str) -> list[str]:
    items = [item.strip() for item in value.split(",")]
    if not value.strip() or any(not item for item in items):
        raise InputError(
            option,
            f"{value!r} is not a comma-separated list",
            f"pass values separated by commas, e.g. {_EXAMPLES[option]}",
        )
    if len(set(items)) != len(items):
        raise InputError(option, f"{value!r} names a value twice", "name each value once")
    return items


def _pooling_range(value: str) -> tuple[float, float]:
    """``--pooling 10,200`` as (low, high); ``InputError`` naming the option otherwise."""
    items = _items("--pooling", value)
    try:
        bounds = tuple(float(item) for item in items)
    except ValueError:
        bounds = ()
    if len(bounds) != 2 or not 1 <= bounds[0] <= bounds[1]:
        raise InputError(
            "--pooling",
            f"{value!r} is not LOW,HIGH with 1 <= LOW <= HIGH",
            "pass two pooling factors, e.g. --pooling 10,200",
        )
    return bounds


def _precisions(value: str) -> tuple[int, ...]:
    """``--precisions 4,2`` as bytes per element; ``InputError`` naming the option otherwise."""
    allowed = {"1": 1, "2": 2, "4": 4, "8": 8}
    items = _items("--precisions", value)
    bad = [item for item in items if item not in allowed]
    if bad:
        raise InputError(
            "--precisions",
            f"unknown bytes per element {bad[0]!r}",
            "use bytes per element from 1, 2, 4 (fp32), 8, e.g. --precisions 4,2",
        )
    return tuple(allowed[item] for item in items)


def positive_ints(option: str, value: str) -> tuple[int, ...]:
    """``--devices 4,8`` / ``--batch-sizes 512,2048`` as positive ints; ``InputError`` naming the option otherwise."""
    items = _items(option, value)
    bad = [item for item in items if not item.isdigit() or int(item) < 1]
    if bad:
        raise InputError(
            option, f"{bad[0]!r} is not a positive whole number", f"pass values such as {option} {_EXAMPLES[option]}"
        )
    return tuple(int(item) for item in items)


def require_cuda_if_asked(device: str, nccl: bool = False) -> None:
    """``InputError`` naming ``--device`` when it asks for CUDA (and, with ``nccl``, NCCL) on a
    machine without them."""
    import torch

    if device.startswith("cuda") and not (
        torch.cuda.is_available() and (not nccl or torch.distributed.is_nccl_available())
    ):
        why = (
            "torch here has no CUDA"
            if not torch.backends.cuda.is_built()
            else "no CUDA device is visible"
            if not torch.cuda.is_available()
            else "torch here has no NCCL"
        )
        raise InputError("--device", f"{device} asked, but {why}", "use --device cpu, or run on a machine with a GPU")


def _optimizers(value: str) -> tuple[str, ...]:
    """``--optimizers sgd,rowwise_adagrad`` as Optimizer values; ``InputError`` naming the option otherwise."""
    from autoshard.core.types import Optimizer

    known = [o.value for o in Optimizer]
    items = _items("--optimizers", value)
    bad = [item for item in items if item not in known]
    if bad:
        raise InputError("--optimizers", f"unknown optimizer {bad[0]!r}", f"use {', '.join(known)}")
    return tuple(items)
