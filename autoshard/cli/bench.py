"""`autoshard bench ...`: collect traces on a device and summarise them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from autoshard.cli.support import console, ensure_malloc_settings, friendly_errors, print_json
from autoshard.errors import InputError

app = typer.Typer(help="Microbenchmarks: measure table sets on a device and record traces.",
                  no_args_is_help=True)


@app.command("collect")
@friendly_errors
def collect_cmd(
    out: Annotated[Path, typer.Option(help="Trace file to append to (.jsonl); resumed if it exists.")],
    samples: Annotated[int, typer.Option(min=0, help="Table sets of 1..max-tables tables.")] = 1000,
    device: Annotated[str, typer.Option(help="cpu, cuda, or auto.")] = "auto",
    max_tables: Annotated[int, typer.Option(min=1)] = 10,
    large_samples: Annotated[int, typer.Option(min=0, help="Extra sets of max-tables+1..large-max-tables.")] = 0,
    large_max_tables: Annotated[int, typer.Option(min=2)] = 20,
    passes: Annotated[int, typer.Option(min=1, help="Measure every sample this many times, pass by pass.")] = 1,
    pool_size: Annotated[int, typer.Option(min=2, help="Synthetic pool size (train + test).")] = 500,
    pool_seed: Annotated[int, typer.Option(help="Seed of the synthetic table pool.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the sampled sets and index batches.")] = 0,
    batch_size: Annotated[int, typer.Option(min=1)] = 2048,
    warmups: Annotated[int, typer.Option(min=0)] = 2,
    repeats: Annotated[int, typer.Option(min=1)] = 5,
    threads: Annotated[int, typer.Option(min=1)] = 1,
    mode: Annotated[Optional[str], typer.Option(help="fbgemm_tbe or embedding_bag (default: fbgemm_tbe if installed).")] = None,
    row_cap_mb: Annotated[int, typer.Option(min=1, help="Benchmark at most this many MiB of rows per table.")] = 128,
    singles: Annotated[bool, typer.Option(help="Also measure every pool table alone.")] = True,
    precisions: Annotated[str, typer.Option(help="Bytes per element drawn for each pool table, comma-separated "
                                                  "from 1, 2, 4, 8 (e.g. 4,2 for fp32 and fp16; fbgemm_tbe only "
                                                  "beyond 4).")] = "4",
    optimizers: Annotated[str, typer.Option(help="Optimizers drawn for each pool table, comma-separated from sgd, "
                                                  "rowwise_adagrad, adagrad (fbgemm_tbe only beyond sgd).")] = "sgd",
) -> None:
    """Sample random table sets from a synthetic pool, measure them, and append traces."""
    precision_values = _precisions(precisions)  # before re-exec and the heavy imports: a typo fails at once
    optimizer_values = _optimizers(optimizers)
    ensure_malloc_settings()
    from autoshard.synthetic import PoolConfig
    from cost_model.bench import BenchConfig
    from cost_model.collect import CollectConfig, collect
    from cost_model.profile import ExecutionMode, default_device, default_mode, fbgemm_available

    device = default_device() if device == "auto" else device
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError("device", f"unknown device {device!r}", "use cpu, cuda or auto")
    try:
        chosen = ExecutionMode(mode) if mode else default_mode()
    except ValueError:
        raise InputError("mode", f"unknown mode {mode!r}", "use fbgemm_tbe or embedding_bag") from None
    if chosen is ExecutionMode.FBGEMM_TBE and not fbgemm_available():
        raise InputError("mode", "fbgemm_tbe needs fbgemm-gpu(-cpu)", "install the `fbgemm` extra, or use embedding_bag")
    config = CollectConfig(
        bench=BenchConfig(batch_size, warmups, repeats, device, chosen, threads, row_cap_mb * 1024**2),
        pool=PoolConfig(size=pool_size, seed=pool_seed), samples=samples, max_tables=max_tables,
        large_samples=large_samples, large_max_tables=large_max_tables, passes=passes, singles=singles,
        seed=seed, precisions=precision_values, optimizers=optimizer_values)
    with Progress(TextColumn("[bold]collect"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("collect", total=None)
        measured = collect(config, out, lambda done, total: progress.update(task, completed=done, total=total))
    console.print(f"measured {measured} samples into {out}")


def _items(option: str, value: str) -> list[str]:
    items = [item.strip() for item in value.split(",")]
    if not value.strip() or any(not item for item in items):
        raise InputError(option, f"{value!r} is not a comma-separated list",
                         f"pass values separated by commas, e.g. {'4,2' if option == '--precisions' else 'sgd,rowwise_adagrad'}")
    if len(set(items)) != len(items):
        raise InputError(option, f"{value!r} names a value twice", "name each value once")
    return items


def _precisions(value: str) -> tuple[int, ...]:
    """``--precisions 4,2`` as bytes per element; ``InputError`` naming the option otherwise."""
    allowed = {"1": 1, "2": 2, "4": 4, "8": 8}
    items = _items("--precisions", value)
    bad = [item for item in items if item not in allowed]
    if bad:
        raise InputError("--precisions", f"unknown bytes per element {bad[0]!r}",
                         "use bytes per element from 1, 2, 4 (fp32), 8, e.g. --precisions 4,2")
    return tuple(allowed[item] for item in items)


def _optimizers(value: str) -> tuple[str, ...]:
    """``--optimizers sgd,rowwise_adagrad`` as Optimizer values; ``InputError`` naming the option otherwise."""
    from autoshard.types import Optimizer

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
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Samples, device profile, noise and non-additivity of a trace file."""
    from cost_model.summary import summarize
    from cost_model.traces import read_traces

    summary = summarize(read_traces(path))
    if json_out:
        print_json(summary)
        return
    from rich.table import Table as RichTable
    table = RichTable(title=f"{path} ({summary['profile']['id']})")
    table.add_column("figure")
    table.add_column("value")
    na, spread = summary["non_additivity"], summary["spread"]
    rows = [("samples", summary["samples"]), ("sets (train/test)", f"{summary['sets']['train']}/{summary['sets']['test']}"),
            ("singles", summary["singles"]), ("measurements", summary["measurements"]),
            ("set cost / sum of singles: mean (p10-p90)", f"{na.get('mean')} ({na.get('p10')}-{na.get('p90')})"),
            ("pass-to-pass MAPE", spread["pass_to_pass_mape"])]
    for name, value in rows:
        table.add_row(name, str(value))
    from rich.console import Console
    Console().print(table)


@app.command("drift")
@friendly_errors
def drift_cmd(
    traces: Annotated[Path, typer.Option(help="The profile's trace file (.jsonl or .jsonl.gz).")],
    samples: Annotated[int, typer.Option(min=1, help="Sets to re-measure (seeded).")] = 12,
    rounds: Annotated[int, typer.Option(min=1, help="Interleaved rounds; the median is kept.")] = 3,
    seed: Annotated[int, typer.Option()] = 0,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Re-measure some of the traces' sets here: does this machine still measure like the traces?
    Exits 1 when the median ratio of now to then is outside 0.8-1.25 (re-collect the traces)."""
    if not traces.is_file():
        raise InputError("--traces", f"no trace file at {traces}", "pass the profile's traces, e.g. data/traces/<profile>.jsonl.gz")
    ensure_malloc_settings()
    from cost_model.drift import TOLERANCE, check_drift
    from cost_model.traces import read_traces

    with console.status(f"re-measuring {samples} sets x {rounds} rounds"):
        drift = check_drift(read_traces(traces), samples, rounds, seed)
    if json_out:
        print_json(drift.to_dict())
    else:
        for s in drift.sets:
            console.print(f"set {s.sample_id} ({s.tables} tables): then {s.then_ms:.2f} ms, now {s.now_ms:.2f} ms, "
                          f"x{s.ratio:.2f}")
        low, high = drift.ratio_range
        console.print(f"median ratio now / then: {drift.median_ratio:.2f} (range {low:.2f}-{high:.2f}); "
                      + ("the traces still describe this machine" if drift.holds else
                         f"outside {TOLERANCE[0]}-{TOLERANCE[1]}: this machine no longer measures like the traces; "
                         "re-collect them (`autoshard bench collect`) and retrain before trusting predictions here"))
    if not drift.holds:
        raise typer.Exit(1)


@app.command("comm")
@friendly_errors
def comm_cmd(
    out: Annotated[Path, typer.Option(help="Where to write the fitted model (communication.json, next to a cost model).")],
    world_size: Annotated[int, typer.Option(min=2)] = 2,
    device: Annotated[str, typer.Option(help="cpu (gloo) or cuda (nccl, one GPU per rank).")] = "cpu",
    repeats: Annotated[int, typer.Option(min=1)] = 10,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure the all-to-all between ranks and fit latency + bytes / bandwidth."""
    from dataclasses import asdict

    from cost_model.comm_bench import measure_all_to_all

    if device not in ("cpu", "cuda"):
        raise InputError("device", f"unknown device {device!r}", "use cpu or cuda")
    model, points = measure_all_to_all(world_size, repeats=repeats, device=device)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    result = {**asdict(model), "points": [{"bytes": b, "median_ms": round(ms, 4)} for b, ms in points]}
    if json_out:
        print_json(result)
    else:
        console.print(f"all-to-all: {model.bandwidth_gbps:.3g} GB/s, latency {model.latency_ms:.3g} ms -> {out}")
