"""Predicted evaluation of the planners on a grid of held-out tasks (tables x devices): what
``autoshard policy eval`` reports (``GridReport``), as rows, a summary and a log-scale chart."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.task import Task, memory_for
from autoshard.core.types import Table, TableShard, Topology
from autoshard.evaluation.compare import compare_planners
from autoshard.evaluation.registry import planner_spec
from autoshard.planners.column_split import split_ways
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.placement_unit import model_costs

# A pool no training run draws from (training uses seed 0): every table here is unseen.
EVAL_POOL = PoolConfig(size=2000, seed=7)  # its test split: 400 tables


@dataclass(frozen=True, slots=True)
class GridConfig:
    tables: tuple[int, ...] = (20, 80, 200, 400)
    devices: tuple[int, ...] = (4, 8, 16, 32, 64)
    slack: float = 1.3
    seed: int = 0
    batch_size: int = 2048


def grid_tasks(config: GridConfig) -> list[Task]:
    tables = generate_pool(EVAL_POOL).test
    rng = np.random.default_rng(config.seed)
    tasks = []
    for count in config.tables:
        for devices in config.devices:
            workload = sample_task(tables, count, rng, config.batch_size, f"grid{count}x{devices}")
            tasks.append(Task(workload.name, workload, Topology(devices, memory_for(workload, devices, config.slack))))
    return tasks


@dataclass(frozen=True, slots=True)
class GridRow:
    """A task of the grid (``evaluate_grid``): every planner's predicted max and plan time (as if
    alone: with the placements it took from the task's other planners), the task's lower bound
    (None without a cost model), and the planners skipped, with why."""

    task: str
    tables: int
    devices: int
    lower_bound_ms: float | None
    max_ms: dict[str, float]
    plan_time_s: dict[str, float]
    skipped: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "tables": self.tables,
            "devices": self.devices,
            "lower_bound_ms": self.lower_bound_ms,
            "max_ms": dict(self.max_ms),
            "plan_time_s": dict(self.plan_time_s),
            "skipped": dict(self.skipped),
        }


def evaluate_grid(
    tasks: Sequence[Task],
    context: PlannerContext,
    communication: CommunicationModel | None,
    names: Sequence[str] | None = None,
) -> list[GridRow]:
    """One row per task: every planner's predicted max and plan time."""
    rows = []
    for task in tasks:
        result = compare_planners(task.workload, task.topology, names, context, communication)
        rows.append(
            GridRow(
                task.name,
                len(task.workload.tables),
                task.topology.num_devices,
                lower_bound_ms(task, context, communication),
                {p.planner: p.max_cost_ms for p in result.plans},
                {p.planner: p.plan_time_s + p.reused_s for p in result.plans},
                dict(result.skipped),
            )
        )
    return rows


def lower_bound_ms(task: Task, context: PlannerContext, communication: CommunicationModel | None) -> float | None:
    """No plan of the task has a lower predicted max: a device costs at least its costliest unit
    alone (the cost model's floor; with the all-to-all, which only grows with a device's tables),
    and every table is on some device, whole or, where a planner may split, as equal column
    shards of 2, 4, ... ways (``split_ways``: the cost-model planners' and the heuristics' shards),
    so a device costs at least the table in its cheapest form that fits. None without a cost model."""
    if context.cost_model is None:
        return None
    topology, capacity = task.topology, task.topology.device_memory_bytes  # the largest device's
    priced = (
        WithCommunication(context.cost_model, communication, topology)
        if communication is not None
        else context.cost_model
    )
    forms: list[list[Table]] = []  # each table's forms that fit a device: whole, and its shards
    for table in task.workload.tables:
        ways = split_ways(table.embedding_dim, topology.num_devices) if context.any_splits else []
        shards = [TableShard(table, 0, table.embedding_dim // k).as_table for k in ways]
        forms.append([t for t in (table, *shards) if t.memory_bytes <= capacity] or [table])
    costs = iter(model_costs(priced, task.workload.batch_size)([t for f in forms for t in f]))
    return max(min(next(costs) for _ in f) for f in forms)


SAME = 1e-5
"""Ratios within this of 1 are ties: the same placement, scored through float32 paths that round
apart by up to ~1e-6 (running sets against whole sets)."""


@dataclass(frozen=True, slots=True)
class GridSummary:
    """A planner over the grid's tasks (``summarise``); NaN where a share has no task to count."""

    tasks: int
    geomean_vs_best_heuristic: float
    worst_vs_best_heuristic: float
    share_at_most_best_heuristic: float
    geomean_vs_cost_greedy: float
    share_below_cost_greedy: float
    share_at_lower_bound: float
    tasks_cost_greedy_above_bound: int
    share_below_cost_greedy_above_bound: float
    median_plan_time_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "geomean_vs_best_heuristic": self.geomean_vs_best_heuristic,
            "worst_vs_best_heuristic": self.worst_vs_best_heuristic,
            "share_at_most_best_heuristic": self.share_at_most_best_heuristic,
            "geomean_vs_cost_greedy": self.geomean_vs_cost_greedy,
            "share_below_cost_greedy": self.share_below_cost_greedy,
            "share_at_lower_bound": self.share_at_lower_bound,
            "tasks_cost_greedy_above_bound": self.tasks_cost_greedy_above_bound,
            "share_below_cost_greedy_above_bound": self.share_below_cost_greedy_above_bound,
            "median_plan_time_s": self.median_plan_time_s,
        }


def summarise(rows: Sequence[GridRow]) -> dict[str, GridSummary]:
    """Per planner, over tasks: geometric mean of its max over the best heuristic's and over
    cost_greedy's, how often it is <= the best heuristic, < cost_greedy, and its worst ratio."""
    planners = sorted({p for r in rows for p in r.max_ms})
    out: dict[str, GridSummary] = {}
    for planner in planners:
        vs_heuristic, vs_greedy, vs_greedy_open, at_bound = [], [], [], []
        for r in rows:
            costs = r.max_ms
            if planner not in costs:
                continue
            heuristic = best_heuristic(costs)
            vs_heuristic.append(costs[planner] / heuristic)
            bound = r.lower_bound_ms
            if bound:
                at_bound.append(costs[planner] <= bound * (1 + SAME))
            if "cost_greedy" in costs:
                vs_greedy.append(costs[planner] / costs["cost_greedy"])
                if bound and costs["cost_greedy"] > bound * (1 + SAME):  # cost_greedy can be beaten here
                    vs_greedy_open.append(vs_greedy[-1])
        out[planner] = GridSummary(
            tasks=len(vs_heuristic),
            geomean_vs_best_heuristic=_geomean(vs_heuristic),
            worst_vs_best_heuristic=max(vs_heuristic, default=math.nan),
            share_at_most_best_heuristic=float(np.mean([v <= 1 + SAME for v in vs_heuristic]))
            if vs_heuristic
            else math.nan,
            geomean_vs_cost_greedy=_geomean(vs_greedy),
            share_below_cost_greedy=float(np.mean([v < 1 - SAME for v in vs_greedy])) if vs_greedy else math.nan,
            share_at_lower_bound=float(np.mean(at_bound)) if at_bound else math.nan,
            tasks_cost_greedy_above_bound=len(vs_greedy_open),
            share_below_cost_greedy_above_bound=(
                float(np.mean([v < 1 - SAME for v in vs_greedy_open])) if vs_greedy_open else math.nan
            ),
            median_plan_time_s=float(np.median([r.plan_time_s[planner] for r in rows if planner in r.plan_time_s])),
        )
    return out


@dataclass(frozen=True, slots=True)
class GridReport:
    """What ``autoshard policy eval`` reports (``grid.json``, ``--json``): the policy, the grid, the
    summary per planner and the rows per task."""

    policy: str
    config: GridConfig
    column_split: bool | str  # ``PlannerContext.split_setting``
    summary: dict[str, GridSummary]
    tasks: tuple[GridRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "config": {
                "tables": self.config.tables,
                "devices": self.config.devices,
                "seed": self.config.seed,
                "slack": self.config.slack,
                "column_split": self.column_split,
            },
            "summary": {planner: s.to_dict() for planner, s in self.summary.items()},
            "tasks": [r.to_dict() for r in self.tasks],
        }


def best_heuristic(costs: dict[str, float]) -> float:
    """The lowest predicted max among the heuristics' plans."""
    return min(c for p, c in costs.items() if planner_spec(p).kind is PlannerKind.HEURISTIC)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(float(np.mean(np.log(values)))) if values else math.nan


def markdown(rows: Sequence[GridRow], summary: Mapping[str, GridSummary], planners: Sequence[str]) -> str:
    lines = [
        "| task | best heuristic (ms) | lower bound / best heur. | "
        + " | ".join(f"{p} / best heur." for p in planners)
        + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in planners) + " |",
    ]
    for r in rows:
        costs, bound = r.max_ms, r.lower_bound_ms
        heuristic = best_heuristic(costs)
        cells = [
            (f"{costs[p] / heuristic:.3f}" + ("*" if bound and costs[p] <= bound * (1 + SAME) else ""))
            if p in costs
            else "-"
            for p in planners
        ]
        lines.append(
            f"| {r.task} | {heuristic:.3f} | {bound / heuristic:.3f} | "
            if bound
            else f"| {r.task} | {heuristic:.3f} | - | "
        )
        lines[-1] += " | ".join(cells) + " |"
    if any(r.lower_bound_ms for r in rows):
        lines += ["", "\\* at the lower bound (the costliest table alone): no plan is better."]
    lines += [
        "",
        "| planner | geomean vs best heuristic | worst | share <= best heuristic | geomean vs cost_greedy "
        "| share < cost_greedy | share < cost_greedy where it is above the bound | share at the bound "
        "| median plan time (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in planners:
        s = summary[p]
        lines.append(
            f"| {p} | {s.geomean_vs_best_heuristic:.3f} | {s.worst_vs_best_heuristic:.3f} | "
            f"{_share(s.share_at_most_best_heuristic)} | {s.geomean_vs_cost_greedy:.3f} | "
            f"{_share(s.share_below_cost_greedy)} | {_share(s.share_below_cost_greedy_above_bound)} "
            f"(of {s.tasks_cost_greedy_above_bound}) | {_share(s.share_at_lower_bound)} | "
            f"{s.median_plan_time_s:.3g} |"
        )
    return "\n".join(lines) + "\n"


def _share(value: float) -> str:
    """A share as a percentage; "-" where there is none (no lower bound with column splits)."""
    return "-" if math.isnan(value) else f"{value:.0%}"


def chart(rows: Sequence[GridRow], planners: Sequence[str], path: Path) -> None:
    """Each planner's predicted max over the best heuristic's, per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(rows)), 4))
    width = 0.8 / len(planners)
    for k, planner in enumerate(planners):
        values = []
        for r in rows:
            values.append(r.max_ms.get(planner, math.nan) / best_heuristic(r.max_ms))
        ax.bar([i + k * width for i in range(len(rows))], values, width, label=planner)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
    ax.set_xticklabels([r.task for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("predicted max / best heuristic's")
    ax.set_title("held-out tasks (tables x devices): predicted plan cost relative to the best heuristic")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
