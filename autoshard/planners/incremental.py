"""Re-planning a deployed plan with few moves: a model gains or loses tables, and moving a shard
that already lives on a device means moving its weights (and optimizer state) between devices, so
the plan it runs today is the starting point, not a blank slate.

``replan`` keeps every shard of the current placement (``CurrentPlacement``, of every sharding
type; ``current_placement`` says which it keeps) where it is, places the tables it does not hold
(new, or replaced) as cost_greedy places (each to the device whose predicted cost with it
is lowest, with the packing lookahead; split column-wise as cost_greedy splits, where that is
predicted clearly lower), then lets local search (cost_greedy's moves and swaps off the max-cost
device, evening the top out where no one change lowers it) move at most a budget of the kept
shards off their devices (table- and column-wise ones: a spread table's shards stay where they
are, as in every planner's local search; ``MoveBudget``: shards, and optionally bytes; of changes of the same new
max, the one moving the fewest kept shards). Tables new to the placement move freely: they are not
deployed yet. ``moves_from`` counts what any plan would move relative to the current placement,
so a plan from scratch compares like with like (docs/concepts.md, "Re-planning a deployed plan").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.core.errors import InputError, PlannerError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import FUSED_UVM_CACHING, CostModel, ShardingPlan, TableShard, Topology, Workload
from autoshard.planners.choosers import cheapest_after
from autoshard.planners.column_split import split_units
from autoshard.planners.context import DEPARTURE_MARGIN
from autoshard.planners.current_placement import CurrentPlacement, KeptShard, TableLayout, kept_tables
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState, build_plan, max_load
from autoshard.planners.local_search import (
    MAX_ROUNDS,
    REL_TOL,
    ChangePrice,
    Neighbourhood,
    apply_change,
    round_changes,
)
from autoshard.planners.place_loop import place
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_state import PlacementState, unit_cap
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.replan_constraints import check_replannable, shard_of
from autoshard.planners.sharding_options import COLUMN_TYPES, column_kind
from autoshard.planners.split_cap_choice import clearly_lower
from autoshard.planners.unit_preparation import by_cost


@dataclass(frozen=True, slots=True)
class Move:
    """A shard that a plan puts elsewhere than the current placement (``from_rank`` None: a shard
    the current placement does not hold in that form)."""

    shard: str
    from_rank: int | None
    to_rank: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class MoveBudget:
    """How much of the current placement a re-plan may move off its devices: at most ``shards`` of
    its shards and, with ``max_bytes``, at most that many bytes of them (weights and optimizer
    state: what a reshard copies)."""

    shards: int
    max_bytes: int | None = None

    @property
    def label(self) -> str:
        limit = "" if self.max_bytes is None else f", <= {self.max_bytes / 2**30:.4g} GiB"
        return f"replan (<= {self.shards} moves{limit})"


@dataclass(frozen=True, slots=True)
class Replanned:
    """``replan``'s plan, what it moved, and what it could not keep."""

    plan: ShardingPlan
    moves: tuple[Move, ...]
    dropped: tuple[str, ...]  # tables of the current placement that the workload no longer has
    replaced: tuple[str, ...]  # tables whose current shards no longer tile them (``kept_tables``): placed anew


def replan(
    workload: Workload,
    topology: Topology,
    cost_model: CostModel,
    current: CurrentPlacement,
    budget: MoveBudget,
    name: str = "replan",
    time_budget_s: float | None = None,
    allow_split: bool = True,
    margin: float = DEPARTURE_MARGIN,
) -> Replanned:
    """``replans`` with one budget."""
    return replans(workload, topology, cost_model, current, [budget], [name], time_budget_s, allow_split, margin)[0]


def replans(
    workload: Workload,
    topology: Topology,
    cost_model: CostModel,
    current: CurrentPlacement,
    budgets: Sequence[MoveBudget],
    names: Sequence[str] | None = None,
    time_budget_s: float | None = None,
    allow_split: bool = True,
    margin: float = DEPARTURE_MARGIN,
) -> list[Replanned]:
    """Per budget, the current placement's shards kept where they are, the workload's other tables
    placed by cost_greedy's rule, then local search moving at most that budget of the kept shards
    (module docstring); each plan named by ``names`` (default: the budgets' labels). The placement
    before the search is made once for every budget. With ``allow_split``, the new tables may split
    column-wise as cost_greedy splits (``split_units``, the kept shards counted as they are): a
    budget's split placement is kept where it is predicted more than ``margin`` below its placement
    of whole new tables (``clearly_lower``), or where those fit nowhere. Placement, and each
    budget's search, may take ``time_budget_s``. ``InputError`` where the current placement cannot
    hold on this topology (a rank past its devices, a device over its memory); ``PlannerError``
    where a new table fits nowhere beside the kept shards."""
    started = time.perf_counter()
    beyond = [s.rank for s in current.shards if s.rank >= topology.num_devices]
    if beyond:
        raise InputError(
            "num_devices",
            f"the current placement has shards on rank {max(beyond)}, and this topology "
            f"has {topology.num_devices} devices",
            f"plan for at least {max(beyond) + 1} devices",
        )
    held, replaced = kept_tables(current, workload, topology)
    check_replannable(workload, topology, held)  # the workload's constraints hold (replan_constraints)
    dropped = tuple(sorted({s.table for s in current.shards} - {t.name for t in workload.tables}))
    constraints, every = workload.constraints, frozenset(ShardingType)
    kinds = {t.name: constraints.allowed_types(t.name, every) for t in workload.tables}
    kept = [pair for t in workload.tables for pair in held.get(t.name, ())]
    fresh = [shard_of(t, 0, t.embedding_dim, kinds[t.name]) for t in workload.tables if t.name not in held]
    cost_fn = model_costs(cost_model, workload.batch_size)
    costs = cost_fn([s.as_table for s, _ in kept] + [s.as_table for s in fresh])
    pinned = constraints.placed_tables
    kept_units = [Unit.of(shard, cost, shard.table.name in pinned) for (shard, _), cost in zip(kept, costs)]
    whole = by_cost([Unit.of(s, c, s.table.name in pinned) for s, c in zip(fresh, costs[len(kept) :])])
    candidates = [whole]
    if allow_split and topology.num_devices > 1:
        stays = frozenset(n for n, k in kinds.items() if n in pinned or not k & COLUMN_TYPES)
        widths = {n: c.min_partition for n, c in constraints.tables if c.min_partition is not None}
        tcw = ShardingType.TABLE_COLUMN_WISE
        twcw = {n: tcw for n, k in kinds.items() if column_kind(k) is tcw}
        prepared = split_units(
            kept_units + whole, cost_fn, topology, frozen=len(kept_units), whole=stays, min_width=widths, kinds=twcw
        )
        split = by_cost(prepared[len(kept_units) :])
        if split != whole:
            candidates.append(split)
    placing = Deadline(started, time_budget_s)
    placed, error = [], None
    for new_units in candidates:
        try:
            placed.append(_placed(kept, kept_units, new_units, topology, cost_model, workload, placing))
        except PlannerError as failed:
            error = failed
    if not placed:
        assert error is not None
        raise PlannerError(
            error.kind,
            f"{error.message}, beside the current placement's shards",
            ("plan from scratch (`autoshard plan`), which may move every table", *error.fixes),
        )
    home = {unit: rank for unit, (_, rank) in zip(kept_units, kept)}
    out = []
    for budget, name in zip(budgets, names or [b.label for b in budgets]):
        begun = time.perf_counter()
        searching = Deadline(begun, time_budget_s)
        found = [
            _search(
                [d.copy() for d in state.devices],
                cost_model,
                workload.batch_size,
                home,
                budget,
                state.max_units_per_device,
                searching,
            )
            for state in placed
        ]
        devices = found[-1] if len(found) == 1 or clearly_lower(found[1], found[0], margin) else found[0]
        plan = build_plan(name, devices, begun, workload.batch_size, cost_model, partial=placing.hit or searching.hit)
        out.append(Replanned(plan, moves_from(current, plan, workload, topology), dropped, replaced))
    return out


def _placed(
    kept: Sequence[tuple[TableShard, int]],
    kept_units: Sequence[Unit],
    new_units: Sequence[Unit],
    topology: Topology,
    cost_model: CostModel,
    workload: Workload,
    deadline: Deadline,
) -> PlacementState:
    """The kept units preplaced on their devices, then ``new_units`` placed (heaviest first, each
    where its predicted cost is lowest, where the workload's placement constraints allow; the
    pinned tables first, then the others under one, while their devices have room)."""
    rules = PlacementRules(workload.constraints, topology)
    first = sorted(new_units, key=lambda u: (u.parent not in rules.pins, u.parent not in rules.tables))
    units = [*kept_units, *first]
    state = PlacementState(
        units,
        topology,
        cost_model.accumulator(topology.num_devices, workload.batch_size),
        lookahead=True,
        max_units_per_device=unit_cap(cost_model, len(units), topology.num_devices),
        rules=rules,
    )
    try:
        state.preplace([rank for _, rank in kept])
    except ValueError:
        raise InputError(
            "device_memory_gb",
            f"the current placement does not fit this topology: {_over_memory(kept, topology)}",
            "plan for devices with more memory",
        ) from None
    return place(state, cheapest_after, deadline=deadline)


def moves_from(
    current: CurrentPlacement, plan: ShardingPlan, workload: Workload, topology: Topology | None = None
) -> tuple[Move, ...]:
    """The shards of ``plan`` that the current placement does not hold on the same device in the
    same form (``_form``; the kernels of ``workload``'s tables are those it runs), of the tables
    it keeps on ``topology`` (``kept_tables``; default: the plan's devices on one host): a table
    new to it, or replaced, moves nothing."""
    shape = Topology(len(plan.devices), 1.0) if topology is None else topology  # its hosts alone matter
    held, _ = kept_tables(current, workload, shape)
    at: dict[tuple, set[int]] = {}
    for shards in held.values():
        for shard, rank in shards:
            at.setdefault(_form(shard), set()).add(rank)
    moves = []
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            if shard.table.name in held:
                was = at.get(_form(shard), set())
                if rank not in was:
                    moves.append(Move(shard.as_table.name, min(was, default=None), rank, shard.memory_bytes))
    return tuple(moves)


def _form(shard: TableShard) -> tuple:
    """A shard's form: its table, columns, rows (a data-parallel replica's on every rank) and
    kernel (moving a table between device and host memory copies it too)."""
    t = shard.table
    factor = t.load_factor if t.compute_kernel == FUSED_UVM_CACHING else None
    return (t.name, shard.column_offset, shard.width, shard.row_offset, shard.height, t.compute_kernel, factor)


def _search(
    states: list[DeviceState],
    cost_model: CostModel,
    batch_size: int,
    home: dict[Unit, int],
    budget: MoveBudget,
    max_units: int | None,
    deadline: Deadline,
) -> list[DeviceState]:
    """Local search's rounds (``round_changes``) off the max-cost device, each making the best change
    that leaves at most ``budget`` of the kept shards off their devices; where no change lowers the max
    (other devices as loaded), one that takes the max device below it (``even_out``: a kept plan's
    devices are rarely balanced, and its top is relieved one device at a time). The devices of the
    lowest max reached (the fewest moves for it), which the rounds after it may not have lowered."""
    best, best_max = [s.copy() for s in states], max_load(states)
    for _ in range(MAX_ROUNDS):
        if deadline.expired:
            break
        away = [u for s in states for u in s.units if home.get(u, s.index) != s.index]
        left_bytes = None if budget.max_bytes is None else budget.max_bytes - sum(u.memory_bytes for u in away)
        step = round_changes(
            states,
            cost_model,
            batch_size,
            max_units,
            even_out=True,
            price=_moved(home, budget.shards - len(away), left_bytes),
        )
        if step is None:
            break
        apply_change(states, step.changes[0])
        if max_load(states) < best_max * (1 - REL_TOL):
            best, best_max = [s.copy() for s in states], max_load(states)
    return best


def _moved(home: dict[Unit, int], left_shards: int, left_bytes: int | None) -> ChangePrice:
    """Each change's price: how many more kept shards it takes off their devices (``home``; a shard
    moved back home gives one back; tables new to the placement move freely, so at the same new max
    a change of new tables comes first), inf where that would leave more than ``left_shards`` shards
    or ``left_bytes`` bytes (None: any) of them off their devices."""

    def price(involved: Sequence[DeviceState], near: Neighbourhood) -> np.ndarray:
        source, index = involved[0], np.array([d.index for d in involved])
        target = index[near.k]
        shards, memory = _shifts([source.units[i] for i in near.out], home, source.index, target)
        swaps = np.flatnonzero(near.back >= 0)
        if len(swaps):
            back = [involved[k].units[j] for k, j in zip(near.k[swaps], near.back[swaps])]
            back_shards, back_memory = _shifts(back, home, target[swaps], source.index)
            shards[swaps] += back_shards
            memory[swaps] += back_memory
        ok = (shards <= left_shards) & (True if left_bytes is None else memory <= left_bytes)
        return np.where(ok, shards, np.inf)

    return price


def _shifts(
    units: Sequence[Unit], home: dict[Unit, int], before: np.ndarray | int, after: np.ndarray | int
) -> tuple[np.ndarray, np.ndarray]:
    """For each unit moved from device ``before`` to ``after``: how many kept shards, and bytes,
    more are off their devices (-1 and minus its bytes for one that comes home; 0 for a new table)."""
    at = np.array([home.get(u, -1) for u in units], dtype=np.int64)
    delta = np.where(at < 0, 0, (at != after).astype(np.int64) - (at != before))
    return delta, delta * np.array([u.memory_bytes for u in units], dtype=np.int64)


def _over_memory(kept: Sequence[tuple[TableShard, int]], topology: Topology) -> str:
    used: dict[int, int] = {}
    for shard, rank in kept:
        used[rank] = used.get(rank, 0) + shard.memory_bytes
    rank = max(used, key=lambda r: used[r])
    return (
        f"device {rank} would hold {used[rank] / 2**30:.3g} GiB of its shards, more than the "
        f"{topology.device_memory_gb_of(rank):.3g} GiB it has for tables (under "
        "TorchRec's model: what its storage reservation leaves)"
    )


__all__ = [
    "CurrentPlacement",
    "KeptShard",
    "Move",
    "MoveBudget",
    "Replanned",
    "TableLayout",
    "kept_tables",
    "moves_from",
    "replan",
    "replans",
]
