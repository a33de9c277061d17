"""`autoshard bench ...`: collect traces on a device, summarise them, measure plans' device sets,
check and calibrate a machine against its traces, and measure the all-to-all."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autoshard.cli.collect import collect_cmd, positive_ints
from autoshard.cli.comm import comm_cmd
from autoshard.cli.support import (
    MEASUREMENT,
    OUTPUT,
    console,
    ensure_malloc_settings,
    friendly_errors,
    print_json,
    progress_bar,
)
from autoshard.core.errors import InputError
from autoshard.core.workload_file import read_json_file

app = typer.Typer(help="Microbenchmarks: measure table sets on a device and record traces.", no_args_is_help=True)
PROFILE, TASKS, FACTOR = "Profile", "Tasks", "Calibration factor"  # help panels beside support's
app.command("collect")(collect_cmd)
app.command("comm")(comm_cmd)


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


Traces = Annotated[
    Path,
    typer.Option(help="The profile's anchor traces: their table pool and benchmark settings.", rich_help_panel=PROFILE),
]
PlanSetsOut = Annotated[
    Path,
    typer.Option(
        help="Plan-set trace file to write (.jsonl or .jsonl.gz); resumed if it exists.", rich_help_panel=OUTPUT
    ),
]
PlannersModel = Annotated[
    Path | None,
    typer.Option(
        help="Profile folder whose planners make the plans (default: the shipped one).", rich_help_panel=PROFILE
    ),
]
Split = Annotated[
    str,
    typer.Option(
        help="'test': tasks of test-pool tables, split (c) of `cost eval`; 'train': tasks of training tables, "
        "to train on.",
        rich_help_panel=TASKS,
    ),
]
Planners = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated planners (default: every default planner the profile can run).", rich_help_panel=TASKS
    ),
]
TaskDevices = Annotated[
    str, typer.Option(help="Device counts drawn for each task, comma-separated.", rich_help_panel=TASKS)
]
TaskBatchSizes = Annotated[
    str | None,
    typer.Option(
        help="Batch sizes drawn for each task, comma-separated (default: the anchor traces' batch size).",
        rich_help_panel=TASKS,
    ),
]
SetPasses = Annotated[
    int,
    typer.Option(min=1, help="Measure every distinct set this many times, pass by pass.", rich_help_panel=MEASUREMENT),
]


@app.command("plans")
@friendly_errors
def plans_cmd(
    traces: Traces,
    out: PlanSetsOut,
    model: PlannersModel = None,
    split: Split = "test",
    tasks: Annotated[int, typer.Option(min=1, help="Tasks to plan.", rich_help_panel=TASKS)] = 12,
    planners: Planners = None,
    devices: TaskDevices = "4,8,16",
    batch_sizes: TaskBatchSizes = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the tasks.", rich_help_panel=TASKS)] = 0,
    passes: SetPasses = 5,
) -> None:
    """Plan tasks with every planner and measure the device sets the plans create (plan-aware traces)."""
    if split not in ("train", "test"):
        raise InputError("--split", f"unknown split {split!r}", "use test (held-out tasks) or train")
    device_counts = positive_ints("--devices", devices)
    batches = positive_ints("--batch-sizes", batch_sizes) if batch_sizes else ()
    _require_traces(traces)
    ensure_malloc_settings()
    from autoshard.evaluation.plan_sets import PlanTaskConfig
    from autoshard.profiles import load_profile_or_none
    from cost_model.process import one_thread
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
    with progress_bar("measure") as (progress, task):
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
        drift = check_drift(read_traces(traces), samples, rounds)
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


CALIBRATION_TABLES = 2  # the anchors of --model: sets of at most this many tables, which the model prices best


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
        calibration = estimate_calibration(traces, load_cost_model(model), str(model), CALIBRATION_TABLES)
    write_calibration(traces, calibration)
    if json_out:
        print_json(calibration.to_record())
    else:
        low, high = calibration.quartiles
        source = (
            f"{calibration.anchors} sets of <= {CALIBRATION_TABLES} tables"
            if not drift
            else f"{calibration.anchors} re-measured sets of the profile's traces"
        )
        console.print(
            f"{traces}: factor {calibration.factor:.3f} over {source} (quartiles {low:.3f}-{high:.3f}); "
            "its timings now read divided by it"
        )
