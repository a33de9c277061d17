"""Predicted evaluation of the planners on a grid of held-out tasks (tables x topologies, some
with tables larger than a device): what ``autoshard policy eval`` reports (``GridReport``), as
rows, a summary and a chart."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoshard.core.communication import CommunicationModel, WithCommunication
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.task import Task, even_memory, memory_for
from autoshard.core.types import Table, TableShard, Topology
from autoshard.planners.column_split import split_ways
from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.placement_unit import model_costs
from autoshard.planners.sharding_options import SPREAD_TYPES, spread_options
from autoshard.planning.compare import compare_planners
from autoshard.planning.registry import planner_spec

# A pool no training run draws from (training uses seed 0): every table here is unseen.
EVAL_POOL = PoolConfig(size=6000, seed=7)  # its test split: 1,200 tables


@dataclass(frozen=True, slots=True)
class GridConfig:
    """The grid: every table count on every topology, (hosts, devices per host). Every
    ``giant_every``-th task (1-based, in grid order: tasks 2, 4, ... by default; 0: none) is a
    *giant* task: ``slack`` x an even share of its tables' memory per device, without
    ``memory_for``'s floor of the largest table, so that its largest tables may fit no device
    whole and must be row-sharded; the others get ``memory_for`` (binding, every table fits)."""

    tables: tuple[int, ...] = (20, 80, 200, 400, 1000)
    topologies: tuple[tuple[int, int], ...] = ((1, 4), (1, 8), (2, 8), (4, 8), (16, 8))
    slack: float = 1.3
    seed: int = 0
    batch_size: int = 2048
    giant_every: int = 2

    def is_giant(self, index: int) -> bool:
        """Whether the grid's task at 0-based ``index`` is a giant task."""
        return self.giant_every > 0 and (index + 1) % self.giant_every == 0


GIANT_SUFFIX = "-giant"


def grid_tasks(config: GridConfig) -> list[Task]:
    """The grid's tasks, table count by table count, each on every topology in turn; named
    ``grid{tables}x{hosts}x{per host}``, and ``GIANT_SUFFIX`` after a giant task's."""
    tables = generate_pool(EVAL_POOL).test
    rng = np.random.default_rng(config.seed)
    tasks: list[Task] = []
    for count in config.tables:
        for hosts, per_host in config.topologies:
            giant = config.is_giant(len(tasks))
            devices = hosts * per_host
            name = f"grid{count}x{hosts}x{per_host}" + (GIANT_SUFFIX if giant else "")
            workload = sample_task(tables, count, rng, config.batch_size, name)
            memory = (even_memory if giant else memory_for)(workload, devices, config.slack)
            tasks.append(Task(name, workload, Topology.cluster(hosts, per_host, memory)))
    return tasks


def has_oversized_table(task: Task) -> bool:
    """Whether some table of ``task`` is larger than its largest device (it must be split)."""
    return max(t.memory_bytes for t in task.workload.tables) > task.topology.device_memory_bytes


@dataclass(frozen=True, slots=True)
class GridRow:
    """A task of the grid (``evaluate_grid``): every planner's predicted max and plan time (as if
    alone: with the placements it took from the task's other planners), the task's lower bound
    (None without a cost model, or where some table fits no device in any form), and the
    planners skipped, with why. ``giant``: a giant task of the grid (``GridConfig``)."""

    task: str
    tables: int
    devices: int
    hosts: int
    devices_per_host: int
    giant: bool
    lower_bound_ms: float | None
    max_ms: dict[str, float]
    plan_time_s: dict[str, float]
    skipped: dict[str, str]

    @property
    def topology_label(self) -> str:
        return f"{self.hosts}x{self.devices_per_host}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "tables": self.tables,
            "devices": self.devices,
            "hosts": self.hosts,
            "devices_per_host": self.devices_per_host,
            "giant": self.giant,
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
    giant: Sequence[bool] | None = None,
) -> list[GridRow]:
    """One row per task: every planner's predicted max and plan time (a planner that cannot plan
    a task, none can on some giant ones, is in the row's ``skipped``). ``giant``: which tasks are
    the grid's giant ones (default: those named so by ``grid_tasks``)."""
    rows = []
    for i, task in enumerate(tasks):
        result = compare_planners(task.workload, task.topology, names, context, communication)
        topology = task.topology
        rows.append(
            GridRow(
                task.name,
                len(task.workload.tables),
                topology.num_devices,
                topology.num_hosts,
                topology.devices_per_host,
                giant[i] if giant is not None else task.name.endswith(GIANT_SUFFIX),
                lower_bound_ms(task, context.for_task(task.workload, task.topology), communication),
                {p.planner: p.max_cost_ms for p in result.plans},
                {p.planner: p.plan_time_s + p.reused_s for p in result.plans},
                dict(result.skipped),
            )
        )
    return rows


def _form_key(table: Table) -> tuple:
    """What a shard's predicted cost depends on (every field but its name)."""
    return (
        table.num_embeddings,
        table.embedding_dim,
        table.pooling_factor,
        table.zipf_alpha,
        table.bytes_per_element,
        table.optimizer,
        table.sharding_type,
    )


def table_forms(table: Table, topology: Topology, context: PlannerContext) -> list[list[TableShard]]:
    """Every form a planner may give ``table`` on ``topology``, as the shards it puts on devices
    (one per device it uses): whole; where some planner may split (``context.any_splits``), k
    equal column shards for each k of ``split_ways``; and each spread option of
    ``spread_options`` within ``context.sharding_types``: row_wise over all D devices,
    table_row_wise over the devices of one host, grid_shard from one host, a data_parallel
    replica on every device (the options of one type on different hosts have the same shards:
    one of them is listed). Memory is not checked here."""
    forms: list[list[TableShard]] = [[TableShard(table)]]
    if context.any_splits:
        dim = table.embedding_dim
        for k in split_ways(dim, topology.num_devices):
            forms.append([TableShard(table, j * (dim // k), dim // k) for j in range(k)])
    seen: set[tuple] = set()
    for option in spread_options(table, topology, context.sharding_types & SPREAD_TYPES):
        key = (option.sharding_type, len(option.placements))  # hosts differ only in ranks
        if key not in seen:
            seen.add(key)
            forms.append([s for _, s in option.placements])
    return forms


def lower_bound_ms(
    task: Task,
    context: PlannerContext,
    communication: CommunicationModel | None,
) -> float | None:
    """A lower bound on the predicted max of any plan of the task, 4D plans included.

    A plan gives each table one *form* (``table_forms``): whole; k equal column shards (2, 4, ...
    ways, where a planner may split); row_wise shards over all D devices; table_row_wise shards
    over the devices of one host (the local world size); grid_shard's column blocks row-sharded
    over hosts; or a data_parallel replica on every device. Each shard is priced alone, at its
    share of the table's lookups (with the all-to-all where ``communication`` is given), every
    distinct shard of the task in one ``model_costs`` call. Only forms whose every shard fits a
    device's memory count. The bound: per table, the cost of its costliest shard in its cheapest
    form (the form whose costliest shard costs least); the largest of these over the tables. Some
    device holds that shard, and a device costs at least each of its shards alone (the cost
    model's floor; the all-to-all only grows with a device's shards).

    An even-share term (the sum of the shards' costs alone / D) is not a bound under the learned
    model: it prices sets of 2-8 tables down to 0.35-0.61x the sum of their tables alone (200
    random sets per size from the eval pool), and plans of ``grid20x1x4`` came out below it
    (docs/decisions.md, 40). Where the bound leaves room, that is room the model may not offer.

    None without a cost model, or when some table fits no device in any form (no plan exists)."""
    if context.cost_model is None:
        return None
    topology, capacity = task.topology, task.topology.device_memory_bytes
    batch = task.workload.batch_size
    priced = (
        WithCommunication(context.cost_model, communication, topology)
        if communication is not None
        else context.cost_model
    )
    index: dict[tuple, int] = {}  # distinct shards by what prices them, each priced once
    distinct: list[Table] = []
    tables: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per table, its fitting forms: (shard, count)
    for table in task.workload.tables:
        fitting = []
        for form in table_forms(table, topology, context):
            counts: dict[int, int] = {}
            as_tables = [s.as_table for s in form]
            if max(t.memory_bytes for t in as_tables) > capacity:
                continue
            for t in as_tables:
                key = _form_key(t)
                if key not in index:
                    index[key] = len(distinct)
                    distinct.append(t)
                counts[index[key]] = counts.get(index[key], 0) + 1
            fitting.append((np.fromiter(counts, dtype=np.int64), np.fromiter(counts.values(), dtype=np.float64)))
        if not fitting:
            return None
        tables.append(fitting)
    costs = np.array(model_costs(priced, batch)(distinct), dtype=np.float64)
    return max(min(float(costs[at].max()) for at, _ in forms) for forms in tables)


SAME = 1e-5
"""Ratios within this of 1 are ties: the same placement, scored through float32 paths that round
apart by up to ~1e-6 (running sets against whole sets)."""
OPEN_GAP = 0.02
"""A task is *open* where cost_greedy's predicted max is more than this above the lower bound:
there, a plan may beat it (elsewhere it is at or near the bound, and little can)."""


@dataclass(frozen=True, slots=True)
class GridSummary:
    """A planner over the grid's tasks (``summarise``); NaN where a ratio or share has no task to
    count. ``tasks``: the tasks it planned; ``skipped``: those it could not.
    ``tasks_cost_greedy_above_bound``: the open tasks (``OPEN_GAP``) that it and cost_greedy
    both planned, and ``share_below_cost_greedy_above_bound`` the share of them where its max is
    strictly lower than cost_greedy's (ratio < 1 - ``SAME``)."""

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
    skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "skipped": self.skipped,
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


def is_open(row: GridRow) -> bool:
    """Whether cost_greedy planned the task, more than ``OPEN_GAP`` above its lower bound."""
    bound, greedy = row.lower_bound_ms, row.max_ms.get("cost_greedy")
    return bound is not None and bound > 0 and greedy is not None and greedy > bound * (1 + OPEN_GAP)


def summarise(rows: Sequence[GridRow]) -> dict[str, GridSummary]:
    """Per planner, over the tasks it planned: the geometric mean of its max over the best
    heuristic's and over cost_greedy's, how often it is <= the best heuristic (within ``SAME``),
    its worst ratio to the best heuristic, how often it is < cost_greedy, and, over the open
    tasks (cost_greedy more than ``OPEN_GAP`` above the bound), how many and how often it is
    strictly below cost_greedy."""
    planners = sorted({p for r in rows for p in r.max_ms})
    out: dict[str, GridSummary] = {}
    for planner in planners:
        vs_heuristic, vs_greedy, vs_greedy_open, at_bound, times = [], [], [], [], []
        planned = skipped = 0
        for r in rows:
            costs = r.max_ms
            if planner not in costs:
                skipped += planner in r.skipped
                continue
            planned += 1
            times.append(r.plan_time_s[planner])
            heuristic = best_heuristic(costs)
            if heuristic is not None:
                vs_heuristic.append(costs[planner] / heuristic)
            bound = r.lower_bound_ms
            if bound:
                at_bound.append(costs[planner] <= bound * (1 + SAME))
            if "cost_greedy" in costs:
                vs_greedy.append(costs[planner] / costs["cost_greedy"])
                if is_open(r):
                    vs_greedy_open.append(vs_greedy[-1])
        out[planner] = GridSummary(
            tasks=planned,
            geomean_vs_best_heuristic=_geomean(vs_heuristic),
            worst_vs_best_heuristic=max(vs_heuristic, default=math.nan),
            share_at_most_best_heuristic=_share_of([v <= 1 + SAME for v in vs_heuristic]),
            geomean_vs_cost_greedy=_geomean(vs_greedy),
            share_below_cost_greedy=_share_of([v < 1 - SAME for v in vs_greedy]),
            share_at_lower_bound=_share_of(at_bound),
            tasks_cost_greedy_above_bound=len(vs_greedy_open),
            share_below_cost_greedy_above_bound=_share_of([v < 1 - SAME for v in vs_greedy_open]),
            median_plan_time_s=float(np.median(times)) if times else math.nan,
            skipped=skipped,
        )
    return out


def _share_of(flags: Sequence[bool]) -> float:
    return float(np.mean(flags)) if flags else math.nan


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
                "topologies": [list(t) for t in self.config.topologies],
                "giant_every": self.config.giant_every,
                "seed": self.config.seed,
                "slack": self.config.slack,
                "batch_size": self.config.batch_size,
                "column_split": self.column_split,
            },
            "summary": {planner: s.to_dict() for planner, s in self.summary.items()},
            "tasks": [r.to_dict() for r in self.tasks],
        }


def best_heuristic(costs: Mapping[str, float]) -> float | None:
    """The lowest predicted max among the heuristics' plans (None: no heuristic planned)."""
    return min((c for p, c in costs.items() if planner_spec(p).kind is PlannerKind.HEURISTIC), default=None)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(float(np.mean(np.log(values)))) if values else math.nan


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.3f}"


def markdown(rows: Sequence[GridRow], summary: Mapping[str, GridSummary], planners: Sequence[str]) -> str:
    """A row per task (hosts x devices per host, whether giant, the lower bound, cost_greedy's and
    the best heuristic's max, and each of ``planners``' max over cost_greedy's and over the best
    heuristic's), then a row per planner of ``summarise``."""
    columns = [
        "task",
        "tables",
        "hosts x devices",
        "giant",
        "lower bound (ms)",
        "cost_greedy (ms)",
        "best heuristic (ms)",
    ]
    for p in planners:
        if p != "cost_greedy":
            columns.append(f"{p} / cost_greedy")
        columns.append(f"{p} / best heur.")
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for r in rows:
        costs, bound = r.max_ms, r.lower_bound_ms
        heuristic, greedy = best_heuristic(costs), costs.get("cost_greedy")
        cells = [
            r.task,
            str(r.tables),
            r.topology_label,
            "yes" if r.giant else "",
            "-" if bound is None else f"{bound:.3f}",
            "-" if greedy is None else f"{greedy:.3f}",
            "-" if heuristic is None else f"{heuristic:.3f}",
        ]
        for p in planners:
            star = "*" if p in costs and bound and costs[p] <= bound * (1 + SAME) else ""
            if p != "cost_greedy":
                cells.append(_ratio(costs.get(p), greedy) + star)
            cells.append(_ratio(costs.get(p), heuristic) + star)
        lines.append("| " + " | ".join(cells) + " |")
    if any(r.lower_bound_ms for r in rows):
        lines += [
            "",
            "\\* at the lower bound (`lower_bound_ms`: the largest over tables of the costliest shard in "
            "the table's cheapest form, each shard priced alone): no plan is better.",
        ]
    skipped = [(r.task, p) for r in rows for p in planners if p in r.skipped]
    if skipped:
        lines += ["", "Not planned: " + "; ".join(f"{p} on {task}" for task, p in skipped) + "."]
    lines += [
        "",
        "| planner | tasks | geomean vs cost_greedy | geomean vs best heuristic | share <= best heuristic "
        "| worst vs best heuristic | share < cost_greedy | open tasks (cost_greedy > bound + 2%) "
        "| share < cost_greedy there | share at the bound | median plan time (s) |",
        "|" + " --- |" * 11,
    ]
    for p in planners:
        s = summary.get(p)
        if s is None:
            lines.append(f"| {p} | 0 |" + " - |" * 9)
            continue
        lines.append(
            f"| {p} | {s.tasks} | {_number(s.geomean_vs_cost_greedy)} | {_number(s.geomean_vs_best_heuristic)} | "
            f"{_share(s.share_at_most_best_heuristic)} | {_number(s.worst_vs_best_heuristic)} | "
            f"{_share(s.share_below_cost_greedy)} | {s.tasks_cost_greedy_above_bound} | "
            f"{_share(s.share_below_cost_greedy_above_bound)} | {_share(s.share_at_lower_bound)} | "
            f"{_number(s.median_plan_time_s, '.3g')} |"
        )
    return "\n".join(lines) + "\n"


def _number(value: float, spec: str = ".3f") -> str:
    return "-" if math.isnan(value) else format(value, spec)


def _share(value: float) -> str:
    """A share as a percentage; "-" where there is none (no task to count)."""
    return "-" if math.isnan(value) else f"{value:.0%}"


def chart(rows: Sequence[GridRow], planners: Sequence[str], path: Path) -> None:
    """Each planner's predicted max over the best heuristic's, per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(rows)), 4))
    width = 0.8 / max(len(planners), 1)
    for k, planner in enumerate(planners):
        values = []
        for r in rows:
            heuristic = best_heuristic(r.max_ms)
            cost = r.max_ms.get(planner)
            values.append(cost / heuristic if cost is not None and heuristic else math.nan)
        ax.bar([i + k * width for i in range(len(rows))], values, width, label=planner)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
    labels = [f"{r.tables}@{r.topology_label}" + (" giant" if r.giant else "") for r in rows]
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("predicted max / best heuristic's")
    ax.set_title("held-out tasks (tables @ hosts x devices): predicted plan cost relative to the best heuristic")
    if planners:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
