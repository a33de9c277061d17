"""The sharding problem as the agent steps it: each table's options, and the placement in progress.

An *option* is a sharding type with the devices it puts the table's shards on:

- ``table_wise`` on device d: one option per device the mask allows;
- ``column_wise`` in k ways (2, 4, ... as ``column_split.split_ways``, within ``min_partition``):
  its k column shards become the next units, each placed ``table_wise`` on a device of its own;
- ``row_wise`` over every device, ``table_row_wise`` on host h, ``grid_shard`` from host h,
  ``data_parallel`` on every device (``sharding_options.spread_options``).

Tables that fit no device whole come first (their row shares before the rest fills the devices, as
cost_greedy spreads them first), then the largest predicted cost first (the big decisions come while
every device is still open). ``OptionState.candidates`` lists the current unit's feasible options
with their features; ``apply`` takes one. The options are the decisions; which ones are offered is
feasibility (memory, TorchRec's constraints, the packing lookahead, the extrapolation guard) plus two
limits on what is worth pricing: a row or column split only for a table no device can take whole or
that costs at least ``SPREAD_SHARE`` of an even share (a cheaper table gains nothing from one), a
replica only for a table within ``DP_MEMORY_SHARE`` of a device whose replicas together cost less
than it alone. Under an exact model (TorchRec's estimator: a table at its full output all-to-all)
and on request (``spread_every_table``), every table is offered its splits and replicas, as
cost_greedy tries them (docs/decisions.md, 56).
Memory is the model's count where it has its own (TorchRec's storage estimate, buffers included).
Under an exact model a table that fits no device is offered only the options that put a shard on
every device (its row share on each, the room kept for it), where one of them is offered: a split
onto a few devices left the costliest tables room on those alone (criteo_tb_uncapped_1x8: rl 1.43x
cost_greedy, 0.98x with the rule; docs/decisions.md, 78).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from autoshard.core.costing import is_exact
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, TableShard, Topology, Workload, replica
from autoshard.planners.column_split import MIN_SHARD_WIDTH, split_ways
from autoshard.planners.device_state import DeviceState
from autoshard.planners.packing import packable_many
from autoshard.planners.packing_lookahead import PackingLookahead
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_state import SET_SIZE_HEADROOM, unit_cap
from autoshard.planners.placement_unit import Unit, model_costs
from autoshard.planners.sharding_options import (
    ALL_TYPES,
    DP_MEMORY_SHARE,
    ROW_TYPES,
    SPREAD_TYPES,
    placed_kind,
    spread_options,
)

KINDS = (
    ShardingType.TABLE_WISE,
    ShardingType.COLUMN_WISE,
    ShardingType.ROW_WISE,
    ShardingType.TABLE_ROW_WISE,
    ShardingType.GRID_SHARD,
    ShardingType.DATA_PARALLEL,
)
GRID_WAYS = 4
"""Grid options of at most this many column blocks (each over a host): more multiply the options
(one per first host) for tables that spread over that many hosts row-wise at once anyway."""
SPREAD_SHARE = 0.5
"""A table is offered row and column splits when no device can take it whole or its cost alone is
at least this share of the even share (total cost alone / devices)."""

CONTEXT_FEATURES = (
    "progress",
    "remaining_cost",
    "remaining_memory",
    "max_cost",
    "mean_cost",
    "log_devices",
    "log_hosts",
    "unit_cost",
    "unit_memory",
    "log_rows",
    "log_dim",
    "log_pooling",
    "zipf_alpha",
    "fits_whole",
    "column_shard",
)
OPTION_FEATURES = (
    "real",
    *(f"is_{k.value}" for k in KINDS),
    "devices",
    "cost_before",
    "cost_after",
    "over_max",
    "mean_added",
    "memory",
    "free_after",
    "count",
    "rank",
    "host_cost",
    "mean_after",
)
CONTEXT, OPTION = len(CONTEXT_FEATURES), len(OPTION_FEATURES)
FEATURE_GROUPS = {
    "global": CONTEXT_FEATURES[:7],
    "unit": CONTEXT_FEATURES[7:],
    "option_kind": OPTION_FEATURES[1:8],
    "option_cost": ("cost_before", "cost_after", "over_max", "mean_added", "host_cost", "mean_after"),
    "option_fit": ("memory", "free_after", "count", "rank"),
}
"""The observation's feature groups, for the ablations that train without one (``dropped``)."""


def kept_columns(dropped: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """1 for each context and option feature kept, 0 for those of the ``dropped`` groups."""
    gone = {f for group in dropped for f in FEATURE_GROUPS[group]}
    context = np.array([f not in gone for f in CONTEXT_FEATURES], dtype=np.float32)
    option = np.array([f not in gone for f in OPTION_FEATURES], dtype=np.float32)
    return context, option


@dataclass(frozen=True, slots=True)
class Option:
    """A sharding type and its shards, each with its rank (column_wise: rank -1, placed next)."""

    sharding_type: ShardingType
    placements: tuple[tuple[int, Unit], ...]
    host: int | None = None

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(r for r, _ in self.placements)

    @property
    def label(self) -> str:
        kind = self.sharding_type.value
        if self.sharding_type is ShardingType.TABLE_WISE:
            return f"{kind}@{self.placements[0][0]}"
        if self.sharding_type is ShardingType.COLUMN_WISE:
            return f"{kind}x{len(self.placements)}"
        return kind if self.host is None else f"{kind}@host{self.host}"


@dataclass(frozen=True, slots=True)
class Candidates:
    """The current unit's feasible options and one feature row each (``OPTION_FEATURES``)."""

    options: tuple[Option, ...]
    rows: np.ndarray  # [len(options), OPTION]
    after_max: np.ndarray  # each option's highest device cost after it, unscaled
    added: np.ndarray  # each option's added cost, unscaled (an empty device's: ``_added_table_wise``)

    def __len__(self) -> int:
        return len(self.options)

    def first(self, n: int) -> Candidates:
        """The first ``n`` options (an env of ``n`` option rows offers no more)."""
        if len(self.options) <= n:
            return self
        return Candidates(self.options[:n], self.rows[:n], self.after_max[:n], self.added[:n])


class OptionState:
    """A placement in progress over options (see the module docstring). ``cost_model`` prices
    devices (compute, plus communication when wrapped in ``WithCommunication``); loads are its
    predictions for each device's set, floored so that an addition never lowers one, and, once
    the last unit is placed, the sets' predictions themselves. ``limit``: table-wise options on
    at most that many allowed devices, the least loaded (and one empty one); ``None``: all.
    ``max_units``: the extrapolation guard (``unit_cap``) on table-wise placements.
    ``spread_every_table``: under an exact model, every table is offered its splits and replicas
    (not only those worth them)."""

    def __init__(
        self,
        workload: Workload,
        topology: Topology,
        cost_model: CostModel,
        allowed: frozenset[ShardingType] = ALL_TYPES,
        allow_column_split: bool = True,
        rules: PlacementRules | None = None,
        limit: int | None = None,
        headroom: float = SET_SIZE_HEADROOM,
        spread_every_table: bool = False,
    ) -> None:
        self.workload, self.topology, self.cost_model = workload, topology, cost_model
        self.allowed, self.rules, self.limit = allowed, rules if rules else None, limit
        self.allow_column_split = allow_column_split and ShardingType.COLUMN_WISE in allowed
        self.batch = workload.batch_size
        self.cost_fn = model_costs(cost_model, self.batch)
        n = topology.num_devices
        placed = workload.constraints.placed_tables
        tables = workload.tables
        whole = [  # a table whose constraints leave out table_wise: one column_wise block (placed_kind)
            TableShard(t, sharding=placed_kind(workload.constraints.allowed_types(t.name, allowed))) for t in tables
        ]
        # a model that counts each shard's memory its own way (TorchRec's storage estimate: with
        # its input and output buffers) is the one the options must fit, so that no plan needs a retry
        self.shard_bytes = getattr(getattr(cost_model, "compute", cost_model), "shard_bytes", None)
        units = self._units(whole, self.cost_fn([s.as_table for s in whole]), [s.table.name in placed for s in whole])
        self.total_units = len(units)
        self.capacity = np.array(topology.device_memory_bytes_all, dtype=np.int64)
        self.largest_room = int(self.capacity.max())
        self._shard_costs: dict[TableShard, float] = {}
        units = [u if self._fits(u) else self._spread_priced(u) for u in units]
        # a stack, the last next: tables that fit no device first (as cost_greedy spreads them), then the costliest
        self.pending = sorted(units, key=lambda u: (not self._fits(u), u.cost, u.name))
        self.hosts = np.arange(n) // topology.local_world_size
        self.devices = [DeviceState(d, int(cap)) for d, cap in enumerate(self.capacity)]
        self.accumulator = cost_model.accumulator(n, self.batch)
        self.loads, self.free = np.zeros(n), self.capacity.copy()
        self.count = np.zeros(n, dtype=np.int64)
        total = sum(u.cost for u in units)
        self.share = total / n
        self.scale = max(self.share, max((u.cost for u in units if self._fits(u)), default=0.0), 1e-9)
        self.remaining_cost = total
        self.remaining_bytes = sum(u.memory_bytes for u in units)
        self._table_wise_costs: dict[int, float] = {}  # the current unit's, from ``candidates``
        self.max_units = unit_cap(cost_model, len(units), n, headroom)
        self.packing = PackingLookahead((u.memory_bytes for u in units if self._fits(u)), {})
        self.reserve = sum(self._row_share(u) for u in units if not self._fits(u))  # bytes a device keeps for them
        self.placed_steps = 0
        self._placed_parents: set[str] = set()
        self._replicas_pay = self._replicas_that_pay(units)
        # an exact model (TorchRec's estimator) prices a whole table at its full output all-to-all:
        # there a split or replica of any table may lower the max (docs/decisions.md, 56)
        exact = is_exact(getattr(cost_model, "compute", cost_model))
        self.every_option = spread_every_table and exact
        # under TorchRec's estimator a dead end moves a table to UVM caching (``planning.kernels``):
        # there the row shares kept for the tables that fit no device are theirs (docs/decisions.md, 73)
        self.keep_row_shares = exact

    def _units(self, shards: Sequence[TableShard], costs: Sequence[float], fixed: Sequence[bool] = ()) -> list[Unit]:
        """``shards`` as units at ``costs``, their memory as the model counts it where it counts
        its own (``shard_bytes``), else weights and optimizer state."""
        units = [Unit.of(s, c, bool(fixed) and fixed[i]) for i, (s, c) in enumerate(zip(shards, costs))]
        if self.shard_bytes is None or not units:
            return units
        counted = self.shard_bytes([u.table for u in units])
        return [replace(u, memory_bytes=int(b)) for u, b in zip(units, counted.tolist())]

    def _spread_priced(self, unit: Unit) -> Unit:
        """``unit``, a table that fits no device whole, at most at the cost of its cheapest row
        spread (row_wise, table_row_wise or grid_shard, as its constraints allow): its whole price is
        not a cost it can have, and a model that prices memory (TorchRec's estimator: an over-memory
        device at ``OVER_MEMORY_MS``) prices it a million times any table's, which drowned every
        cost feature of such a task (docs/decisions.md, 73)."""
        kinds = self.kinds(unit) & ROW_TYPES
        own = self.workload.constraints.of(unit.parent)
        found = spread_options(unit.shard.table, self.topology, kinds, GRID_WAYS, own.min_partition if own else None)
        spreads = [sum(self._shard_cost([s for _, s in o.placements])) for o in found]
        return replace(unit, cost=min(unit.cost, *spreads)) if spreads else unit

    def _replicas_that_pay(self, units: Sequence[Unit]) -> frozenset[str]:
        """Tables offered data_parallel: within ``DP_MEMORY_SHARE`` of the smallest device, and
        whose replicas together cost less than the table alone (no all-to-all, for an all-reduce)."""
        world = self.topology.world_size
        limit = DP_MEMORY_SHARE * self.topology.smallest_device_memory_bytes
        small = [u for u in units if u.memory_bytes <= limit and ShardingType.DATA_PARALLEL in self.kinds(u)]
        if not small or world < 2:
            return frozenset()
        costs = self.cost_fn([replica(u.shard.table, world).as_table for u in small])
        return frozenset(u.parent for u, c in zip(small, costs) if world * c < u.cost)

    # -- the episode ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not self.pending

    @property
    def current(self) -> Unit:
        return self.pending[-1]

    @property
    def progress(self) -> float:
        return self.placed_steps / max(self.placed_steps + len(self.pending), 1)

    def _fits(self, unit: Unit) -> bool:
        return unit.memory_bytes <= self.largest_room

    def _row_share(self, unit: Unit) -> int:
        """A device's share of ``unit`` row-sharded over every device: what a table that fits no
        device takes of each at least, kept free for it while others are placed."""
        return math.ceil(unit.memory_bytes / len(self.capacity))

    def _usable(self, unit: Unit) -> np.ndarray:
        """Each device's free bytes less the row shares kept for the tables that fit no device
        (other than ``unit``)."""
        kept = self.reserve - (0 if self._fits(unit) else self._row_share(unit))
        return self.free - kept if kept else self.free

    def kinds(self, unit: Unit) -> frozenset[ShardingType]:
        """The sharding types open to ``unit``: a column shard's is table_wise; a table's, its
        constraints' within the planner's."""
        if unit.shard.columns is not None:
            return frozenset({ShardingType.TABLE_WISE})
        return self.workload.constraints.allowed_types(unit.parent, self.allowed)

    # -- the options --------------------------------------------------------------------------
    def candidates(self) -> Candidates:
        """The current unit's feasible options with their features (none: a dead end)."""
        unit, kinds = self.current, self.kinds(self.current)
        rows = np.zeros(0, dtype=np.int64)
        costs = np.zeros(0)
        if (ShardingType.TABLE_WISE in kinds or placed_kind(kinds) is not None) and self._fits(unit):
            rows = self._table_wise_rows(unit)
            if len(rows):
                costs = np.maximum(self.accumulator.costs_if_added(unit.table, rows), self.loads[rows])
        self._table_wise_costs = dict(zip(rows.tolist(), costs.tolist()))
        options = [Option(ShardingType.TABLE_WISE, ((r, unit),)) for r in rows.tolist()]
        others: list[Option] = []
        before: list[np.ndarray] = []  # each other option's touched devices
        after: list[np.ndarray] = []  # their costs after it
        packs: list[bool] = []  # whether the rest still packs after it
        if unit.shard.columns is None and not (self.rules is not None and self._grouped(unit.parent)):
            worth = self.every_option or not options or not self._fits(unit) or unit.cost >= SPREAD_SHARE * self.share
            if worth and ShardingType.COLUMN_WISE in kinds and self.allow_column_split:
                self._column_options(unit, others, before, after, packs)
            self._spread_options(unit, kinds, worth, others, before, after, packs)
            kept = list(range(len(others)))
            if any(packs) and not all(packs):  # the lookahead, where it leaves a choice
                kept = [i for i, ok in enumerate(packs) if ok]
            if self.keep_row_shares and not self._fits(unit):  # then its row share on every device, where it can
                kept = [i for i in kept if self._spans_every_device(others[i])] or kept
            if len(kept) < len(others):
                others, before, after = [others[i] for i in kept], [before[i] for i in kept], [after[i] for i in kept]
        return self._featured(unit, options, rows, costs, others, before, after)

    def _spans_every_device(self, option: Option) -> bool:
        """Whether ``option`` puts a shard on every device (column_wise: in as many ways)."""
        if option.sharding_type is ShardingType.COLUMN_WISE:
            return len(option.placements) == len(self.free)
        return len(set(option.ranks)) == len(self.free)

    def _grouped(self, table: str) -> bool:
        assert self.rules is not None
        return table in self.rules.together or table in self.rules.apart

    def _open(self, unit: Unit) -> np.ndarray:
        """Devices with room for ``unit``, no other shard of its table, and its constraints."""
        ok = self.free >= unit.memory_bytes
        if unit.parent in self._placed_parents:
            for d in np.flatnonzero(ok):
                if unit.parent in self.devices[d].parents:
                    ok[d] = False
        if self.rules is not None and unit.parent in self.rules.tables:
            ok &= self.rules.mask(unit.parent, self.devices)
        return ok

    def _table_wise_rows(self, unit: Unit) -> np.ndarray:
        """The devices offered for ``unit`` table-wise: open ones, under the guard where it leaves
        a choice, and (where it leaves one) those after which the rest still pack; with ``limit``,
        the least loaded of them and the first empty one."""
        ok = self._open(unit)
        if self.reserve:  # where it leaves one, room beside the row shares of the tables that fit no device
            kept = ok & (self._usable(unit) >= unit.memory_bytes)
            ok = kept if kept.any() else ok
        if self.max_units is not None and ok.sum() > 1:
            capped = ok & (self.count < self.max_units)
            ok = capped if capped.any() else ok
        rows = np.flatnonzero(ok)
        if self.limit is not None and len(rows) > self.limit:
            empty, loaded = rows[self.count[rows] == 0], rows[self.count[rows] > 0]
            loaded = loaded[np.argsort(self.loads[loaded], kind="stable")]
            rows = np.concatenate([empty[:1], loaded])
            checked = self._packing_ok(unit, rows[: 2 * self.limit])
            rows = checked[: self.limit] if len(checked) else self._packing_ok(unit, rows)[: self.limit]
            return np.sort(rows) if len(rows) else np.flatnonzero(ok)[: self.limit]
        passing = self._packing_ok(unit, rows)
        return passing if len(passing) else rows

    def _packing_ok(self, unit: Unit, rows: np.ndarray) -> np.ndarray:
        usable = self._usable(unit)
        if len(rows) < 2 or self.packing.packs_anywhere(usable, unit.memory_bytes):
            return rows
        return rows[self.packing.fits_after(usable, usable[rows], unit.memory_bytes)]

    def _shard_cost(self, shards: Sequence[TableShard]) -> list[float]:
        """Each shard's cost alone (one batched call for those not priced yet)."""
        new = [s for s in dict.fromkeys(shards) if s not in self._shard_costs]
        if new:
            self._shard_costs.update(zip(new, self.cost_fn([s.as_table for s in new])))
        return [self._shard_costs[s] for s in shards]

    def _column_options(self, unit: Unit, options: list, before: list, after: list, packs: list) -> None:
        table = unit.shard.table  # the workload's table (a whole unit's may be one column block)
        narrowest = self.workload.constraints.of(unit.parent)
        width_floor = MIN_SHARD_WIDTH
        if narrowest is not None and narrowest.min_partition is not None:
            width_floor = max(width_floor, narrowest.min_partition)
        ways = [
            k
            for k in split_ways(table.embedding_dim, self.topology.num_devices)
            if table.embedding_dim // k >= width_floor
        ]
        for k in ways:
            width = table.embedding_dim // k
            shards = [TableShard(table, j * width, width) for j in range(k)]
            cost = self._shard_cost(shards[:1])[0]
            units = self._units(shards, [cost] * k)
            ok = self._open(units[0])
            rows = np.flatnonzero(ok)
            if len(rows) < k:
                continue
            roomiest = rows[np.argsort(-self.free[rows], kind="stable")[:k]]
            need = np.zeros(len(self.free), dtype=np.int64)
            need[roomiest] = units[0].memory_bytes
            packs.append(self._spread_packs(unit, need))  # on the roomiest devices: the rest still packs
            rows = rows[np.argsort(self.loads[rows], kind="stable")[:k]]  # where they would go, to price it
            options.append(Option(ShardingType.COLUMN_WISE, tuple((-1, u) for u in units)))
            before.append(rows)
            after.append(self.loads[rows] + cost)

    def _spread_options(
        self,
        unit: Unit,
        kinds: frozenset[ShardingType],
        worth: bool,
        options: list,
        before: list,
        after: list,
        packs: list,
    ) -> None:
        spread = kinds & SPREAD_TYPES
        if not worth:
            spread = spread & {ShardingType.DATA_PARALLEL}
        if not self.every_option and unit.parent not in self._replicas_pay and (kinds - {ShardingType.DATA_PARALLEL}):
            spread = spread - {ShardingType.DATA_PARALLEL}
        if not spread:
            return
        own = self.workload.constraints.of(unit.parent)
        found = spread_options(unit.shard.table, self.topology, spread, GRID_WAYS, own.min_partition if own else None)
        if self.rules is not None:
            found = [o for o in found if self.rules.ranks_allowed(unit.parent, o.ranks)]
        # the options of one type share their shard objects across hosts (``row_shards`` is cached):
        # told apart by identity, each priced once
        by_id = {id(s): s for o in found for _, s in o.placements}
        distinct = list(by_id.values())
        unit_of = dict(zip(by_id, self._units(distinct, self._shard_cost(distinct))))
        for option in found:
            ranks = np.array(option.ranks)
            units = [unit_of[id(s)] for _, s in option.placements]
            need = np.zeros(len(self.free), dtype=np.int64)
            np.add.at(need, ranks, [u.memory_bytes for u in units])
            if (need > self.free).any():
                continue
            packs.append(self._spread_packs(unit, need))
            added = np.zeros(len(self.free))
            np.add.at(added, ranks, [u.cost for u in units])
            touched = np.unique(ranks)
            options.append(Option(option.sharding_type, tuple(zip(option.ranks, units)), option.host))
            before.append(touched)
            after.append(self.loads[touched] + added[touched])

    def _spread_packs(self, unit: Unit, need: np.ndarray) -> bool:
        """Whether the units after ``unit`` still pack once its shards take ``need`` bytes (and,
        with ``keep_row_shares``, the row shares kept for the tables that fit no device are left them)."""
        usable = self._usable(unit)
        if self.keep_row_shares and self.reserve and (need > usable).any():
            return False
        left = np.maximum(usable - need, 0)
        if self.packing.packs_anywhere(left, 0):  # room beyond the largest covers them all
            return True
        rest = self.packing.sizes_after(unit.memory_bytes)  # a table that fits no device is not among them
        if not rest:
            return True
        return bool(packable_many(rest, left[None, :])[0])

    def _featured(
        self,
        unit: Unit,
        placed: list[Option],
        rows: np.ndarray,
        costs: np.ndarray,
        others: list[Option],
        before: list[np.ndarray],
        after: list[np.ndarray],
    ) -> Candidates:
        """The options' feature rows: table-wise ones (on devices ``rows``, costs after
        ``costs``) at once, then the others (each on its devices ``before``, costs ``after``)."""
        n, scale = len(self.loads), self.scale
        options = (*placed, *others)
        features = np.zeros((len(options), OPTION), dtype=np.float32)
        after_max, added_all = np.zeros(len(options)), np.zeros(len(options))
        if not options:
            return Candidates((), features, after_max, added_all)
        current_max = float(self.loads.max())
        ranks = np.empty(n)
        ranks[np.argsort(self.loads, kind="stable")] = np.arange(n) / max(n - 1, 1)
        host_mean = np.bincount(self.hosts, self.loads) / np.bincount(self.hosts)
        even = max(self.total_units / n, 1e-9)
        free_total = max(float(self.free.sum()), 1.0)
        k = len(placed)
        if k:
            loads = self.loads[rows]
            adds = self._added_table_wise(rows, costs - loads)
            block = features[:k]
            block[:, 0], block[:, 1] = 1.0, 1.0  # real; table_wise
            block[:, 7] = 1 / n
            block[:, 8] = loads / scale
            block[:, 9] = costs / scale
            block[:, 10] = (costs - current_max) / scale
            block[:, 11] = adds / (n * scale)
            block[:, 12] = unit.memory_bytes / free_total
            block[:, 13] = (self.free[rows] - unit.memory_bytes) / self.capacity[rows]
            block[:, 14] = self.count[rows] / even
            block[:, 15] = ranks[rows]
            block[:, 16] = host_mean[self.hosts[rows]] / scale
            block[:, 17] = costs / scale
            after_max[:k], added_all[:k] = costs, adds
        for i, (option, touched, cost) in enumerate(zip(others, before, after), start=k):
            loads = self.loads[touched]
            added = float((cost - loads).sum())
            memory = sum(u.memory_bytes for _, u in option.placements)
            if option.sharding_type is ShardingType.COLUMN_WISE:
                per = np.full(len(touched), option.placements[0][1].memory_bytes)
            else:
                per = np.zeros(n, dtype=np.int64)
                np.add.at(per, list(option.ranks), [u.memory_bytes for _, u in option.placements])
                per = per[touched]
            row = features[i]
            row[0] = 1.0
            row[1 + KINDS.index(option.sharding_type)] = 1.0
            row[7] = len(touched) / n
            row[8] = loads.max() / scale
            row[9] = cost.max() / scale
            row[10] = (cost.max() - current_max) / scale
            row[11] = added / (n * scale)
            row[12] = memory / free_total
            row[13] = float(np.min((self.free[touched] - per) / self.capacity[touched]))
            row[14] = float(self.count[touched].sum()) / len(touched) / even
            row[15] = float(ranks[touched].sum()) / len(touched)
            row[16] = float(host_mean[self.hosts[touched]].sum()) / len(touched) / scale
            row[17] = float(cost.sum()) / len(cost) / scale
            after_max[i], added_all[i] = float(cost.max()), added
        return Candidates(options, features, after_max, added_all)

    def _added_table_wise(self, rows: np.ndarray, added: np.ndarray) -> np.ndarray:
        """What placing the unit table-wise on each device of ``rows`` adds, where an empty
        device counts as the cheapest loaded one while at least as many units are left as
        devices are empty: every device is opened by the end anyway, so its fixed cost (a set's
        cost over the sum of its tables' marginal costs) is no reason to pile tables onto loaded
        devices (criteo_kaggle: the teacher's plan 1.275x cost_greedy's predicted max with it
        counted, 0.999x without; docs/decisions.md, 41)."""
        empty = self.count == 0
        opens = empty[rows]
        if len(self.pending) < empty.sum() or opens.all() or not opens.any():
            return added
        return np.where(opens, added[~opens].min(), added)

    def context(self) -> np.ndarray:
        """The global features and the current unit's (``CONTEXT_FEATURES``)."""
        unit, n, scale = self.current, len(self.loads), self.scale
        table = unit.table
        return np.array(
            [
                self.progress,
                self.remaining_cost / (scale * n),
                self.remaining_bytes / max(float(self.free.sum()), 1.0),
                self.loads.max() / scale,
                self.loads.mean() / scale,
                math.log2(n) / 7.0,
                math.log2(self.topology.num_hosts + 1) / 4.0,
                unit.cost / scale,
                unit.memory_bytes / self.largest_room,
                math.log10(table.num_embeddings) / 8.0,
                math.log2(table.embedding_dim) / 8.0,
                math.log10(max(table.pooling_factor, 1e-3)) / 3.0,
                table.zipf_alpha,
                float(self._fits(unit)),
                float(unit.shard.columns is not None),
            ],
            dtype=np.float32,
        )

    # -- taking an option ---------------------------------------------------------------------
    def apply(self, option: Option) -> None:
        """Take ``option`` for the current unit (it must be one of ``candidates``)."""
        unit, known = self.pending.pop(), self._table_wise_costs
        self._table_wise_costs = {}
        self.packing.answers = {}  # a step's packing answers hold for its free rooms only
        if not self._fits(unit):
            self.reserve -= self._row_share(unit)
        self.remaining_cost -= unit.cost
        self.remaining_bytes -= unit.memory_bytes
        self.placed_steps += 1
        fits = self._fits(unit)
        if option.sharding_type is ShardingType.COLUMN_WISE:
            shards = [u for _, u in option.placements]
            if fits:
                self.packing.placed(unit.memory_bytes, {})
            self.packing.add(u.memory_bytes for u in shards)
            self.pending.extend(reversed(shards))
            self.remaining_cost += sum(u.cost for u in shards)
            self.remaining_bytes += sum(u.memory_bytes for u in shards)
            self.total_units += len(shards) - 1
            return
        if fits:
            self.packing.placed(unit.memory_bytes, {})
        if option.sharding_type is ShardingType.TABLE_WISE:
            ((rank, placed),) = option.placements
            load = known.get(rank)
            if load is None:  # not priced by ``candidates``
                load = max(float(self.accumulator.costs_if_added(placed.table, np.array([rank]))[0]), self.loads[rank])
            self._put(rank, placed, load)
        else:
            for rank, shard in option.placements:
                self._put(rank, shard, self.loads[rank])
            self.total_units += len(option.placements) - 1
            touched = np.unique(option.ranks)
            self.loads[touched] = np.maximum(self.accumulator.costs()[touched], self.loads[touched])
            for d in touched.tolist():
                self.devices[d].load = float(self.loads[d])
        if self.done:  # the finished plan's loads are its sets' predictions
            self.loads[:] = np.where(self.count > 0, self.accumulator.costs(), 0.0)
            for state, load in zip(self.devices, self.loads.tolist()):
                state.load = load

    def _put(self, rank: int, unit: Unit, load: float) -> None:
        self.accumulator.add(rank, unit.table)
        self.devices[rank].add(unit, load)
        self._placed_parents.add(unit.parent)
        self.free[rank] -= unit.memory_bytes
        self.count[rank] += 1
        self.loads[rank] = load


TIE = 0.01
"""The teacher counts options within this share of the task's scale as equally good."""


def expert_choice(state: OptionState, found: Candidates, among: np.ndarray | None = None) -> int:
    """The warm start's teacher, a greedy rule over options: the option whose step leaves the
    lowest of (the new max, the mean device cost it implies once every unit is placed), to within
    ``TIE`` of the scale; among those, the lowest cost on the devices it touches (for table-wise
    options, greedy placement's cheapest-after). Finer ties followed noise in the added cost:
    1.026x cost_greedy's predicted max against 1.010x at 1% (16 held-out tasks, docs/decisions.md, 40).
    ``among``: the indices of the options to choose from (default: all)."""
    index = np.arange(len(found)) if among is None else np.asarray(among)
    n = len(state.loads)
    current_max = float(state.loads.max())
    base = (float(state.loads.sum()) + state.remaining_cost - state.current.cost) / n
    after = found.after_max[index]
    bound = np.maximum(np.maximum(after, current_max), base + found.added[index] / n)
    return int(index[np.lexsort((after, np.round(bound / (TIE * state.scale))))[0]])


__all__ = ["CONTEXT", "KINDS", "OPTION", "Candidates", "Option", "OptionState", "expert_choice"]
