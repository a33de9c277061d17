"""The tasks a placing planner plans once tables are spread: the task itself (when every table
can be placed whole or column-wise) and, for each ``spread_variants`` variant, the rest of the
workload around the variant's spread shards (a ``TaskCache`` with ``fixed`` shards), and where
that fails, the variant with the tables its shards crowd out spread too (``Crowded``). Computed
once per task (kept in its cache), so that every cost_greedy of a task reuses them and what it
placed on them; ``best_of_tasks`` keeps the best plan over them. The rl planners choose each
table's option themselves (``autoshard.rl.options``) and use neither."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from autoshard.core.errors import PlannerError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, Table
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState, max_load
from autoshard.planners.feasibility import check_total
from autoshard.planners.placement_rules import check_constraints
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit
from autoshard.planners.sharding_options import place_spread, spread_costs, spread_option_memo
from autoshard.planners.spread_variants import SpreadVariant, crowded_out, spread_variants
from autoshard.planners.task_cache import Placement, TaskCache

TaskOrError = TaskCache | Placement | PlannerError
"""A task to place the rest of around spread shards; a finished ``Placement`` where every table
was spread; or the ``PlannerError`` of a variant that does not fit."""


@dataclass(frozen=True, slots=True)
class Crowded:
    """A variant's task with the tables its spread shards crowd out spread too
    (``crowded_out``), made (``make``) and planned only where the variant's own task, just
    before it, found no plan (its rest dead-ends beside the shards): a variant that plans costs
    nothing more. ``make`` gives ``None`` where an earlier variant spreads the same tables."""

    make: Callable[[], TaskOrError | None]


Task = TaskOrError | Crowded
"""A task, or a task planned only where the one before it found no plan (``Crowded``)."""


def spread_tasks(
    cache: TaskCache, cost_model: CostModel, allow_split: bool, allowed: frozenset[ShardingType]
) -> list[Task]:
    """The tasks to plan, in order: ``cache`` itself unless some table must be spread, then one
    per variant (a variant whose spread tables fit under no option: its ``PlannerError``), each
    followed by its ``Crowded`` task where its shards crowd tables out."""

    def make() -> list[Task]:
        with spread_option_memo():  # the variants ask for the same tables' options
            return _spread_tasks(cache, cost_model, allow_split, allowed)

    return cache.derived(("spread tasks", id(cost_model), allow_split, allowed), make)


def _spread_tasks(
    cache: TaskCache, cost_model: CostModel, allow_split: bool, allowed: frozenset[ShardingType]
) -> list[Task]:
    """``spread_tasks``, computed."""
    workload, topology = cache.workload, cache.topology
    check_total(workload.memory_bytes, topology)
    check_constraints(workload, topology, allowed)
    cost_fn = spread_costs(cost_model, workload.batch_size)
    variants = spread_variants(workload, topology, cost_fn, allow_split, allowed)
    tasks: list[Task] = [] if variants and variants[0].name == "needed" else [cache]
    owners: dict[tuple[frozenset[str], ...], str] = {v.key: v.name for v in variants}
    for variant in variants:
        try:
            options = variant.options_of(topology, allowed, workload.constraints, cache.rules)
            fixed = place_spread(variant.tables, options, topology, cost_fn)
        except PlannerError as error:
            tasks.append(error)
            continue
        tasks.append(_rest_task(cache, cost_model, variant, fixed))
        crowded = _crowded(cache, variant, fixed, allowed)
        if crowded:
            tasks.append(
                Crowded(partial(_crowded_task, cache, cost_model, variant.spreading(crowded), owners, allowed))
            )
    return tasks


def _crowded(
    cache: TaskCache, variant: SpreadVariant, fixed: tuple[tuple[int, Unit], ...], allowed: frozenset[ShardingType]
) -> list[Table]:
    """The tables ``variant``'s shards (``fixed``) crowd out (``crowded_out``)."""
    workload, topology = cache.workload, cache.topology
    free = np.array(topology.device_memory_bytes_all, dtype=np.int64)
    for rank, unit in fixed:
        free[rank] -= unit.memory_bytes
    spread = {t.name for t in variant.tables}
    rest = [t for t in workload.tables if t.name not in spread]
    return crowded_out(rest, free.tolist(), topology, allowed, workload.constraints)


def _crowded_task(
    cache: TaskCache,
    cost_model: CostModel,
    variant: SpreadVariant,
    owners: dict[tuple[frozenset[str], ...], str],
    allowed: frozenset[ShardingType],
) -> TaskOrError | None:
    """``variant`` spread, with the tables its shards crowd out spread too until none is: its
    task, its ``PlannerError``, or ``None`` where another variant (``owners``: by what each
    spreads) spreads the same tables."""
    workload, topology = cache.workload, cache.topology
    cost_fn = spread_costs(cost_model, workload.batch_size)
    while True:
        options = variant.options_of(topology, allowed, workload.constraints, cache.rules)
        try:
            fixed = place_spread(variant.tables, options, topology, cost_fn)
        except PlannerError as error:
            return error
        crowded = _crowded(cache, variant, fixed, allowed)
        if not crowded:
            break
        variant = variant.spreading(crowded)
    if owners.setdefault(variant.key, variant.name) != variant.name:
        return None
    return _rest_task(cache, cost_model, variant, fixed)


def _rest_task(
    cache: TaskCache, cost_model: CostModel, variant: SpreadVariant, fixed: tuple[tuple[int, Unit], ...]
) -> TaskCache | Placement:
    """The rest of the workload to place around ``variant``'s spread shards (``fixed``); a
    finished ``Placement`` where the variant spread every table."""
    workload, topology = cache.workload, cache.topology
    spread = {t.name for t in variant.tables}
    rest = tuple(t for t in workload.tables if t.name not in spread)
    if rest:
        return TaskCache(replace(workload, tables=rest), topology, fixed)
    accumulator = cost_model.accumulator(topology.num_devices, workload.batch_size)
    devices = PlacementState([], topology, accumulator, fixed=fixed).devices
    return Placement((), tuple(devices))


BOUND_SLACK = 0.9
"""``task_bound`` sums costs alone, and a device's set may cost less than the sum of its tables
alone (about 0.93x for 2-4 tables, docs/concepts.md): a task is skipped only where 0.9x its bound
cannot clear the margin."""


def task_bound(task: TaskCache, cost_model: CostModel) -> float:
    """No plan of ``task`` has a lower max than this (up to ``BOUND_SLACK``): the even share of its
    units' and fixed shards' costs alone, or the most its fixed shards put on one device."""
    rest = task.units(cost_model).at_cap(None) if task.topology.num_devices else []
    fixed = np.zeros(task.topology.num_devices)
    for rank, unit in task.fixed:
        fixed[rank] += unit.cost
    total = sum(u.cost for u in rest) + float(fixed.sum())
    return max(total / task.topology.num_devices, float(fixed.max()))


def best_of_tasks(
    tasks: list[Task],
    plan_task: Callable[[TaskCache], list[DeviceState]],
    margin: float,
    deadline: Deadline,
    cost_model: CostModel | None = None,
) -> list[DeviceState]:
    """``plan_task`` on each task in order (the rest skipped once the ``deadline`` expires with a
    plan in hand); a later plan replaces the one kept only if predicted more than ``margin`` below
    it, so a task whose bound (``task_bound``, with the ``cost_model``) cannot be is not planned;
    a ``Crowded`` task is planned only where the task before it raised ``PlannerError``.
    Raises the last ``PlannerError`` when no task could be planned."""
    best: list[DeviceState] | None = None
    error: PlannerError | None = None
    failed_before = False
    for each in tasks:
        if best is not None and deadline.expired:
            break
        if isinstance(each, Crowded) and not failed_before:
            continue
        task = each.make() if isinstance(each, Crowded) else each
        failed_before = False
        if task is None:
            continue
        if best is not None and cost_model is not None and isinstance(task, TaskCache):
            try:
                hopeless = BOUND_SLACK * task_bound(task, cost_model) >= (1 - margin) * max_load(best)
            except PlannerError:  # its tables do not fit whole: no bound, plan it
                hopeless = False
            if hopeless:
                continue
        try:
            if isinstance(task, PlannerError):
                raise task
            found = [d.copy() for d in task.devices] if isinstance(task, Placement) else plan_task(task)
        except PlannerError as failed:
            error, failed_before = failed, True
            continue
        if best is None or max_load(found) < (1 - margin) * max_load(best):
            best = found
    if best is None:
        assert error is not None
        raise error
    return best
