"""Local search over sharding options: change the option of a table on the max-cost device.

Moves and swaps (``local_search``) relocate shards under their table's option. This search
changes the option itself: a table- or column-wise table on the max device becomes row-wise, or
table-row-wise on its own host or on the least loaded host; a spread table (row-wise,
table-row-wise, grid, data parallel) with a shard on the max device becomes table-row-wise on
another host, row-wise, or table-wise on one of the least loaded devices with room. Each round
prices every such change of the ``TABLES_PER_ROUND`` costliest tables on the max device at once
(the devices a change touches, one batched call) and applies the one with the lowest new max,
while it lowers the max by more than ``REL_TOL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.core.constraints import Constraints
from autoshard.core.costing import predict_nonempty
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, Table, TableShard, Topology
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState
from autoshard.planners.local_search import REL_TOL
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.sharding_options import SpreadOption, spread_options

MAX_OPTION_ROUNDS = 8
TABLES_PER_ROUND = 3
TABLE_WISE_TARGETS = 2


@dataclass(frozen=True, slots=True)
class OptionChange:
    """Replace every shard of ``table`` by ``placements`` (rank, shard)."""

    table: Table
    placements: tuple[tuple[int, TableShard], ...]


def change_options(
    states: list[DeviceState],
    cost_model: CostModel,
    topology: Topology,
    batch_size: int,
    allowed: frozenset[ShardingType],
    max_rounds: int = MAX_OPTION_ROUNDS,
    deadline: Deadline | None = None,
    constraints: Constraints = Constraints(),
) -> int:
    """Apply the best option change while it lowers the max (module docstring); ``states[*].load``
    must hold predicted costs and are kept up to date. Tables under a placement constraint keep
    their option, and the others take only the types their ``constraints`` allow. Returns the
    number of changes applied."""
    applied = 0
    for _ in range(max_rounds):
        if deadline is not None and deadline.expired:
            break
        loads = np.array([s.load for s in states])
        source = int(loads.argmax())
        changes = _candidates(states, source, topology, allowed, constraints)
        if not changes:
            break
        best = _best(states, changes, loads, cost_model, batch_size)
        if best is None or best[0] >= loads.max() * (1 - REL_TOL):
            break
        _apply(states, best[1], best[2], cost_model, batch_size)
        applied += 1
    return applied


def _candidates(
    states: Sequence[DeviceState],
    source: int,
    topology: Topology,
    allowed: frozenset[ShardingType],
    constraints: Constraints,
) -> list[OptionChange]:
    units = sorted(states[source].units, key=lambda u: -u.cost)
    tables: list[Table] = []
    for unit in units:
        if unit.shard.table not in tables:
            tables.append(unit.shard.table)
    loads = np.array([s.load for s in states])
    host_loads = loads.reshape(topology.num_hosts, topology.local_world_size).sum(1)
    quiet_host = int(host_loads.argmin())
    changes: list[OptionChange] = []
    for table in tables[:TABLES_PER_ROUND]:
        if table.name in constraints.placed_tables:
            continue
        own = constraints.allowed_types(table.name, allowed)
        kinds = {s.sharding_type for d in states for u in d.units if u.shard.table is table for s in (u.shard,)}
        placed = kinds <= {ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE}
        row_types = own & {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE}
        for option in spread_options(table, topology, row_types):
            keep = option.host is None or option.host in (topology.host_of(source), quiet_host)
            if keep and (placed or option.sharding_type not in kinds or option.host != topology.host_of(source)):
                changes.append(OptionChange(table, option.placements))
        if not placed and ShardingType.TABLE_WISE in own:
            order = np.argsort(loads, kind="stable")
            targets = [int(d) for d in order if d != source][:TABLE_WISE_TARGETS]
            changes += [OptionChange(table, ((d, TableShard(table)),)) for d in targets]
    return changes


def _best(
    states: Sequence[DeviceState],
    changes: Sequence[OptionChange],
    loads: np.ndarray,
    cost_model: CostModel,
    batch_size: int,
) -> tuple[float, OptionChange, dict[int, float]] | None:
    """The change with the lowest new max that fits memory: (new max, change, new device costs)."""
    sets: list[list[Table]] = []
    spans: list[tuple[OptionChange, list[int]]] = []
    for change in changes:
        touched, fits = _after(states, change)
        if not fits:
            continue
        ranks = sorted(touched)
        spans.append((change, ranks))
        sets += [touched[r] for r in ranks]
    if not spans:
        return None
    costs = iter(predict_nonempty(cost_model, sets, batch_size))
    best: tuple[float, OptionChange, dict[int, float]] | None = None
    order = np.argsort(-loads, kind="stable")
    for change, ranks in spans:
        new = {r: float(next(costs)) for r in ranks}
        untouched = next((float(loads[d]) for d in order if int(d) not in new), 0.0)
        top = max(untouched, max(new.values()))
        if best is None or top < best[0]:
            best = (top, change, new)
    return best


def _after(states: Sequence[DeviceState], change: OptionChange) -> tuple[dict[int, list[Table]], bool]:
    """The touched devices' tables after ``change`` (its shards' devices and the table's current
    ones), and whether every touched device's memory holds."""
    table = change.table
    touched: dict[int, list[Table]] = {}
    memory: dict[int, int] = {}
    for d, state in enumerate(states):
        if table.name in state.parents:
            touched[d] = [u.table for u in state.units if u.parent != table.name]
            memory[d] = state.memory_bytes - sum(u.memory_bytes for u in state.units if u.parent == table.name)
    for rank, shard in change.placements:
        if rank not in touched:
            touched[rank] = list(states[rank].tables)
            memory[rank] = states[rank].memory_bytes
        touched[rank].append(shard.as_table)
        memory[rank] += shard.memory_bytes
    return touched, all(memory[r] <= states[r].capacity for r in touched)


def _apply(
    states: list[DeviceState], change: OptionChange, costs: dict[int, float], cost_model: CostModel, batch_size: int
) -> None:
    name = change.table.name
    for state in states:
        while name in state.parents:
            state.remove(next(i for i, u in enumerate(state.units) if u.parent == name), state.load)
    alone = model_costs(cost_model, batch_size)([s.as_table for _, s in change.placements])
    for (rank, shard), cost in zip(change.placements, alone):
        states[rank].add(Unit.of(shard, cost), states[rank].load)
    for rank, cost in costs.items():
        states[rank].load = cost


__all__ = ["OptionChange", "SpreadOption", "change_options"]
