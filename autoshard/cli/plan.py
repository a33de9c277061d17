"""`autoshard plan WORKLOAD`: shard a workload with one planner, or all, and compare the plans."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autoshard.cli.support import (
    ADVANCED,
    COLUMN_SPLIT_HELP,
    DEFAULT_MODEL,
    DEPARTURE_MARGIN_HELP,
    MEASUREMENT,
    OUTPUT,
    PLANNERS,
    WORKLOAD,
    DevicesPerHostOption,
    HostsOption,
    ShardingTypesOption,
    console,
    ensure_malloc_settings,
    friendly_errors,
    load_profile_or_none,
    one_thread,
    planner_names,
    plans_verifier,
    print_json,
    sharding_types_of,
    topology_label,
    topology_of,
    verification_measures,
    write_torchrec,
)
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import ShardingPlan, Topology, Workload

PROXY_UNIT = "proxy: dim x pooling summed per device (no cost model)"


@friendly_errors
def plan_cmd(
    workload: Annotated[str, typer.Argument(help="A workload file (.json) or a bundled preset name.")],
    devices: Annotated[
        int | None,
        typer.Option(min=1, help="Number of devices (default: the file's topology).", rich_help_panel=WORKLOAD),
    ] = None,
    memory_gb: Annotated[
        float | None,
        typer.Option(help="Memory per device for embeddings, GiB (default: the file's).", rich_help_panel=WORKLOAD),
    ] = None,
    hosts: HostsOption = None,
    devices_per_host: DevicesPerHostOption = None,
    planner: Annotated[
        str, typer.Option(help="'all', a planner name, or a comma-separated list of them.", rich_help_panel=PLANNERS)
    ] = "all",
    model: Annotated[
        Path | None,
        typer.Option(
            help=f"Cost model directory (default: {DEFAULT_MODEL} if it exists); "
            "'none': the heuristics alone, with proxy costs.",
            rich_help_panel=PLANNERS,
        ),
    ] = None,
    column_split: Annotated[
        bool | None,
        typer.Option("--column-split/--no-column-split", help=COLUMN_SPLIT_HELP, rich_help_panel=PLANNERS),
    ] = None,
    sharding_types: ShardingTypesOption = None,
    time_budget: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Seconds each searching planner (cost_greedy, rl, rl+refine, TorchRec's) may search; past it, "
            "its best plan so far, marked partial.",
            rich_help_panel=PLANNERS,
        ),
    ] = None,
    communication: Annotated[
        bool,
        typer.Option(
            help="Add each device's all-to-all (the model's communication.json) to its cost.", rich_help_panel=PLANNERS
        ),
    ] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
    stats: Annotated[
        bool,
        typer.Option(
            "--stats",
            help="The chosen plan's stats (the best, or with --verify the one that measured fastest): per rank, "
            "per table, balance, critical path, memory pressure, what makes the max (docs/concepts.md, 'Reading "
            "a plan's stats'); with --json, under that plan's entry.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    format: Annotated[
        str,
        typer.Option(
            help="'table' (default) or 'torchrec': the best plan as TorchRec "
            "sharding (types, ranks, column shards) for DistributedModelParallel.",
            rich_help_panel=OUTPUT,
        ),
    ] = "table",
    out: Annotated[
        Path | None, typer.Option(help="With --format torchrec: write it to this file.", rich_help_panel=OUTPUT)
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            help="Measure the best-predicted distinct plans (and the best heuristic's) on "
            "this machine, interleaved rounds, and keep the one that measured "
            "fastest; --format torchrec then exports it.",
            rich_help_panel=MEASUREMENT,
        ),
    ] = False,
    verify_top: Annotated[
        int,
        typer.Option(min=2, help="With --verify: how many distinct plans to measure.", rich_help_panel=MEASUREMENT),
    ] = 4,
    verify_rounds: Annotated[
        int,
        typer.Option(
            min=2,
            help="With --verify: measurement rounds (an even number balances the order).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = 6,
    row_cap_mb: Annotated[
        int,
        typer.Option(
            min=1,
            help="With --verify: benchmark at most this many MiB of rows per table (the traces' cap).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = 128,
    seed: Annotated[
        int,
        typer.Option(min=0, help="Seed of the random planner and of rl+refine's sampling.", rich_help_panel=ADVANCED),
    ] = 0,
    departure_margin: Annotated[
        float | None, typer.Option(min=0.0, max=0.99, help=DEPARTURE_MARGIN_HELP, rich_help_panel=ADVANCED)
    ] = None,
) -> None:
    """Place a workload's tables on devices; with --planner all, compare every available planner."""
    if format not in ("table", "torchrec"):
        raise InputError("format", f"unknown format {format!r}", "use table or torchrec")
    if verify:
        ensure_malloc_settings()
    from autoshard.core.presets import load_workload_or_preset
    from autoshard.planners.context import PlannerContext
    from autoshard.planners.report import plans_report
    from autoshard.planning.compare import compare_planners, shard_warnings
    from autoshard.planning.registry import PLANNERS

    loaded, file_topology = load_workload_or_preset(workload)
    topology = topology_of(devices, memory_gb, file_topology, hosts, devices_per_host)
    one_thread()
    profile, why_no_model = load_profile_or_none(model)
    cost_model = profile.model if profile else None
    if why_no_model:  # on stderr, so it does not mix into --json
        console.print(
            f"[yellow]note:[/yellow] {why_no_model}; cost_greedy needs a model (so do rl and rl+refine), "
            "and costs below are a proxy (dim x pooling), not milliseconds",
            highlight=False,
        )
    if profile and profile.device_errors_problem:
        console.print(f"[yellow]note:[/yellow] {profile.device_errors_problem}", highlight=False)
    try:
        warnings = cost_model.check_workload(loaded, None) if cost_model is not None else ()
    except InputError as error:  # a table the model cannot answer: say which file holds it
        raise error.located(workload) from None
    if not json_out:
        for warning in warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    names = planner_names(planner, "--planner")
    comm = profile.communication if communication and profile else None
    context = PlannerContext(
        cost_model,
        profile.policy if profile else None,
        seed,
        column_split,
        time_budget,
        departure_margin,
        sharding_types=sharding_types_of(sharding_types),
    )
    result = compare_planners(loaded, topology, names, context, comm)
    skipped = [
        (n, f"{r} ({why_no_model})" if PLANNERS[n].needs_cost_model and why_no_model else r) for n, r in result.skipped
    ]
    if not result.plans:
        raise (
            result.errors[0]
            if result.errors
            else PlannerError(PlannerErrorKind.UNAVAILABLE, "no planner could run", ("see the skipped planners",))
        )
    plans = list(result.plans)
    report = plans_report(
        loaded,
        topology,
        plans,
        skipped,
        "ms" if cost_model else PROXY_UNIT,
        profile.device_errors if profile else None,
        comm,
    ).to_dict()  # the JSON, with what the CLI adds
    spread_warnings = shard_warnings(cost_model, plans)
    report["warnings"] = [*warnings, *spread_warnings]
    if not json_out:
        for warning in spread_warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    report["profile"] = profile.profile if profile else None  # which device's costs these are (as the service says)
    best = next(p for p, r in zip(plans, report["plans"]) if r["best"])
    verification = None
    if verify:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        console.print(
            f"verifying: measuring the {verify_top} best-predicted distinct plans and the best heuristic's "
            f"on this machine, {verify_rounds} rounds",
            highlight=False,
        )
        with Progress(
            TextColumn("[bold]verify"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console
        ) as progress:
            rounds = progress.add_task("verify", total=verify_rounds)
            verifier = plans_verifier(
                verify_rounds,
                row_cap_mb,
                profile,
                comm,
                verify_top,
                lambda done: progress.update(rounds, completed=done),
            )
            verification = verifier(plans, loaded.batch_size)
        report["verification"] = {"measures": verification_measures(comm), **verification.to_dict()}
        best = verification.plan
    plan_stats = None
    if stats:
        from autoshard.planners.proxies import ProxyCostModel
        from autoshard.planners.stats import plan_stats as stats_of

        plan_stats = stats_of(
            best,
            loaded,
            topology,
            cost_model if cost_model is not None else ProxyCostModel(),
            comm if cost_model is not None else None,
            profile.device_errors if profile else None,
            report["cost_unit"],
        )
        chosen = next((i for i, p in enumerate(plans) if p is best), None)
        if chosen is None:  # a verified candidate stands for the first planner that made it
            chosen = next(i for i, p in enumerate(plans) if p.planner == best.planner)
        report["plans"][chosen]["stats"] = plan_stats.to_dict()
    if format == "torchrec":
        write_torchrec(loaded, topology, best, out)
        if plan_stats is not None:  # stdout may carry the export: the stats go to stderr
            from autoshard.cli.stats_view import print_stats

            print_stats(plan_stats, console)
    elif json_out:
        print_json(report)
    else:
        _print_table(loaded, topology, report)
        if verification is not None:
            expected = {plan["planner"]: plan["expected_max_ms"] for plan in report["plans"]}
            _print_verification(report["verification"], report["cost_unit"], expected)
        if plan_stats is not None:
            from autoshard.cli.stats_view import print_stats

            print_stats(plan_stats)
        if column_split is not True and (alone := _bound_by_one_table(best, topology)):
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


def _bound_by_one_table(plan: ShardingPlan, topology: Topology) -> str | None:
    """The table alone and whole on the plan's costliest device, if it could be split column-wise
    there (a shard alone there is a split that was weighed already)."""
    from autoshard.planners.column_split import split_ways

    slowest = max(plan.devices, key=lambda d: d.cost_ms)
    if len(slowest.shards) != 1 or slowest.shards[0].columns is not None:
        return None
    table = slowest.shards[0].table
    return table.name if split_ways(table.embedding_dim, topology.num_devices) else None


def _print_table(workload: Workload, topology: Topology, report: dict) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    from autoshard.planners.report import TIE

    unit = "ms" if report["cost_unit"] == "ms" else "proxy"
    table = RichTable(title=f"{workload.name}: {len(workload.tables)} tables on {topology_label(topology)}")
    errors = report.get("model_error")
    for column in (
        "planner",
        f"max cost ({unit})",
        *(("expected max (ms)",) if errors else ()),
        "imbalance",
        "plan time (s)",
        "best",
    ):
        table.add_column(column)
    lowest = min((plan["max_cost_ms"] for plan in report["plans"]), default=0.0)
    marks = [
        "*" if plan["best"] else "=" if plan["max_cost_ms"] <= lowest * (1 + TIE) else "" for plan in report["plans"]
    ]
    for plan, mark in zip(report["plans"], marks):
        reused = f" (+{plan['reused_s']:.3g} shared)" if plan["reused_s"] else ""
        partial = " partial" if plan["partial"] else ""
        expected = (f"{plan['expected_max_ms']:.4g}",) if errors else ()
        table.add_row(
            plan["planner"],
            f"{plan['max_cost_ms']:.4g}",
            *expected,
            f"{plan['imbalance']:.1%}",
            f"{plan['plan_time_s']:.3g}{reused}{partial}",
            mark,
        )
    out = Console()
    out.print(table)
    if errors:
        out.print(
            f"expected max: what the profile's measured error on each device ({errors['sets']} device sets "
            f"of {errors['tasks']} measured tasks, spread {errors['spread']:.1%}) leads to expect of the max; "
            "a lead that shrinks there is partly the model's error (docs/concepts.md, 'Expected max under the "
            "model's error')",
            highlight=False,
        )
    if any(plan["partial"] for plan in report["plans"]):
        out.print("partial: the planner's time budget (--time-budget) ran out; its best plan so far", highlight=False)
    if "=" in marks:
        out.print(
            "= ties the best on the max (* the one whose next costliest devices are lowest, the plan "
            "--format torchrec exports)",
            highlight=False,
        )
    for skipped in report["skipped"]:
        console.print(f"[yellow]skipped[/yellow] {skipped['planner']}: {skipped['reason']}", highlight=False)


def _print_verification(verification: dict, cost_unit: str, expected: dict[str, float | None]) -> None:
    """The measured candidates beside their predicted (and, with the profile's device errors,
    expected) max; ``expected`` by planner."""
    from rich.console import Console
    from rich.table import Table as RichTable

    unit = "ms" if cost_unit == "ms" else "proxy"
    table = RichTable(
        title=f"measured on this machine, {verification['rounds']} rounds (ratio to the predicted "
        "best, paired by round, 95% interval)"
    )
    with_expected = any(value is not None for value in expected.values())
    for column in (
        "plan of",
        f"predicted max ({unit})",
        *(("expected max (ms)",) if with_expected else ()),
        "measured max (ms)",
        "ratio",
        "verdict",
        "chosen",
    ):
        table.add_column(column)
    for row in verification["candidates"]:
        ci = f" [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]" if row["ci95"] else ""
        value = expected.get(row["planners"][0])
        expects = ("-" if value is None else f"{value:.4g}",) if with_expected else ()
        table.add_row(
            ", ".join(row["planners"]),
            f"{row['predicted_max_ms']:.4g}",
            *expects,
            f"{row['measured_max_ms']:.4g}",
            f"{row['measured_ratio_to_predicted_best']:.3f}{ci}",
            row["verdict"] or "(reference)",
            "*" if row["chosen"] else "",
        )
    Console().print(table)
    chosen = next(row for row in verification["candidates"] if row["chosen"])
    why = (
        "it measured fastest; the predicted best is the first row"
        if verification["changed"]
        else "the predicted best, and it measured fastest"
    )
    if verification["changed"] and chosen["verdict"] == "tie":
        why += ", within the noise of it"
    Console().print(f"verified: the plan of {', '.join(verification['chosen'])} ({why})", highlight=False)
