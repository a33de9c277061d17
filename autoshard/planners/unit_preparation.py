"""A task's tables as placement units, split column-wise where allowed, each split computed once
per task (``TaskUnits``)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from autoshard.core.errors import PlannerError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import TableShard, Topology, Workload
from autoshard.planners.column_split import split_units
from autoshard.planners.feasibility import check_feasible
from autoshard.planners.placement_unit import CostFn, Unit
from autoshard.planners.sharding_options import COLUMN_TYPES, column_kind, placed_kind


def prepare_units(
    workload: Workload,
    topology: Topology,
    cost_fn: CostFn,
    allow_split: bool,
    shard_memory_limit: int | None = None,
    max_ways: int | None = None,
) -> list[Unit]:
    """The workload's tables as units with their costs alone, split column-wise if allowed
    (shards at most ``shard_memory_limit`` bytes if they can be, default the device memory);
    raises ``PlannerError`` if they cannot fit."""
    return TaskUnits(workload, topology, cost_fn)(allow_split, shard_memory_limit, max_ways)


class TaskUnits:
    """``prepare_units`` of one task under one cost function, each split (whether to split, the
    shard memory limit, the cap on ways) computed once and handed out as a new list: a planner
    asks for the units of every split cap to choose the caps it plans, then places them, and the
    planners of a task ask alike (``TaskCache.units``)."""

    def __init__(self, workload: Workload, topology: Topology, cost_fn: CostFn) -> None:
        self.workload, self.topology, self.cost_fn = workload, topology, cost_fn
        self._whole: list[Unit] | None = None
        self._found: dict[tuple[bool, int, int | None], list[Unit] | PlannerError] = {}
        self._splits: dict[Hashable, Any] = {}  # ``split_units``' shards, made once for every split

    def __call__(
        self, allow_split: bool, shard_memory_limit: int | None = None, max_ways: int | None = None
    ) -> list[Unit]:
        limit = self.topology.device_memory_bytes if shard_memory_limit is None else shard_memory_limit
        key = (allow_split, limit, max_ways)
        found = self._found.get(key)
        if found is None:
            try:
                found = self._prepared(allow_split, limit, max_ways)
            except PlannerError as error:
                found = error
            self._found[key] = found
        if isinstance(found, PlannerError):
            raise found
        return list(found)

    def _prepared(self, allow_split: bool, limit: int, max_ways: int | None) -> list[Unit]:
        constraints = self.workload.constraints
        every = frozenset(ShardingType)
        allowed = {t.name: constraints.allowed_types(t.name, every) for t in self.workload.tables}
        if self._whole is None:  # every split starts from the whole tables: costed once
            tables, placed = self.workload.tables, constraints.placed_tables
            shards = [TableShard(t, sharding=placed_kind(allowed[t.name])) for t in tables]
            costs = self.cost_fn([s.as_table for s in shards])
            self._whole = [Unit.of(s, c, s.table.name in placed) for s, c in zip(shards, costs)]
        units = self._whole
        if allow_split and self.topology.num_devices > 1:
            whole = frozenset(  # placement-constrained tables, and those not allowed column-wise, stay whole
                t.name
                for t in self.workload.tables
                if t.name in constraints.placed_tables or not allowed[t.name] & COLUMN_TYPES
            )
            min_width = {n: c.min_partition for n, c in constraints.tables if c.min_partition is not None}
            column_kinds = {  # table_column_wise blocks (column_wise ones need no mark: TableShard's default)
                n: ShardingType.TABLE_COLUMN_WISE
                for n, k in allowed.items()
                if column_kind(k) is ShardingType.TABLE_COLUMN_WISE
            }
            units = split_units(
                units,
                self.cost_fn,
                self.topology,
                limit,
                max_ways,
                whole=whole,
                min_width=min_width,
                kinds=column_kinds,
                memo=self._splits,
            )
        check_feasible(units, self.topology, allow_split)
        return units

    def at_cap(self, cap: int | None) -> list[Unit]:
        """The units that split cap ``cap`` (None: no split) starts placement from
        (``place_workload``'s first try, before any retry with smaller shards)."""
        return self(cap is not None, max_ways=cap)


def by_cost(units: Sequence[Unit]) -> list[Unit]:
    """Heaviest first; ties by name."""
    return sorted(units, key=lambda u: (-u.cost, u.name))
