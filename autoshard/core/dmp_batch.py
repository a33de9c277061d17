"""The batch each shard serves, as TorchRec's DMP runs it: the one place the project's batch
convention turns into a cost model's batch.

A workload's ``batch_size`` is TorchRec's: samples per rank per iteration (B), on W ranks. Under
DMP a table-, column-, row-wise, table-row-wise or grid shard serves every rank's samples, B x W
bags (a row block restricted to its rows: its ``as_table`` carries its share of the ids), while a
data-parallel replica serves its own rank's B bags at the table's full pooling factor, in a kernel
of its own (TorchRec groups lookups by sharding type; a replica's is the dense kernel, with its own
optimizer step). A learned cost model prices a set of tables at one batch, the bags each of them
serves. ``DmpBatch`` asks it so: a rank's sharded shards as one set at B x W, its replicas as
another at B, the two costs summed. Callers keep passing the workload's per-rank B.

A replica's ``as_table`` keeps its 1 / W share of the lookups in its pooling factor (what the
heuristics' proxies compare against a table-wise shard's); ``as_run`` gives it back its full
pooling factor for the model.

``bound_to_task`` (``autoshard.core.costing``) wraps every learned model planners use in it;
``WithCommunication`` wraps its compute model in it too, and prices the collectives at the same
bags (``autoshard.core.communication``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from autoshard.core.costing import Accumulator, EditBatch, Edits, SetCostModel, predict_nonempty
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, Table, Workload


def is_replica(table: Table) -> bool:
    return table.sharding_type is ShardingType.DATA_PARALLEL


def bags_served(table: Table, batch_size: int, world_size: int) -> int:
    """Bags ``table`` (a shard's ``as_table``) serves an iteration at ``batch_size`` samples per
    rank on ``world_size`` ranks: a replica its own rank's, any other shard every rank's."""
    return batch_size if is_replica(table) else batch_size * world_size


@lru_cache(maxsize=1 << 14)
def as_run(table: Table, world_size: int) -> Table:
    """``table`` as its rank runs it: a replica (its ``as_table``: 1 / W of the lookups) at its
    full pooling factor; any other shard as it is."""
    if not is_replica(table) or world_size == 1:
        return table
    return replace(table, pooling_factor=table.pooling_factor * world_size)


class DmpBatch(SetCostModel):
    """``compute`` (priced at the bags each table serves) asked as DMP runs a rank of
    ``world_size``: sharded shards at B x W, replicas apart at B (see the module docstring)."""

    def __init__(self, compute: CostModel, world_size: int) -> None:
        self.compute, self.world_size = compute, world_size
        self.max_set_size = compute.max_set_size
        self.dmp_world_size = world_size
        ranges = getattr(compute, "ranges", None)
        self.max_bags: int | None = None if ranges is None else int(ranges.batch_size[1])

    def asked(self, bags: int) -> tuple[int, float]:
        """The batch to ask the compute model at for ``bags``, and the factor on its answer:
        beyond the largest batch it was trained on, its cost there scaled linearly in the bags
        (a lookup's time no longer falls with the batch; the network's own extrapolation in
        log-batch features flattens, to 0.5-0.9 of linear at 16x the trained max)."""
        if self.max_bags is None or bags <= self.max_bags:
            return bags, 1.0
        return self.max_bags, bags / self.max_bags

    def split(self, tables: Sequence[Table]) -> tuple[list[Table], list[Table]]:
        """``tables`` as (sharded shards, replicas as run)."""
        sharded = [t for t in tables if not is_replica(t)]
        return sharded, [as_run(t, self.world_size) for t in tables if is_replica(t)]

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        """The compute model's warnings, and where a sharded shard's bags (every rank's samples)
        pass the largest trained batch."""
        said = self.compute.check_workload(workload, max_tables_per_device)
        bags = workload.batch_size * self.world_size
        if self.max_bags is not None and bags > self.max_bags:
            said += (
                f"a sharded shard serves every rank's samples, {workload.batch_size} x {self.world_size} = "
                f"{bags} bags, {bags / self.max_bags:.3g}x the largest trained batch {self.max_bags}: "
                "priced linearly in the bags from there",
            )
        return said

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        wide, scale = self.asked(batch_size * self.world_size)
        if not any(is_replica(t) for s in table_sets for t in s):
            return [c * scale for c in self.compute.predict_many(table_sets, wide)]
        parts = [self.split(s) for s in table_sets]
        own, own_scale = self.asked(batch_size)
        sharded = predict_nonempty(self.compute, [p[0] for p in parts], wide)
        replicas = predict_nonempty(self.compute, [p[1] for p in parts], own)
        return [a * scale + b * own_scale for a, b in zip(sharded, replicas)]

    def accumulator(self, num_sets: int, batch_size: int) -> _DmpAccumulator:
        return _DmpAccumulator(self, num_sets, batch_size)

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]:
        return self.edit_scorer(base_sets, batch_size).predict(edits).tolist()

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int) -> _DmpEdits:
        return _DmpEdits(self, base_sets, batch_size)


class _DmpAccumulator:
    """Two accumulators of the compute model: sharded shards at B x W, replicas at B (made when
    the first replica is asked about)."""

    def __init__(self, model: DmpBatch, num_sets: int, batch_size: int) -> None:
        self.model, self.num_sets = model, num_sets
        wide, self.scale = model.asked(batch_size * model.world_size)
        self.own, self.own_scale = model.asked(batch_size)
        self.sharded = model.compute.accumulator(num_sets, wide)
        self.replicas: Accumulator | None = None
        self._sharded_costs: np.ndarray | None = None
        self._replicas_costs: np.ndarray | None = None

    def _replicas(self) -> Accumulator:
        if self.replicas is None:
            self.replicas = self.model.compute.accumulator(self.num_sets, self.own)
        return self.replicas

    def _sharded(self) -> np.ndarray:
        if self._sharded_costs is None:  # kept until a sharded shard is added: asked once per replica
            self._sharded_costs = np.asarray(self.sharded.costs(), dtype=np.float64) * self.scale
        return self._sharded_costs

    def _replica_costs(self) -> np.ndarray | float:
        if self.replicas is None:
            return 0.0
        if self._replicas_costs is None:  # kept until a replica is added: asked once per shard
            self._replicas_costs = np.asarray(self.replicas.costs(), dtype=np.float64) * self.own_scale
        return self._replicas_costs

    def costs(self) -> np.ndarray:
        return self._sharded() + self._replica_costs()

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        at = slice(None) if rows is None else rows
        if is_replica(table):
            added = self._replicas().costs_if_added(as_run(table, self.model.world_size), rows)
            return self._sharded()[at] + np.asarray(added, dtype=np.float64) * self.own_scale
        costs = np.asarray(self.sharded.costs_if_added(table, rows), dtype=np.float64) * self.scale
        replicas = self._replica_costs()
        return costs + (replicas[at] if isinstance(replicas, np.ndarray) else replicas)

    def add(self, set_index: int, table: Table) -> None:
        if is_replica(table):
            self._replicas().add(set_index, as_run(table, self.model.world_size))
            self._replicas_costs = None
        else:
            self.sharded.add(set_index, table)
            self._sharded_costs = None


class _DmpEdits:
    """Edits of base sets, each priced as its sharded part's edit plus its replicas' edit. Every
    edit goes to the sharded part's scorer (most sets hold no replica); only the edits that touch
    a replica go to the replicas' scorer, the others take their base set's replicas' cost."""

    def __init__(self, model: DmpBatch, base_sets: Sequence[Sequence[Table]], batch_size: int) -> None:
        self.model = model
        wide, self.scale = model.asked(batch_size * model.world_size)
        self.own, self.own_scale = model.asked(batch_size)
        flags = [np.array([is_replica(t) for t in s], dtype=bool) for s in base_sets]
        self.any_replica = any(f.any() for f in flags)
        parts = [model.split(s) for s in base_sets] if self.any_replica else []
        sharded_sets = [p[0] for p in parts] if self.any_replica else base_sets
        self.sharded = model.compute.edit_scorer(sharded_sets, wide)
        sizes = np.array([len(s) for s in base_sets], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.flat_replica = np.concatenate(flags) if flags else np.zeros(0, dtype=bool)
        # each position's index within its part (the sharded shards' or the replicas' sub-set)
        within = [np.where(f, np.cumsum(f) - 1, np.cumsum(~f) - 1) for f in flags]
        self.flat_within = np.concatenate(within).astype(np.int64) if within else np.zeros(0, dtype=np.int64)
        if self.any_replica:
            replica_sets = [p[1] for p in parts]
            self.replicas = model.compute.edit_scorer(replica_sets, self.own)
            unchanged = np.full(len(base_sets), -1, dtype=np.int64)
            base = EditBatch(np.arange(len(base_sets), dtype=np.int64), unchanged, unchanged, ())
            self.replica_base = np.asarray(self.replicas.predict(base), dtype=np.float64)

    def predict(self, edits: Edits) -> np.ndarray:
        batch = EditBatch.of(edits)
        if not len(batch):
            return np.zeros(0)
        added_replica = np.array([is_replica(t) for t in batch.added] + [False], dtype=bool)
        add_replica = added_replica[batch.add]  # index -1 (none) reads the trailing False
        if not self.any_replica and not add_replica.any():
            return np.asarray(self.sharded.predict(batch), dtype=np.float64) * self.scale
        removes = batch.removed >= 0
        if len(self.flat_replica):
            at = np.minimum(self.offsets[batch.base] + np.maximum(batch.removed, 0), len(self.flat_replica) - 1)
            remove_replica, within = removes & self.flat_replica[at], self.flat_within[at]
        else:
            remove_replica, within = np.zeros(len(batch), dtype=bool), batch.removed
        own_added, own_add = _part_of(batch, ~added_replica[:-1])  # each part sees only its tables, so
        # that a scorer finds an added table among its base sets' (a move's, a swap's) and reuses it
        sharded = EditBatch(batch.base, np.where(removes & ~remove_replica, within, -1), own_add, own_added)
        cost = np.asarray(self.sharded.predict(sharded), dtype=np.float64) * self.scale
        return cost + self._replicas_ms(batch, remove_replica, add_replica, within) * self.own_scale

    def _replicas_ms(
        self, batch: EditBatch, remove_replica: np.ndarray, add_replica: np.ndarray, within: np.ndarray
    ) -> np.ndarray:
        """Each edited set's replicas, at the rank's own batch (as the compute model is asked)."""
        world = self.model.world_size
        replicas, add = _part_of(batch, np.array([is_replica(t) for t in batch.added], dtype=bool))
        added = tuple(as_run(t, world) for t in replicas)
        if not self.any_replica:  # a replica added to a set of none: it alone
            alone = np.array([*predict_nonempty(self.model.compute, [[t] for t in added], self.own), 0.0])
            return alone[add]  # index -1 (none) reads the trailing 0
        cost = self.replica_base[batch.base].copy()
        touched = np.flatnonzero(remove_replica | add_replica)
        if len(touched):
            removed = np.where(remove_replica[touched], within[touched], -1)
            cost[touched] = self.replicas.predict(EditBatch(batch.base[touched], removed, add[touched], added))
        return cost


def _part_of(batch: EditBatch, keep: np.ndarray) -> tuple[tuple[Table, ...], np.ndarray]:
    """The added tables ``keep`` marks, and each edit's index into them (-1: it adds none of them)."""
    index = np.full(len(batch.added) + 1, -1, dtype=np.int64)  # the last entry: an edit adding none
    index[np.flatnonzero(keep)] = np.arange(int(keep.sum()))
    return tuple(t for t, k in zip(batch.added, keep) if k), index[batch.add]


_BOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def at_dmp_batch(cost_model: CostModel, world_size: int) -> CostModel:
    """``cost_model`` asked as DMP runs a rank of ``world_size`` (``DmpBatch``); a model that
    already prices the per-rank batch itself is returned as it is: one bound to its task
    (TorchRec's estimator counts ``batch x world_size`` on its own), one that says its
    ``dmp_world_size`` (a ``DmpBatch``, a ``WithCommunication``) or one that prices no batch
    (``batch_free``: a proxy). The wrapper of a model is made
    once per world size, so that what planners cache by model is found again."""
    if getattr(cost_model, "for_task", None) is not None:
        return cost_model
    if getattr(cost_model, "dmp_world_size", None) is not None or getattr(cost_model, "batch_free", False):
        return cost_model
    try:
        made = _BOUND.setdefault(cost_model, {})
    except TypeError:  # a model that cannot be weakly referenced or hashed: a new wrapper
        return DmpBatch(cost_model, world_size)
    return made.setdefault(world_size, DmpBatch(cost_model, world_size))


__all__ = ["DmpBatch", "as_run", "at_dmp_batch", "bags_served", "is_replica"]
