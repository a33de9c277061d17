"""`autoshard replan WORKLOAD --from PLAN`: re-plan a deployed plan for a changed workload, moving
few of the shards it already placed (``autoshard.planners.incremental``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoshard.cli.support import (
    MEASUREMENT,
    OUTPUT,
    PLANNERS,
    WORKLOAD,
    ComputeDeviceOption,
    DdrCapOption,
    DevicesPerHostOption,
    HostsOption,
    as_option,
    console,
    ensure_malloc_settings,
    friendly_errors,
    print_json,
    topology_of,
    write_torchrec,
)
from autoshard.core.errors import InputError
from autoshard.core.types import ShardingPlan
from autoshard.evaluation.measurers import plans_measurer, round_maxima
from autoshard.profiles import DEFAULT_MODEL, load_profile_or_none
from cost_model.process import one_thread

if TYPE_CHECKING:
    from autoshard.core.types import Workload
    from autoshard.planners.incremental import MoveBudget
    from autoshard.profiles import LoadedModel


WorkloadArgument = Annotated[
    str, typer.Argument(help="The workload as it is now: a workload file (.json) or a bundled preset name.")
]
FromOption = Annotated[
    Path,
    typer.Option(
        "--from",
        help="The plan running today: a file written by `autoshard plan ... --format torchrec --out FILE` (or by "
        "this command's --out).",
        rich_help_panel=WORKLOAD,
    ),
]
DevicesOption = Annotated[
    int | None,
    typer.Option(min=1, help="Number of devices (default: the current plan's world size).", rich_help_panel=WORKLOAD),
]
MemoryOption = Annotated[
    float | None,
    typer.Option(
        help="Memory per device for embeddings, GiB (default: the workload file's).", rich_help_panel=WORKLOAD
    ),
]
MaxMovesOption = Annotated[
    str,
    typer.Option(
        help="How many of the current plan's shards may move to another device (tables new to it are placed "
        "freely); several, comma-separated (e.g. 2,4,8), plan one each, side by side.",
        rich_help_panel="Move budget",
    ),
]
MaxMoveGbOption = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        help="And at most this many GiB of them (weights and optimizer state: what a reshard copies), for every "
        "budget of --max-moves.",
        rich_help_panel="Move budget",
    ),
]
ModelOption = Annotated[
    Path | None,
    typer.Option(
        help=f"Cost model directory (default: {DEFAULT_MODEL}); 'torchrec': TorchRec's own estimators for "
        "--compute-device.",
        rich_help_panel=PLANNERS,
    ),
]
ColumnSplitOption = Annotated[
    bool,
    typer.Option(
        "--column-split/--no-column-split",
        help="Whether new tables (and cost_greedy's plan from scratch) may split column-wise where the model "
        "predicts more than 10% gain; kept shards stay as they are.",
        rich_help_panel=PLANNERS,
    ),
]
CommunicationOption = Annotated[
    bool,
    typer.Option(
        help="Add each device's all-to-all (the model's communication.json) to its cost.", rich_help_panel=PLANNERS
    ),
]
TimeBudgetOption = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help="Seconds each plan may search; past it, its best plan so far, marked partial.",
        rich_help_panel=PLANNERS,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)]
OutOption = Annotated[
    Path | None,
    typer.Option(
        help="Write the re-planned plan (of the one --max-moves) as TorchRec sharding, the format --from reads, "
        "to this file.",
        rich_help_panel=OUTPUT,
    ),
]
MeasureOption = Annotated[
    int,
    typer.Option(
        min=0,
        help="Measure every plan on this machine over this many interleaved rounds (0: off; an even number "
        "balances the order): each device's compute, plus its modelled all-to-all.",
        rich_help_panel=MEASUREMENT,
    ),
]
RowCapOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="With --measure: benchmark at most this many MiB of rows per table (the traces' cap).",
        rich_help_panel=MEASUREMENT,
    ),
]


@friendly_errors
def replan_cmd(
    workload: WorkloadArgument,
    current: FromOption,
    devices: DevicesOption = None,
    memory_gb: MemoryOption = None,
    hosts: HostsOption = None,
    devices_per_host: DevicesPerHostOption = None,
    max_moves: MaxMovesOption = "4",
    max_move_gb: MaxMoveGbOption = None,
    model: ModelOption = None,
    compute_device: ComputeDeviceOption = None,
    ddr_cap_gb: DdrCapOption = None,
    column_split: ColumnSplitOption = True,
    communication: CommunicationOption = True,
    time_budget: TimeBudgetOption = None,
    json_out: JsonOption = False,
    out: OutOption = None,
    measure: MeasureOption = 0,
    row_cap_mb: RowCapOption = 128,
) -> None:
    """Re-plan a deployed plan for a changed workload, moving few of its shards.

    Keeps the current shards where they are, places the new tables, then moves at most --max-moves
    shards where that lowers the predicted max. Each re-plan is compared with keeping every shard
    (0 moves) and with cost_greedy's plan from scratch, each with what it moves; with --measure,
    each is measured here too."""
    budgets = _budgets(max_moves, max_move_gb)
    if out is not None and len(budgets) > 1:
        raise InputError("--out", f"writes one plan, and --max-moves gives {len(budgets)}", "give one --max-moves")
    if measure:
        ensure_malloc_settings()
    from autoshard.core.presets import load_workload_or_preset
    from autoshard.core.workload_file import read_json_file
    from autoshard.planners.incremental import CurrentPlacement
    from autoshard.planning.replan import compare_replans

    placement = CurrentPlacement.from_export(read_json_file(current, "--from"), str(current))
    loaded, file_topology = load_workload_or_preset(workload)
    if devices is None and hosts is None and devices_per_host is None:
        same = file_topology is not None and file_topology.num_devices == placement.world_size
        devices = None if same else placement.world_size  # the file's topology (hosts too), if it is that plan's
    topology = topology_of(devices, memory_gb, file_topology, hosts, devices_per_host)
    one_thread()
    profile, warnings = _profile(model, loaded, workload, compute_device, ddr_cap_gb)
    comm = profile.communication if communication else None
    try:
        replanned, plans = compare_replans(
            loaded, topology, profile.model, placement, budgets, column_split, time_budget, comm, profile.device_errors
        )
    except InputError as error:  # the current placement against the topology: name the option
        raise as_option(error) from None
    report = {**replanned.to_dict(), "profile": profile.profile, "warnings": list(warnings)}  # the JSON
    if measure:
        _measure(report, plans, measure, row_cap_mb, profile, comm, loaded.batch_size)
    if out is not None:
        write_torchrec(loaded, topology, plans[1], out)
    if json_out:
        return print_json(report)
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    _print(report)


def _profile(
    path: Path | None,
    loaded: Workload,
    source: str,
    compute_device: str | None = None,
    ddr_cap_gb: float | None = None,
) -> tuple[LoadedModel, tuple[str, ...]]:
    """The profile at ``--model`` (re-planning needs its cost model; ``torchrec`` for
    ``--compute-device`` and ``--ddr-cap-gb``) and its warnings on the workload's tables; a table
    it cannot answer is an error naming ``source``, the file that holds it."""
    profile, why_no_model = load_profile_or_none(path, compute_device=compute_device, ddr_cap_gb=ddr_cap_gb)
    if profile is None:
        raise InputError("--model", f"re-planning needs a cost model ({why_no_model})", "pass --model DIR")
    try:
        return profile, profile.model.check_workload(loaded, None)
    except InputError as error:
        raise error.located(source) from None


def _budgets(text: str, max_gb: float | None) -> list[MoveBudget]:
    """``--max-moves`` (integers >= 0, comma-separated; ascending, each once), each with ``--max-move-gb``."""
    from autoshard.planners.incremental import MoveBudget

    try:
        shards = sorted({int(part) for part in text.split(",")})
    except ValueError:
        shards = []
    if not shards or shards[0] < 0:
        raise InputError("--max-moves", f"must be integers >= 0, comma-separated, got {text!r}", "e.g. 4, or 2,4,8")
    return [MoveBudget(k, None if max_gb is None else int(max_gb * 2**30)) for k in shards]


def _measure(
    report: dict[str, Any],
    plans: list[ShardingPlan],
    rounds: int,
    row_cap_mb: int,
    profile: Any,
    comm: Any,
    batch_size: int,
) -> None:
    """Each plan measured here, interleaved (``plans_measurer``), with its ratio to keep's max by round."""
    import statistics

    from autoshard.core.stats import ratio_ci95, verdict

    console.print(f"measuring the {len(plans)} plans on this machine, {rounds} rounds", highlight=False)
    measured = plans_measurer(rounds, row_cap_mb, profile)(plans, batch_size)
    maxima = [round_maxima(plan, m.round_device_ms, comm, batch_size) for plan, m in zip(plans, measured)]
    for row, found in zip(report["plans"], maxima):
        ratio, low, high = ratio_ci95(found, maxima[0])
        row["measured"] = {
            "max_ms": statistics.median(found),
            "vs_keep": ratio,
            "ci95": [low, high],
            "verdict": verdict(low, high),
            "rounds": rounds,
        }


def _topology_label(topology: dict[str, Any]) -> str:
    """The report's topology as ``8 x 16 GiB`` (``2 hosts x 4 x 8-16 GiB`` for a cluster of unequal devices)."""
    memory = topology["device_memory_gb"]
    memory = f"{min(memory):g}-{max(memory):g}" if isinstance(memory, list) else f"{memory:g}"
    hosts = topology.get("num_hosts", 1)
    devices = f"{hosts} hosts x {topology['devices_per_host']}" if hosts > 1 else topology["num_devices"]
    return f"{devices} x {memory} GiB"


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    topology = report["topology"]
    table = RichTable(
        title=f"{report['workload']}: {report['tables']} tables on {_topology_label(topology)}, from the current plan"
    )
    with_expected = any(row["expected_max_ms"] is not None for row in report["plans"])
    measured = "measured" in report["plans"][0]
    for column in (
        "plan",
        "max cost (ms)",
        *(("expected max (ms)",) if with_expected else ()),
        "vs keep",
        *(("measured max (ms)", "measured vs keep [95%]") if measured else ()),
        "shards moved",
        "GiB moved",
    ):
        table.add_column(column)
    keep = report["plans"][0]["max_cost_ms"]
    for row in report["plans"]:
        expected = (f"{row['expected_max_ms']:.4g}",) if with_expected else ()
        found = row.get("measured")
        measured_cells = (
            (
                f"{found['max_ms']:.4g}",
                f"{found['vs_keep']:.3f} [{found['ci95'][0]:.3f}, {found['ci95'][1]:.3f}] {found['verdict']}",
            )
            if found
            else ()
        )
        table.add_row(
            row["plan"] + (" partial" if row["partial"] else ""),
            f"{row['max_cost_ms']:.4g}",
            *expected,
            f"{row['max_cost_ms'] / keep:.3f}" if keep else "-",
            *measured_cells,
            str(row["shards_moved"]),
            f"{row['bytes_moved'] / 2**30:.3g}",
        )
    Console().print(table)
    for key, what in (
        ("new_tables", "new tables, placed"),
        ("replaced", "tables whose columns changed, placed anew"),
        ("dropped", "tables gone from the workload, dropped"),
    ):
        if report[key]:
            console.print(f"{what}: {', '.join(report[key])}", highlight=False)
