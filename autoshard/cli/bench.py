"""`autoshard bench ...`: collect traces on a device and summarise them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from autoshard.cli.support import (
    ADVANCED,
    MEASUREMENT,
    OUTPUT,
    console,
    ensure_malloc_settings,
    friendly_errors,
    print_json,
)
from autoshard.core.errors import InputError
from autoshard.core.workload_file import read_json_file

app = typer.Typer(help="Microbenchmarks: measure table sets on a device and record traces.", no_args_is_help=True)
# help panels beside support's
SAMPLES, POOL, PROFILE, TASKS, FACTOR = "Samples", "Table pool", "Profile", "Tasks", "Calibration factor"


@app.command("collect")
@friendly_errors
def collect_cmd(
    out: Annotated[
        Path, typer.Option(help="Trace file to append to (.jsonl); resumed if it exists.", rich_help_panel=OUTPUT)
    ],
    samples: Annotated[
        int, typer.Option(min=0, help="Table sets of 1..max-tables tables.", rich_help_panel=SAMPLES)
    ] = 1000,
    max_tables: Annotated[
        int, typer.Option(min=1, help="Tables in the largest of the --samples sets.", rich_help_panel=SAMPLES)
    ] = 10,
    large_samples: Annotated[
        int, typer.Option(min=0, help="Extra sets of max-tables+1..large-max-tables.", rich_help_panel=SAMPLES)
    ] = 0,
    large_max_tables: Annotated[
        int, typer.Option(min=2, help="Tables in the largest of the --large-samples sets.", rich_help_panel=SAMPLES)
    ] = 20,
    passes: Annotated[
        int,
        typer.Option(
            min=1,
            help="Measure every sample this many times, pass by pass; its label is the median.",
            rich_help_panel=SAMPLES,
        ),
    ] = 1,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Batch size of every sample (without --batch-sizes).", rich_help_panel=SAMPLES)
    ] = 2048,
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            help="Batch sizes drawn for each sample, comma-separated "
            "(e.g. 512,1024,2048,4096,8192,16384); default: "
            "--batch-size for every sample.",
            rich_help_panel=SAMPLES,
        ),
    ] = None,
    precisions: Annotated[
        str,
        typer.Option(
            help="Bytes per element drawn for each pool table, comma-separated "
            "from 1, 2, 4, 8 (e.g. 4,2 for fp32 and fp16; fbgemm_tbe only "
            "beyond 4).",
            rich_help_panel=SAMPLES,
        ),
    ] = "4",
    optimizers: Annotated[
        str,
        typer.Option(
            help="Optimizers drawn for each pool table, comma-separated from sgd, "
            "rowwise_adagrad, adagrad (fbgemm_tbe only beyond sgd).",
            rich_help_panel=SAMPLES,
        ),
    ] = "sgd",
    column_shards: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Share of each set's tables measured as a "
            "column shard of them (a half, quarter or "
            "eighth of the dim), as split plans hold.",
            rich_help_panel=SAMPLES,
        ),
    ] = 0.0,
    row_shards: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Share of each set's tables measured as one row block of them "
            "(row_wise: R / k rows, the block's share of the lookups, possibly under 1 a bag).",
            rich_help_panel=SAMPLES,
        ),
    ] = 0.0,
    row_shard_ways: Annotated[
        str,
        typer.Option(help="k drawn for each row block: the table is cut into k blocks.", rich_help_panel=SAMPLES),
    ] = "2,4,8,16,32",
    replicas: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Share of each set's tables measured as a data-parallel replica (all rows, "
            "pooling factor / W); at most 1 - --row-shards.",
            rich_help_panel=SAMPLES,
        ),
    ] = 0.0,
    replica_world_sizes: Annotated[
        str,
        typer.Option(help="W drawn for each replica: the devices it is replicated on.", rich_help_panel=SAMPLES),
    ] = "8,16,32,64,128",
    singles: Annotated[bool, typer.Option(help="Also measure every pool table alone.", rich_help_panel=SAMPLES)] = True,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of the sampled sets and index batches.", rich_help_panel=SAMPLES)
    ] = 0,
    pool_size: Annotated[
        int, typer.Option(min=2, help="Synthetic pool size (train + test).", rich_help_panel=POOL)
    ] = 500,
    pool_seed: Annotated[int, typer.Option(min=0, help="Seed of the synthetic table pool.", rich_help_panel=POOL)] = 0,
    min_log10_rows: Annotated[
        float,
        typer.Option(
            min=0,
            help="Pool tables' rows are log-uniform from 10^this (0: tables down to 1 row, as Criteo's smallest).",
            rich_help_panel=POOL,
        ),
    ] = 2.0,
    dims: Annotated[
        str | None,
        typer.Option(
            help="Pool tables' dims drawn uniformly from these, comma-separated "
            "(e.g. 16,32,64; default: 4-256, mostly 16-128).",
            rich_help_panel=POOL,
        ),
    ] = None,
    one_hot_share: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Share of pool tables with pooling factor 1 (1: every table one-hot, as Criteo's).",
            rich_help_panel=POOL,
        ),
    ] = 0.3,
    pooling: Annotated[
        str | None,
        typer.Option(
            help="LOW,HIGH: draw every pool table's pooling factor "
            "log-uniformly from it (e.g. 10,200: heavy multi-hot "
            "tables; default: 30% one-hot, else log-normal).",
            rich_help_panel=POOL,
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, or auto.", rich_help_panel=MEASUREMENT)] = "auto",
    mode: Annotated[
        str | None,
        typer.Option(
            help="fbgemm_tbe or embedding_bag (default: fbgemm_tbe if installed).", rich_help_panel=MEASUREMENT
        ),
    ] = None,
    row_cap_mb: Annotated[
        int,
        typer.Option(min=1, help="Benchmark at most this many MiB of rows per table.", rich_help_panel=MEASUREMENT),
    ] = 128,
    set_memory_gb: Annotated[
        float,
        typer.Option(
            help="Benchmarked GiB (after the row cap) of one set, at most: "
            "a set stops growing at it (large sets of big tables need "
            "more; mind the host's memory).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = 3.0,
    warmups: Annotated[
        int, typer.Option(min=0, help="Untimed steps before each measurement.", rich_help_panel=ADVANCED)
    ] = 2,
    repeats: Annotated[
        int, typer.Option(min=1, help="Timed steps per measurement; the median is kept.", rich_help_panel=ADVANCED)
    ] = 5,
    threads: Annotated[
        int,
        typer.Option(
            min=1, help="CPU threads each step runs on (a profile is of one count).", rich_help_panel=ADVANCED
        ),
    ] = 1,
) -> None:
    """Sample random table sets from a synthetic pool, measure them, and append traces."""
    precision_values = _precisions(precisions)  # before re-exec and the heavy imports: a typo fails at once
    optimizer_values = _optimizers(optimizers)
    batch_values = _positive_ints("--batch-sizes", batch_sizes) if batch_sizes is not None else ()
    dim_values = _positive_ints("--dims", dims) if dims is not None else ()
    ways_values = _positive_ints("--row-shard-ways", row_shard_ways)
    world_values = _positive_ints("--replica-world-sizes", replica_world_sizes)
    pooling_range = _pooling_range(pooling) if pooling is not None else None
    ensure_malloc_settings()
    from autoshard.core.synthetic import PoolConfig
    from cost_model.bench.collect import CollectConfig, collect
    from cost_model.profile import (
        ExecutionMode,
        default_device,
        default_mode,
        fbgemm_available,
    )
    from cost_model.traces.records import BenchConfig

    device = default_device() if device == "auto" else device
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError("--device", f"unknown device {device!r}", "use cpu, cuda or auto")
    _require_cuda_if_asked(device)
    try:
        chosen = ExecutionMode(mode) if mode else default_mode()
    except ValueError:
        raise InputError("mode", f"unknown mode {mode!r}", "use fbgemm_tbe or embedding_bag") from None
    if chosen is ExecutionMode.FBGEMM_TBE and not fbgemm_available():
        raise InputError(
            "mode", "fbgemm_tbe needs fbgemm-gpu(-cpu)", "install the `fbgemm` extra, or use embedding_bag"
        )
    config = CollectConfig(
        bench=BenchConfig(batch_size, warmups, repeats, device, chosen, threads, row_cap_mb * 1024**2),
        pool=PoolConfig(
            size=pool_size,
            seed=pool_seed,
            min_log10_rows=min_log10_rows,
            dims=dim_values,
            one_hot_share=one_hot_share,
            pooling=pooling_range,
        ),
        samples=samples,
        max_tables=max_tables,
        large_samples=large_samples,
        large_max_tables=large_max_tables,
        passes=passes,
        singles=singles,
        seed=seed,
        precisions=precision_values,
        optimizers=optimizer_values,
        batch_sizes=batch_values,
        column_shard_share=column_shards,
        row_shard_share=row_shards,
        row_shard_ways=ways_values,
        replica_share=replicas,
        replica_world_sizes=world_values,
        set_memory_gb=set_memory_gb,
    )
    with Progress(
        TextColumn("[bold]collect"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("collect", total=None)
        measured = collect(config, out, lambda done, total: progress.update(task, completed=done, total=total))
    console.print(f"measured {measured} samples into {out}")


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


def _positive_ints(option: str, value: str) -> tuple[int, ...]:
    """``--devices 4,8`` / ``--batch-sizes 512,2048`` as positive ints; ``InputError`` naming the option otherwise."""
    items = _items(option, value)
    bad = [item for item in items if not item.isdigit() or int(item) < 1]
    if bad:
        raise InputError(
            option, f"{bad[0]!r} is not a positive whole number", f"pass values such as {option} {_EXAMPLES[option]}"
        )
    return tuple(int(item) for item in items)


def _require_cuda_if_asked(device: str, nccl: bool = False) -> None:
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


def _task_choices(devices: str, batch_sizes: str | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``bench plans`` / ``bench refine``: the device counts and batch sizes tasks draw from."""
    return _positive_ints("--devices", devices), _positive_ints("--batch-sizes", batch_sizes) if batch_sizes else ()


def _optimizers(value: str) -> tuple[str, ...]:
    """``--optimizers sgd,rowwise_adagrad`` as Optimizer values; ``InputError`` naming the option otherwise."""
    from autoshard.core.types import Optimizer

    known = [o.value for o in Optimizer]
    items = _items("--optimizers", value)
    bad = [item for item in items if item not in known]
    if bad:
        raise InputError("--optimizers", f"unknown optimizer {bad[0]!r}", f"use {', '.join(known)}")
    return tuple(items)


@app.command("summary")
@friendly_errors
def summary_cmd(
    path: Annotated[Path, typer.Argument(help="A trace file (.jsonl or .jsonl.gz).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Samples, device profile, noise and non-additivity of a trace file."""
    from cost_model.traces.store import read_traces
    from cost_model.traces.summary import summarize

    summary = summarize(read_traces(path))
    if json_out:
        print_json(summary.to_dict())
        return
    from rich.table import Table as RichTable

    table = RichTable(title=f"{path} ({summary.profile.id})")
    table.add_column("figure")
    table.add_column("value")
    na = summary.non_additivity.ratio
    rows = [
        ("samples", summary.samples),
        ("sets (train/test)", f"{summary.sets.train}/{summary.sets.test}"),
        ("singles", summary.singles),
        ("measurements", summary.measurements),
        (
            "set cost / sum of singles: mean (p10-p90)",
            f"{na.mean} ({na.p10}-{na.p90})"
            if na.mean is not None
            else "- (no set whose tables were all measured alone)",
        ),
        ("pass-to-pass MAPE", summary.spread.pass_to_pass_mape),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    from rich.console import Console

    Console().print(table)


def _require_traces(path: Path) -> None:
    if not path.is_file():
        raise InputError(
            "--traces", f"no trace file at {path}", "pass the profile's traces, e.g. data/traces/<profile>.jsonl.gz"
        )


@app.command("plans")
@friendly_errors
def plans_cmd(
    traces: Annotated[
        Path,
        typer.Option(
            help="The profile's anchor traces: their table pool and benchmark settings.", rich_help_panel=PROFILE
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Plan-set trace file to write (.jsonl or .jsonl.gz); resumed if it exists.", rich_help_panel=OUTPUT
        ),
    ],
    model: Annotated[
        Path | None,
        typer.Option(
            help="Profile folder whose planners make the plans (default: the shipped one).", rich_help_panel=PROFILE
        ),
    ] = None,
    split: Annotated[
        str,
        typer.Option(
            help="'test': tasks of test-pool tables, split (c) of `cost eval`; "
            "'train': tasks of training tables, to train on.",
            rich_help_panel=TASKS,
        ),
    ] = "test",
    tasks: Annotated[int, typer.Option(min=1, help="Tasks to plan.", rich_help_panel=TASKS)] = 12,
    planners: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated planners (default: every default planner the profile can run).",
            rich_help_panel=TASKS,
        ),
    ] = None,
    devices: Annotated[
        str, typer.Option(help="Device counts drawn for each task, comma-separated.", rich_help_panel=TASKS)
    ] = "4,8,16",
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            help="Batch sizes drawn for each task, comma-separated (default: the anchor traces' batch size).",
            rich_help_panel=TASKS,
        ),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the tasks.", rich_help_panel=TASKS)] = 0,
    passes: Annotated[
        int,
        typer.Option(
            min=1, help="Measure every distinct set this many times, pass by pass.", rich_help_panel=MEASUREMENT
        ),
    ] = 5,
) -> None:
    """Plan tasks with every planner and measure the device sets the plans create (plan-aware traces)."""
    if split not in ("train", "test"):
        raise InputError("--split", f"unknown split {split!r}", "use test (held-out tasks) or train")
    device_counts, batches = _task_choices(devices, batch_sizes)
    _require_traces(traces)
    ensure_malloc_settings()
    from autoshard.cli.support import load_profile_or_none, one_thread
    from autoshard.evaluation.plan_sets import PlanTaskConfig
    from cost_model.traces.store import read_traces

    one_thread()
    anchors = read_traces(traces)
    profile, why = load_profile_or_none(model)
    if profile is None:
        raise InputError("--model", why or "no cost model", "pass a profile folder with a cost_model.pt")
    config = PlanTaskConfig(tasks=tasks, devices=device_counts, seed=seed, batch_sizes=batches)
    measured, sets = _plan_and_measure(
        anchors, profile, split, config, passes, out, planners.split(",") if planners else None, f"{split}{seed}-"
    )
    console.print(f"measured {measured} set passes into {out} ({sets} distinct device sets)")


def _plan_and_measure(
    anchors, profile, split: str, config, passes: int, out: Path, planners: list[str] | None, prefix: str
) -> tuple[int, int]:
    """Plan ``config``'s tasks (from ``anchors``' ``split`` pool tables) with ``profile``'s
    planners, and measure their device sets into ``out``; (measured now, distinct sets)."""
    from autoshard.evaluation.plan_sets import plan_memberships, plan_tasks
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import available_planners
    from cost_model.bench.plan_traces import collect_plan_sets, distinct_sets
    from cost_model.traces.store import header_tables

    pool = [t for t, d in zip(header_tables(anchors.header).values(), anchors.header["tables"]) if d["split"] == split]
    task_list = plan_tasks(pool, config, anchors.batch_size, prefix)
    context = PlannerContext(profile.model, profile.policy)
    names = planners or available_planners(context)[0]
    with console.status(f"planning {len(task_list)} tasks with {', '.join(names)}"):
        memberships = plan_memberships(task_list, names, context, profile.communication)
    plan = {
        "plan_sets": {
            **config.to_dict(),
            "split": split,
            "planners": list(names),
            "prefix": prefix,
            "model_sha256": profile.sha256,
        }
    }
    with Progress(
        TextColumn("[bold]measure"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("measure", total=None)
        measured = collect_plan_sets(
            memberships,
            anchors,
            split,
            out,
            passes,
            plan,
            lambda done, total: progress.update(task, completed=done, total=total),
        )
    return measured, len(distinct_sets(memberships))


@app.command("refine")
@friendly_errors
def refine_cmd(
    traces: Annotated[
        Path,
        typer.Option(
            help="The profile's anchor traces (random sets), which the model was trained on.", rich_help_panel=PROFILE
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Folder for each round's plan-set traces and model (round1/, round2/, ...).", rich_help_panel=OUTPUT
        ),
    ],
    model: Annotated[
        Path | None,
        typer.Option(help="The profile folder to start from (default: the shipped one).", rich_help_panel=PROFILE),
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds of plan, measure, retrain.", rich_help_panel=TASKS)] = 1,
    tasks: Annotated[
        int, typer.Option(min=1, help="Training-pool tasks planned per round.", rich_help_panel=TASKS)
    ] = 12,
    devices: Annotated[
        str, typer.Option(help="Device counts drawn for each task, comma-separated.", rich_help_panel=TASKS)
    ] = "4,8,16",
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            help="Batch sizes drawn for each task, comma-separated (default: the anchor traces' batch size).",
            rich_help_panel=TASKS,
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of the tasks and of the retraining.", rich_help_panel=TASKS)
    ] = 0,
    passes: Annotated[
        int,
        typer.Option(
            min=1, help="Measure every distinct set this many times, pass by pass.", rich_help_panel=MEASUREMENT
        ),
    ] = 3,
    max_epochs: Annotated[
        int, typer.Option(min=1, help="Most epochs of each round's training.", rich_help_panel=ADVANCED)
    ] = 300,
) -> None:
    """Close the loop: plan, measure the plans' device sets, retrain; repeat.

    Each round plans training-pool tasks with every planner of the current model, measures the
    device sets the plans create, and retrains on the anchors plus every round's plan sets. Each
    round's model goes to OUT/roundK/ (with the profile's all-to-all and policy); a rerun resumes
    (measured sets are kept, trained rounds are not retrained)."""
    device_counts, batches = _task_choices(devices, batch_sizes)
    _require_traces(traces)
    ensure_malloc_settings()
    import shutil

    from autoshard.cli.cost import read_all, train_and_save
    from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_none, one_thread
    from autoshard.evaluation.plan_sets import PlanTaskConfig
    from cost_model.traces.store import read_traces

    one_thread()
    anchors = read_traces(traces)
    current = model if model is not None else DEFAULT_MODEL
    plan_files: list[Path] = []
    for round_ in range(1, rounds + 1):
        profile, why = load_profile_or_none(current)
        if profile is None:
            raise InputError("--model", why or "no cost model", "pass a profile folder with a cost_model.pt")
        plan_files.append(out / f"plans.round{round_}.jsonl.gz")
        config = PlanTaskConfig(tasks=tasks, devices=device_counts, seed=seed * 1000 + round_, batch_sizes=batches)
        _plan_and_measure(anchors, profile, "train", config, passes, plan_files[-1], None, f"r{round_}-")
        folder = out / f"round{round_}"
        if not (folder / "cost_model.pt").exists():
            command = "autoshard bench refine " + " ".join(sys.argv[3:])
            train_and_save(
                read_all([traces, *plan_files]),
                folder,
                seed,
                max_epochs,
                60,
                command,
                [str(traces), *map(str, plan_files)],
                network=profile.model.network.config,
                learning_rate=profile.model.metrics.get("learning_rate"),
            )
            source = current if current.is_dir() else current.parent
            for name in ("communication.json", "policy.pt"):
                if (source / name).exists():
                    shutil.copy2(source / name, folder / name)
        current = folder
    console.print(f"refined over {rounds} round(s): the last model is {current}")


@app.command("drift")
@friendly_errors
def drift_cmd(
    traces: Annotated[
        Path, typer.Option(help="The profile's trace file (.jsonl or .jsonl.gz).", rich_help_panel=PROFILE)
    ],
    samples: Annotated[int, typer.Option(min=1, help="Sets to re-measure (seeded).", rich_help_panel=MEASUREMENT)] = 12,
    rounds: Annotated[
        int, typer.Option(min=1, help="Interleaved rounds; the median is kept.", rich_help_panel=MEASUREMENT)
    ] = 3,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of the sets drawn from the traces.", rich_help_panel=MEASUREMENT)
    ] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Re-measure some of the traces' sets here: does this machine still measure like the traces?

    Exits 1 when the median ratio of now to then is outside 0.8-1.25 (re-collect the traces), or
    when the traces name another device than this one, or when more than a quarter of the sets run
    more than 0.8-1.25x off the median ratio (their relative costs changed: collect a profile here)."""
    _require_traces(traces)
    ensure_malloc_settings()
    from cost_model.bench.drift import check_drift
    from cost_model.traces.store import read_traces

    with console.status(f"re-measuring {samples} sets x {rounds} rounds"):
        drift = check_drift(read_traces(traces), samples, rounds, seed)
    if json_out:
        print_json(drift.to_dict())
    else:
        for s in drift.sets:
            console.print(
                f"set {s.sample_id} ({s.tables} tables): then {s.then_ms:.2f} ms, now {s.now_ms:.2f} ms, x{s.ratio:.2f}"
            )
        console.print(drift.verdict(), highlight=False)
    if not drift.holds:
        raise typer.Exit(1)


@app.command("calibrate")
@friendly_errors
def calibrate_cmd(
    traces: Annotated[
        Path,
        typer.Option(
            help="The trace file to calibrate (.jsonl or .jsonl.gz); rewritten in place.", rich_help_panel="Trace file"
        ),
    ],
    model: Annotated[
        Path | None,
        typer.Option(
            help="The profile's cost model (a folder or cost_model.pt) to measure it against.",
            rich_help_panel=FACTOR,
        ),
    ] = None,
    drift: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="<path>",
            help="Instead of --model: `bench drift --traces <profile traces> --json` reports run "
            "beside the collection (repeatable); the factor is their median now / then.",
            rich_help_panel=FACTOR,
        ),
    ] = None,
    max_tables: Annotated[
        int, typer.Option(min=1, help="Anchor sets: those of at most this many tables.", rich_help_panel=FACTOR)
    ] = 2,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Put traces collected while this machine ran slower or faster (`bench drift`) on the profile's scale.

    The factor is the median measured / predicted over the file's small sets (--model), or the
    median now / then of drift checks run beside the collection (--drift: for sets the model is not
    known to price right). It is stored in the file; training and evaluation divide its timings by
    it."""
    _require_traces(traces)
    from cost_model.checkpoint import load_cost_model
    from cost_model.traces.calibration import (
        calibration_from_drift,
        estimate_calibration,
        write_calibration,
    )

    if (model is None) == (not drift):
        raise InputError("--model", "pass either --model or --drift", "e.g. --model data/models/default")
    if drift:
        calibration = calibration_from_drift(traces, [(str(p), read_json_file(p, "--drift")) for p in drift])
    else:
        assert model is not None  # one of the two, checked above
        calibration = estimate_calibration(traces, load_cost_model(model), str(model), max_tables)
    write_calibration(traces, calibration)
    if json_out:
        print_json(calibration.to_record())
    else:
        low, high = calibration.quartiles
        source = (
            f"{calibration.anchors} sets of <= {max_tables} tables"
            if not drift
            else f"{calibration.anchors} re-measured sets of the profile's traces"
        )
        console.print(
            f"{traces}: factor {calibration.factor:.3f} over {source} (quartiles {low:.3f}-{high:.3f}); "
            "its timings now read divided by it"
        )


@app.command("comm")
@friendly_errors
def comm_cmd(
    out: Annotated[
        Path,
        typer.Option(
            help="Where to write the fitted model: a file, or a profile folder "
            "(then its communication.json, next to its cost model).",
            rich_help_panel=OUTPUT,
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
    world_size: Annotated[
        int, typer.Option(min=2, help="Ranks exchanging the all-to-all.", rich_help_panel=MEASUREMENT)
    ] = 2,
    device: Annotated[
        str, typer.Option(help="cpu (gloo) or cuda (nccl, one GPU per rank).", rich_help_panel=MEASUREMENT)
    ] = "cpu",
    repeats: Annotated[
        int, typer.Option(min=1, help="Timed all-to-alls per message size.", rich_help_panel=MEASUREMENT)
    ] = 10,
) -> None:
    """Measure the all-to-all between ranks and fit latency + bytes / bandwidth."""
    from dataclasses import asdict

    from cost_model.bench.communication import measure_all_to_all

    if device not in ("cpu", "cuda"):
        raise InputError("--device", f"unknown device {device!r}", "use cpu or cuda")
    _require_cuda_if_asked(device, nccl=True)
    from autoshard.core.communication import COMMUNICATION_FILE

    out = out / COMMUNICATION_FILE if out.is_dir() else out
    model, points = measure_all_to_all(world_size, repeats=repeats, device=device)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    result = {**asdict(model), "points": [{"bytes": b, "median_ms": round(ms, 4)} for b, ms in points]}
    if json_out:
        print_json(result)
    else:
        console.print(f"all-to-all: {model.bandwidth_gbps:.3g} GB/s, latency {model.latency_ms:.3g} ms -> {out}")
