"""`autoshard plan WORKLOAD`: shard a workload with one planner, or all, and compare the plans.

The command parses its options and plans through ``autoshard.planning.plan.plan``, as the service
does; what it adds is the CLI's own: notes on stderr, ``--verify`` (measuring the best plans
here), and the output (``plan_view``, ``--json``, ``--format torchrec``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoshard.cli.dmp import print_judges, verify_method, verify_plan_dmp
from autoshard.cli.plan_view import print_plans, print_verification
from autoshard.cli.support import (
    ADVANCED,
    COLUMN_SPLIT_HELP,
    DEPARTURE_MARGIN_HELP,
    MEASUREMENT,
    OUTPUT,
    PLANNERS,
    WORKLOAD,
    ComputeDeviceOption,
    DdrCapOption,
    DevicesPerHostOption,
    HostsOption,
    ShardingTypesOption,
    console,
    ensure_malloc_settings,
    friendly_errors,
    planner_names,
    print_json,
    sharding_types_of,
    topology_of,
    write_torchrec,
)
from autoshard.core.errors import InputError
from autoshard.core.types import ShardingPlan
from autoshard.evaluation.measurers import plans_verifier, verification_measures
from autoshard.profiles import DEFAULT_MODEL, default_profile_path, load_profile_or_none
from cost_model.process import one_thread

if TYPE_CHECKING:
    from autoshard.planning.options import Models
    from autoshard.planning.report import PlanningReport

WorkloadArgument = Annotated[str, typer.Argument(help="A workload file (.json) or a bundled preset name.")]
DevicesOption = Annotated[
    int | None,
    typer.Option(min=1, help="Number of devices (default: the file's topology).", rich_help_panel=WORKLOAD),
]
MemoryOption = Annotated[
    float | None,
    typer.Option(help="Memory per device for embeddings, GiB (default: the file's).", rich_help_panel=WORKLOAD),
]
PlannerOption = Annotated[
    str, typer.Option(help="'all', a planner name, or a comma-separated list of them.", rich_help_panel=PLANNERS)
]
ModelOption = Annotated[
    Path | None,
    typer.Option(
        help=f"Cost model directory (default: {DEFAULT_MODEL} if it exists); "
        "'none': the heuristics alone, with proxy costs; 'torchrec': TorchRec's own estimators for "
        "--compute-device, memory as TorchRec counts it.",
        rich_help_panel=PLANNERS,
    ),
]
ColumnSplitOption = Annotated[
    bool | None,
    typer.Option("--column-split/--no-column-split", help=COLUMN_SPLIT_HELP, rich_help_panel=PLANNERS),
]
TimeBudgetOption = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help="Seconds each searching planner (cost_greedy, rl, rl+refine, TorchRec's) may search; past it, "
        "its best plan so far, marked partial.",
        rich_help_panel=PLANNERS,
    ),
]
CommunicationOption = Annotated[
    bool,
    typer.Option(
        help="Add each device's all-to-all (the model's communication.json) to its cost.", rich_help_panel=PLANNERS
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)]
StatsOption = Annotated[
    bool,
    typer.Option(
        "--stats",
        help="The chosen plan's stats (the best, or with --verify the one that measured fastest): per rank, "
        "per table, balance, critical path, memory pressure, what makes the max (docs/concepts.md, 'Reading "
        "a plan's stats'); with --json, under that plan's entry.",
        rich_help_panel=OUTPUT,
    ),
]
FormatOption = Annotated[
    str,
    typer.Option(
        help="'table' (default) or 'torchrec': the best plan as TorchRec "
        "sharding (types, ranks, column shards) for DistributedModelParallel.",
        rich_help_panel=OUTPUT,
    ),
]
OutOption = Annotated[
    Path | None, typer.Option(help="With --format torchrec: write it to this file.", rich_help_panel=OUTPUT)
]
VerifyOption = Annotated[
    str | None,
    typer.Option(
        help="Measure the best-predicted distinct plans (and the best heuristic's) on this machine, interleaved "
        "rounds, and keep the one that measured fastest; --format torchrec then exports it. Alone or 'bench': "
        "each device's shards with the microbenchmark; 'dmp': end to end under TorchRec's DMP, one process a "
        "rank, each rank's step and its parts beside the prediction, and three judges side by side.",
        metavar="[bench|dmp]",
        rich_help_panel=MEASUREMENT,
    ),
]
VerifyTopOption = Annotated[
    int, typer.Option(min=2, help="With --verify: how many distinct plans to measure.", rich_help_panel=MEASUREMENT)
]
VerifyRoundsOption = Annotated[
    int,
    typer.Option(
        min=2,
        help="With --verify: measurement rounds (an even number balances the order).",
        rich_help_panel=MEASUREMENT,
    ),
]
RowCapOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="With --verify: benchmark at most this many MiB of rows per table (the traces' cap).",
        rich_help_panel=MEASUREMENT,
    ),
]
SeedOption = Annotated[
    int, typer.Option(min=0, help="Seed of the random planner and of rl+refine's sampling.", rich_help_panel=ADVANCED)
]
MarginOption = Annotated[
    float | None, typer.Option(min=0.0, max=0.99, help=DEPARTURE_MARGIN_HELP, rich_help_panel=ADVANCED)
]


@friendly_errors
def plan_cmd(
    workload: WorkloadArgument,
    devices: DevicesOption = None,
    memory_gb: MemoryOption = None,
    hosts: HostsOption = None,
    devices_per_host: DevicesPerHostOption = None,
    planner: PlannerOption = "all",
    model: ModelOption = None,
    compute_device: ComputeDeviceOption = None,
    ddr_cap_gb: DdrCapOption = None,
    column_split: ColumnSplitOption = None,
    sharding_types: ShardingTypesOption = None,
    time_budget: TimeBudgetOption = None,
    communication: CommunicationOption = True,
    json_out: JsonOption = False,
    stats: StatsOption = False,
    format: FormatOption = "table",
    out: OutOption = None,
    verify: VerifyOption = None,
    verify_top: VerifyTopOption = 4,
    verify_rounds: VerifyRoundsOption = 6,
    row_cap_mb: RowCapOption = 128,
    seed: SeedOption = 0,
    departure_margin: MarginOption = None,
) -> None:
    """Place a workload's tables on devices; with --planner all, compare every available planner."""
    if format not in ("table", "torchrec"):
        raise InputError("format", f"unknown format {format!r}", "use table or torchrec")
    verify = verify_method(verify)
    if verify == "bench":
        ensure_malloc_settings()
    from autoshard.core.presets import load_workload_or_preset
    from autoshard.planning.options import PlanOptions
    from autoshard.planning.plan import plan

    loaded, file_topology = load_workload_or_preset(workload)
    topology = topology_of(devices, memory_gb, file_topology, hosts, devices_per_host)
    one_thread()
    profile, models = _models(model, communication, compute_device, ddr_cap_gb)
    names = planner_names(planner, "--planner")
    options = PlanOptions(
        None if names is None else tuple(names),
        seed,
        column_split,
        time_budget,
        departure_margin=departure_margin,
        sharding_types=sharding_types_of(sharding_types),
        stats=stats and not verify,  # with --verify, the stats of the plan that measured fastest
    )
    try:
        report = plan(loaded, topology, models, options)
    except InputError as error:  # a table the model cannot answer, a pin: say which file holds it
        raise (error.located(workload) if error.where else error) from None
    if not json_out:
        for warning in report.warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    data, best = report.to_dict(), report.best_plan
    if verify:
        settings = (verify_top, verify_rounds, row_cap_mb)
        report, best = _verified(verify, data, report, profile, models, settings, stats)
    _output(report, data, best, format, out, json_out, column_split)


def _models(
    path: Path | None, communication: bool, compute_device: str | None = None, ddr_cap_gb: float | None = None
) -> tuple[Any, Models]:
    """The profile at ``--model`` (None without one; ``torchrec`` for ``--compute-device`` and
    ``--ddr-cap-gb``) and its models as planning takes them; what is missing is noted on stderr
    (so that it does not mix into --json)."""
    from autoshard.planning.options import Models

    profile, why_no_model = load_profile_or_none(path, compute_device=compute_device, ddr_cap_gb=ddr_cap_gb)
    if path is None and profile is not None:  # say which profile a plan that names none uses, and why
        console.print(f"[dim]profile: {profile.profile} ({default_profile_path()[1]})[/dim]", highlight=False)
    if why_no_model:
        console.print(
            f"[yellow]note:[/yellow] {why_no_model}; cost_greedy needs a model (so do rl and rl+refine), "
            "and costs below are a proxy (dim x pooling), not milliseconds",
            highlight=False,
        )
    if profile and profile.device_errors_problem:
        console.print(f"[yellow]note:[/yellow] {profile.device_errors_problem}", highlight=False)
    return profile, replace(Models.of(profile, communication=communication), missing=why_no_model)


def _verified(
    method: str,
    data: dict[str, Any],
    report: PlanningReport,
    profile: Any,
    models: Models,
    settings: tuple[int, int, int],
    stats: bool,
) -> tuple[PlanningReport, ShardingPlan]:
    """``--verify``'s ``method``: the microbenchmark (``bench``) or TorchRec's DMP (``dmp``)."""
    if method == "dmp":
        return verify_plan_dmp(data, report, models, settings, stats)
    return _verify(data, report, profile, models, settings, stats)


def _verify(
    data: dict[str, Any],
    report: PlanningReport,
    profile: Any,
    models: Models,
    settings: tuple[int, int, int],
    stats: bool,
) -> tuple[PlanningReport, ShardingPlan]:
    """Measure the best-predicted distinct plans here (``plans_verifier``; ``settings``: how
    many, in how many rounds, the MiB of rows benchmarked per table), add the verification to
    ``data`` (the JSON) and answer the plan that measured fastest, with its ``stats`` if asked."""
    top, rounds, row_cap_mb = settings
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console.print(
        f"verifying: measuring the {top} best-predicted distinct plans and the best heuristic's "
        f"on this machine, {rounds} rounds",
        highlight=False,
    )
    comm = models.communication
    with Progress(
        TextColumn("[bold]verify"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console
    ) as progress:
        task = progress.add_task("verify", total=rounds)
        verifier = plans_verifier(
            rounds, row_cap_mb, profile, comm, top, lambda done: progress.update(task, completed=done)
        )
        verification = verifier(list(report.plans), report.workload.batch_size)
    data["verification"] = {"measures": verification_measures(comm), **verification.to_dict()}
    if not stats:
        return report, verification.plan
    report = report.with_stats(verification.plan, models)
    data["plans"][report.stats_of]["stats"] = report.stats.to_dict() if report.stats else None
    return report, verification.plan


def _output(
    report: PlanningReport,
    data: dict[str, Any],
    best: ShardingPlan,
    format: str,
    out: Path | None,
    json_out: bool,
    column_split: bool | None,
) -> None:
    """The chosen plan as TorchRec sharding (its stats on stderr), the JSON, or the tables and notes."""
    from autoshard.cli.stats_view import print_stats

    if format == "torchrec":
        write_torchrec(report.workload, report.topology, best, out)
        if report.stats is not None:  # stdout may carry the export: the stats go to stderr
            print_stats(report.stats, console)
        return
    if json_out:
        print_json(data)
        return
    print_plans(report.workload, report.topology, data)
    if "verification" in data and data["verification"].get("method") != "dmp":  # DMP's went to stderr
        expected = {plan["planner"]: plan["expected_max_ms"] for plan in data["plans"]}
        print_verification(data["verification"], data["cost_unit"], expected)
    if report.stats is not None:
        print_stats(report.stats)
    if report.judges is not None and data.get("verification", {}).get("method") != "dmp":  # DMP's: on stderr
        print_judges(report.judges)
    if column_split is not True and (alone := report.alone_on_max(best)):
        console.print(
            f"[yellow]note:[/yellow] the slowest device holds one table alone ({alone}): no placement "
            "lowers it, a column-wise or row-wise split can (docs/concepts.md, 'Column splits'); "
            + (
                "without --no-column-split the cost-model planners split it where it pays"
                if column_split is False
                else "the cost-model planners found no split predicted more than the departure margin "
                "lower; --column-split lets every planner split it"
            ),
            highlight=False,
        )
