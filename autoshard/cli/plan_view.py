"""How `autoshard plan` prints its report: the plans side by side, the verification's
measurements, and the notes under them (the JSON is ``PlanningReport.to_dict``)."""

from __future__ import annotations

from autoshard.cli.support import console, topology_label
from autoshard.core.types import Topology, Workload


def print_plans(workload: Workload, topology: Topology, report: dict) -> None:
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


def print_verification(verification: dict, cost_unit: str, expected: dict[str, float | None]) -> None:
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
