"""A plan's stats (``plan_stats``): per rank, per table, and where its max comes from; typed,
with ``to_dict()`` as its JSON (`autoshard plan --stats --json`, ``POST /v1/plans`` with
``"stats": true``). No I/O: ``autoshard.cli.stats_view`` prints it.

The layout follows TorchRec 1.8.0's ``EmbeddingStats`` (``torchrec.distributed.planner.stats``)
where it serves: a row per rank (memory and its share of the device, perf, input, output, shards
by sharding type), a row per table (sharding type, ranks, perf, memory, pooling factor), the
imbalance statistics, the max rank against the mean, the critical path, the peak memory pressure
and the tables behind the max. Where ours differs:

- **Perf is the learned model's prediction** of a device's whole set (``cost_ms``: compute from
  the cost model, plus the all-to-all from the communication model), not a sum of per-shard
  estimates; beside the max, the plan's **expected max** under the model's measured error
  (``DeviceErrors.expected_max``, the plan's ``expected_max_ms``; None without it).
- **No forward/backward split.** The cost model is trained on whole iterations (forward,
  backward and the fused optimizer update together), so a rank has ``compute_ms`` and
  ``communication_ms``, not TorchRec's five-part ``Perf`` (forward/backward x compute/comms,
  prefetch).
- **A table's perf is its shards' costs alone** (each shard priced as the only table on a
  device, all in one batched call), summed over its shards. Costs do not add: a device's set
  costs more or less than the sum of its shards alone (docs/concepts.md, "The cost model"), so a
  table's perf ranks tables, it does not split a rank's cost.
- **The critical path** is the max rank's compute plus its own communication (= the plan's max
  cost): each rank runs its shards, then its all-to-all, and ranks wait for the slowest at the
  end of the iteration; that is what the planners minimise. TorchRec's critical path adds, per
  phase (forward/backward x compute/comms, and per module and sharding type for comms), the max
  over ranks, assuming a synchronisation after each phase; our nearest figure is
  ``sum_of_maxima_ms`` (the max compute over ranks plus the max communication over ranks, what
  the iteration would take if the all-to-all waited for every rank's compute).
- **Imbalance**: max / mean - 1 (what the planners minimise), and of TorchRec's measures the two
  that read without its tooling: the total variation (max |p_i - 1/k| of the normalised
  distribution over k ranks) and the KL divergence from even, divided by its maximum log k (0
  balanced, 1 everything on one rank). TorchRec's total distance and chi-square divergence add
  nothing these two do not say. Each for cost and for memory; no DDR or reserved memory: a
  device's memory here is its embedding memory (weights + optimizer state).

Formulas, with B the workload's batch size (samples per rank per iteration, TorchRec's), W ranks:
a sharded shard serves every rank's samples, B x W bags; a replica its own B
(``autoshard.core.dmp_batch``).

- ``input_bytes`` of a rank: its shards' ids, B x W x pooling factor x lookup share x 8 bytes
  (int64) each: a row block serves its share s_j of the lookups, a data-parallel replica its
  device's B samples (share 1 / W), a table- or column-wise shard all of them.
- ``output_bytes`` of a rank: its shards' pooled outputs, B x W x width x 4 bytes (fp32) each (a
  row block's are partial sums of every sample); a data-parallel replica pools its device's B
  samples only, B x width x 4.
- ``memory_share``: its shards' memory (weights + optimizer state) / its device's cap
  (``Topology.device_memory_bytes_of``).
- A shard's ``communication_ms``: what its bytes add to its rank's all-to-all (its output or
  reduce-scatter per link tier, a replica's all-reduce; ``CommunicationModel.cost_ms`` of it
  alone, less the 2 x latency that a rank pays once for all its shards): a rank's communication
  is 2 x latency plus its shards'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.core.communication import CommunicationModel
from autoshard.core.costing import predict_nonempty
from autoshard.core.dmp_batch import at_dmp_batch
from autoshard.core.model_error import DeviceErrors
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, ShardingPlan, Table, TableShard, Topology, Workload

ID_BYTES = 8
"""An id is an int64 (TorchRec's ``BIGINT_DTYPE``)."""
OUTPUT_BYTES = 4
"""A pooled output value is fp32 (as the all-to-all model prices it)."""
NEAREST_CAPS = 3
"""How many ranks ``nearest_memory_cap`` lists (TorchRec lists 5 tiers of peak HBM pressure)."""

ABBREVIATIONS = {
    ShardingType.DATA_PARALLEL: "DP",
    ShardingType.TABLE_WISE: "TW",
    ShardingType.COLUMN_WISE: "CW",
    ShardingType.ROW_WISE: "RW",
    ShardingType.TABLE_ROW_WISE: "TWRW",
    ShardingType.TABLE_COLUMN_WISE: "TWCW",
    ShardingType.GRID_SHARD: "GS",
}
"""TorchRec's abbreviations of the sharding types (``_get_sharding_type_abbr``)."""
_ORDER = {kind.value: i for i, kind in enumerate(ShardingType)}


@dataclass(frozen=True, slots=True)
class RankStats:
    """One rank: its host, cost (``compute_ms`` + ``communication_ms``), memory against its
    device's cap, the ids in and pooled outputs of its shards (bytes an iteration; the module's
    formulas), and its shards by sharding type (TorchRec's names, in ``ShardingType`` order)."""

    rank: int
    host: int
    cost_ms: float
    compute_ms: float
    communication_ms: float
    memory_bytes: int
    memory_cap_bytes: int
    input_bytes: float
    output_bytes: float
    shards: tuple[tuple[str, int], ...]

    @property
    def memory_share(self) -> float:
        return self.memory_bytes / self.memory_cap_bytes if self.memory_cap_bytes > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "cost_ms": self.cost_ms,
            "compute_ms": self.compute_ms,
            "communication_ms": self.communication_ms,
            "memory_bytes": self.memory_bytes,
            "memory_cap_bytes": self.memory_cap_bytes,
            "memory_share": self.memory_share,
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "shards": dict(self.shards),
        }


@dataclass(frozen=True, slots=True)
class TableStats:
    """One table: its sharding type, the ranks of its shards (ascending), its perf (its shards'
    costs alone, summed: ``compute_alone_ms`` from the cost model, ``communication_ms`` what they
    add to their ranks' all-to-alls), its memory on every rank together, and its pooling factor."""

    table: str
    sharding_type: str
    ranks: tuple[int, ...]
    shards: int
    compute_alone_ms: float
    communication_ms: float
    memory_bytes: int
    pooling_factor: float

    @property
    def cost_alone_ms(self) -> float:
        return self.compute_alone_ms + self.communication_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "sharding_type": self.sharding_type,
            "ranks": list(self.ranks),
            "shards": self.shards,
            "cost_alone_ms": self.cost_alone_ms,
            "compute_alone_ms": self.compute_alone_ms,
            "communication_ms": self.communication_ms,
            "memory_bytes": self.memory_bytes,
            "pooling_factor": self.pooling_factor,
        }


@dataclass(frozen=True, slots=True)
class Imbalance:
    """How unevenly a quantity spreads over the ranks: ``max_over_mean`` (max / mean - 1, what the
    planners minimise for cost), and TorchRec's ``total_variation`` and normalised
    ``kl_divergence`` of its distribution over the ranks (0 even; at most 1)."""

    max_over_mean: float
    total_variation: float
    kl_divergence: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Imbalance:
        """0, 0, 0 for no ranks or a total of 0."""
        total, k = float(sum(values)), len(values)
        if k == 0 or total <= 0:
            return cls(0.0, 0.0, 0.0)
        p = [v / total for v in values]
        kl = sum(pi * math.log(k * pi) for pi in p if pi > 0)
        return cls(
            max(values) / (total / k) - 1.0,
            max(abs(pi - 1.0 / k) for pi in p),
            kl / math.log(k) if k > 1 else 0.0,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_over_mean": self.max_over_mean,
            "total_variation": self.total_variation,
            "kl_divergence": self.kl_divergence,
        }


@dataclass(frozen=True, slots=True)
class MemoryPressure:
    """A rank near its memory cap: its memory, its cap and the share used."""

    rank: int
    host: int
    memory_bytes: int
    memory_cap_bytes: int
    memory_share: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "memory_bytes": self.memory_bytes,
            "memory_cap_bytes": self.memory_cap_bytes,
            "memory_share": self.memory_share,
        }


@dataclass(frozen=True, slots=True)
class MaxRankShard:
    """A shard of the max rank (``label``: ``TableShard.label``), its cost alone (compute alone
    plus what it adds to the rank's all-to-all) and that cost's share of the rank's cost (shares
    need not sum to 1: costs do not add)."""

    shard: str
    table: str
    sharding_type: str
    cost_alone_ms: float
    share_of_rank: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "table": self.table,
            "sharding_type": self.sharding_type,
            "cost_alone_ms": self.cost_alone_ms,
            "share_of_rank": self.share_of_rank,
        }


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """The max rank's compute plus its communication (= the plan's max cost; see the module
    docstring), and ``sum_of_maxima_ms``: the max compute over ranks plus the max communication
    over ranks (TorchRec's phase-synchronised view), at least the critical path."""

    rank: int
    compute_ms: float
    communication_ms: float
    sum_of_maxima_ms: float

    @property
    def total_ms(self) -> float:
        return self.compute_ms + self.communication_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "compute_ms": self.compute_ms,
            "communication_ms": self.communication_ms,
            "total_ms": self.total_ms,
            "sum_of_maxima_ms": self.sum_of_maxima_ms,
        }


@dataclass(frozen=True, slots=True)
class PlanStats:
    """A plan's stats (``plan_stats``; the module docstring says what each figure is and where it
    differs from TorchRec's ``EmbeddingStats``). Costs are in ``cost_unit`` (``ms``, or a
    proxy's unit where the plan was priced without a cost model). ``max_rank``: the costliest
    rank (the lowest of those tied); ``expected_max_ms``: the plan's max under the model's
    measured error (None without it)."""

    planner: str
    cost_unit: str
    batch_size: int
    ranks: tuple[RankStats, ...]
    tables: tuple[TableStats, ...]
    cost_imbalance: Imbalance
    memory_imbalance: Imbalance
    max_rank: int
    mean_cost_ms: float
    expected_max_ms: float | None
    critical_path: CriticalPath
    nearest_memory_cap: tuple[MemoryPressure, ...]
    max_rank_shards: tuple[MaxRankShard, ...]

    @property
    def max_cost_ms(self) -> float:
        return self.ranks[self.max_rank].cost_ms

    def to_dict(self) -> dict[str, Any]:
        top = self.ranks[self.max_rank]
        return {
            "planner": self.planner,
            "cost_unit": self.cost_unit,
            "batch_size": self.batch_size,
            "ranks": [r.to_dict() for r in self.ranks],
            "tables": [t.to_dict() for t in self.tables],
            "imbalance": {"cost": self.cost_imbalance.to_dict(), "memory": self.memory_imbalance.to_dict()},
            "max": {
                "rank": top.rank,
                "host": top.host,
                "cost_ms": top.cost_ms,
                "mean_cost_ms": self.mean_cost_ms,
                "expected_max_ms": self.expected_max_ms,
            },
            "critical_path": self.critical_path.to_dict(),
            "nearest_memory_cap": [m.to_dict() for m in self.nearest_memory_cap],
            "max_rank_shards": [s.to_dict() for s in self.max_rank_shards],
        }


def plan_stats(
    plan: ShardingPlan,
    workload: Workload,
    topology: Topology,
    cost_model: CostModel,
    communication: CommunicationModel | None = None,
    device_errors: DeviceErrors | None = None,
    cost_unit: str = "ms",
) -> PlanStats:
    """The stats of ``plan`` (of ``workload`` on ``topology``, one ``DevicePlan`` per rank).
    ``cost_model``: the compute model the plan was priced with (a ``ProxyCostModel`` where it was
    priced by a proxy), without the all-to-all, which ``communication`` prices (None: a plan
    priced without one, every communication 0). Its shards alone are priced in one batched
    ``predict_many`` call. ``device_errors``: the profile's measured device errors, for the
    expected max."""
    batch = workload.batch_size
    shards = [s for d in plan.devices for s in d.shards]
    distinct = list(dict.fromkeys(s.as_table for s in shards))
    priced = at_dmp_batch(cost_model, topology.num_devices)
    alone = dict(zip(distinct, predict_nonempty(priced, [[t] for t in distinct], batch)))

    def comm_of(tables: Sequence[Table]) -> float:
        return communication.cost_ms(tables, batch, topology) if communication is not None and tables else 0.0

    latency = 2 * communication.latency_ms if communication is not None and topology.num_devices > 1 else 0.0
    shard_comm = {t: max(comm_of([t]) - latency, 0.0) for t in distinct}

    ranks = tuple(
        _rank_stats(r, topology, d.shards, d.cost_ms, comm_of([s.as_table for s in d.shards]), batch)
        for r, d in enumerate(plan.devices)
    )
    costs = [r.cost_ms for r in ranks]
    top = costs.index(max(costs))
    return PlanStats(
        plan.planner,
        cost_unit,
        batch,
        ranks,
        _table_stats(plan, workload, alone, shard_comm),
        Imbalance.of(costs),
        Imbalance.of([r.memory_bytes for r in ranks]),
        top,
        sum(costs) / len(costs),
        device_errors.expected_max(costs) if device_errors is not None else None,
        CriticalPath(
            top,
            ranks[top].compute_ms,
            ranks[top].communication_ms,
            max(r.compute_ms for r in ranks) + max(r.communication_ms for r in ranks),
        ),
        tuple(
            MemoryPressure(r.rank, r.host, r.memory_bytes, r.memory_cap_bytes, r.memory_share)
            for r in sorted(ranks, key=lambda r: (-r.memory_share, r.rank))[:NEAREST_CAPS]
        ),
        _max_rank_shards(plan.devices[top].shards, ranks[top].cost_ms, alone, shard_comm),
    )


def _rank_stats(
    rank: int, topology: Topology, shards: Sequence[TableShard], cost_ms: float, communication_ms: float, batch: int
) -> RankStats:
    counts: dict[str, int] = {}
    inputs = outputs = 0.0
    for shard in shards:
        kind = shard.sharding_type
        counts[kind.value] = counts.get(kind.value, 0) + 1
        bags = batch * topology.num_devices  # every rank's samples
        inputs += bags * shard.table.pooling_factor * shard.lookup_share * ID_BYTES
        samples = batch if kind is ShardingType.DATA_PARALLEL else bags
        outputs += samples * shard.width * OUTPUT_BYTES
    return RankStats(
        rank,
        topology.host_of(rank),
        cost_ms,
        cost_ms - communication_ms,
        communication_ms,
        sum(s.memory_bytes for s in shards),
        topology.device_memory_bytes_of(rank),
        inputs,
        outputs,
        tuple(sorted(counts.items(), key=lambda item: _ORDER[item[0]])),
    )


def _table_stats(
    plan: ShardingPlan, workload: Workload, alone: dict[Table, float], shard_comm: dict[Table, float]
) -> tuple[TableStats, ...]:
    """Per table of the workload that the plan holds, in the workload's order."""
    placed: dict[str, list[tuple[int, TableShard]]] = {}
    for rank, device in enumerate(plan.devices):
        for shard in device.shards:
            placed.setdefault(shard.table.name, []).append((rank, shard))
    out = []
    for table in workload.tables:
        held = placed.get(table.name)
        if not held:
            continue
        kinds = sorted({s.sharding_type.value for _, s in held}, key=_ORDER.__getitem__)
        out.append(
            TableStats(
                table.name,
                ",".join(kinds),
                tuple(sorted({r for r, _ in held})),
                len(held),
                sum(alone[s.as_table] for _, s in held),
                sum(shard_comm[s.as_table] for _, s in held),
                sum(s.memory_bytes for _, s in held),
                table.pooling_factor,
            )
        )
    return tuple(out)


def _max_rank_shards(
    shards: Sequence[TableShard], rank_cost_ms: float, alone: dict[Table, float], shard_comm: dict[Table, float]
) -> tuple[MaxRankShard, ...]:
    """The max rank's shards, costliest alone first (ties: by label)."""
    rows = [(alone[s.as_table] + shard_comm[s.as_table], s.label, s.table.name, s.sharding_type.value) for s in shards]
    rows.sort(key=lambda row: (-row[0], row[1]))
    return tuple(
        MaxRankShard(label, table, kind, cost, cost / rank_cost_ms if rank_cost_ms > 0 else 0.0)
        for cost, label, table, kind in rows
    )


def abbreviation(sharding_type: str) -> str:
    """TorchRec's abbreviation of a sharding type's name (``table_wise``: ``TW``)."""
    return ABBREVIATIONS[ShardingType(sharding_type)]
