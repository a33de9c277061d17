"""Each device's communication, added to its compute cost: priced per collective and link tier.

A profile's model (``communication.json``, written by `autoshard bench comm`) holds one fit
(``LinkFit``: latency and bandwidth, with the points it was fitted on) for each collective a
sharded DMP step runs and each link tier (within a host, between hosts); ``autoshard.core
.collectives`` says which bytes each shard sends on which tier. A device pays, for every
(collective, tier) its shards use, ``CALLS`` x latency + bytes / bandwidth, summed over tiers
and collectives (``TierPricing``); the ids' fixed cost is paid once per group (sharding type)
its shards fall in, as TorchRec runs one ids' all-to-all per group (``collectives.ID_GROUPS``).
The topology's ``intra_host_bw_gbps`` and ``inter_host_bw_gbps`` (GiB/s) are explicit user
overrides: a value other than TorchRec's default (600 and 12.5 GiB/s) replaces that tier's
measured bandwidths (latencies stay); the defaults themselves price nothing unless a profile
declares them (``source`` "declared": a GPU profile made without GPUs; its outputs say "declared,
not measured").

Every method takes the workload's ``batch_size`` as TorchRec does: B samples per rank. A sharded
shard serves every rank's samples, B x W bags on W ranks (``Links.bags``; ``autoshard.core
.dmp_batch``), and its collectives carry them; a replica's all-reduce does not depend on B.

**One-figure models** (a file of format 1, or ``CommunicationModel(bandwidth_gbps, latency_ms)``)
price as before the tiers were measured: a device holding table-, column- or row-wise shards of
dims d_t sends ``2 * B * D * sum(d_t) * 4 * (D - 1) / D`` bytes on one host of D devices (outputs
and gradients of B x D bags), at ``2 * latency_ms + bytes / (bandwidth_gbps * 1e6)``; on hosts of L devices,
(L - 1) / D of them at that bandwidth and (D - L) / D at the topology's ``inter_host_bw_gbps``
(never faster than the measured one). A table-row-wise or grid shard (``link_dims``)
reduce-scatters inside its host and sends B x D / L reduced rows to other hosts; a replica
all-reduces its R x d gradient (a ring, 2 (W - 1) / W x R d b bytes, at the slowest link). The
ids are not priced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from autoshard.core.collectives import (
    CALLS,
    ID_GROUPS,
    IDS,
    INDEX,
    KEYS,
    Collective,
    LinkFit,
    Tier,
    ids_collective,
    shard_groups,
    shard_traffic,
    with_row_wise_ids,
)
from autoshard.core.costing import (
    Accumulator,
    EditBatch,
    Edits,
    EditScorer,
    SetCostModel,
)
from autoshard.core.dmp_batch import at_dmp_batch
from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import GIB, INTER_HOST_BW_GBPS, INTRA_HOST_BW_GBPS, CostModel, Table, Topology, Workload

COMMUNICATION_FILE = "communication.json"
FORMAT = 2  # communication.json with per-(collective, tier) fits; format 1: one figure


@dataclass(frozen=True, slots=True)
class Links:
    """What a device's communication crosses: ``num_devices`` ranks, ``devices_per_host`` of them
    on its host, and the topology's bandwidths (GiB/s; TorchRec's defaults unless the user set them)."""

    num_devices: int
    devices_per_host: int
    inter_host_bw_gbps: float = 0.0
    intra_host_bw_gbps: float = INTRA_HOST_BW_GBPS

    @classmethod
    def of(cls, where: Links | Topology | int) -> Links:
        """A topology's links; a bare device count is one host."""
        if isinstance(where, Links):
            return where
        if isinstance(where, Topology):
            return cls(where.num_devices, where.local_world_size, where.inter_host_bw_gbps, where.intra_host_bw_gbps)
        return cls(where, where)

    def override_gbps(self, tier: Tier) -> float | None:
        """The tier's bandwidth in GB/s where the user set it (a topology value other than
        TorchRec's default), else None: the profile's fit prices the tier."""
        if tier is Tier.INTRA:
            value, default = self.intra_host_bw_gbps, INTRA_HOST_BW_GBPS
        else:
            value, default = self.inter_host_bw_gbps, INTER_HOST_BW_GBPS
        return value * GIB / 1e9 if value and value != default else None

    def bags(self, batch_size: int) -> int:
        """The bags a sharded shard serves at ``batch_size`` samples per rank: every rank's
        (``autoshard.core.dmp_batch``; a replica's all-reduce does not depend on it)."""
        return batch_size * self.num_devices

    @property
    def remote_share(self) -> float:
        """The share of a device's bytes that leaves its host."""
        return (self.num_devices - self.devices_per_host) / self.num_devices


def link_dims(table: Table, links: Links) -> tuple[float, float]:
    """The output columns a shard (``table``: its ``as_table``) sends inside its host and to
    other hosts, in units of a table-wise shard's all-to-all (see the module docstring)."""
    kind, d = table.sharding_type, float(table.embedding_dim)
    d *= 1.0 if table.pooled else table.pooling_factor  # a sequence table sends every id's embedding
    if kind is ShardingType.DATA_PARALLEL:
        return 0.0, 0.0
    if kind is ShardingType.TABLE_ROW_WISE or kind is ShardingType.GRID_SHARD:
        host_size = links.devices_per_host
        return d * links.num_devices / host_size, d / host_size
    return d, d


def allreduce_bytes(table: Table, links: Links) -> float:
    """Bytes a device sends to all-reduce a data-parallel replica's gradient (ring; 0 otherwise)."""
    if table.sharding_type is not ShardingType.DATA_PARALLEL or links.num_devices <= 1:
        return 0.0
    weights = table.num_embeddings * table.embedding_dim * table.bytes_per_element
    return 2.0 * (links.num_devices - 1) / links.num_devices * weights


@dataclass(frozen=True, slots=True)
class TierPricing:
    """A model's fits on one set of links, as arrays over ``KEYS``: what a call's latency adds an
    iteration (``CALLS`` x latency, where the key carries bytes; 0 for the ids), bytes a ms, and
    the ids' fixed cost each group adds to each key (``group_fixed_ms``: len(ID_GROUPS) x
    len(KEYS), ``CALLS`` x latency on every tier the ids cross). ``cost_ms`` prices rows of terms:
    bytes per key, then shards per group (``CommunicationModel.terms``)."""

    fixed_ms: np.ndarray
    bytes_per_ms: np.ndarray
    group_fixed_ms: np.ndarray

    def key_cost_ms(self, terms: np.ndarray) -> np.ndarray:
        """Each row's ms per key (``terms``: N x (len(KEYS) + len(ID_GROUPS)))."""
        totals, groups = terms[:, : len(KEYS)], terms[:, len(KEYS) :]
        fixed = np.where(totals > 0, self.fixed_ms, 0.0) + (groups > 0).astype(np.float64) @ self.group_fixed_ms
        return fixed + totals / self.bytes_per_ms

    def cost_ms(self, terms: np.ndarray, count: np.ndarray) -> np.ndarray:
        """Each row's communication (``terms`` as ``key_cost_ms``; ``count``: its shards)."""
        return np.where(count > 0, self.key_cost_ms(terms).sum(axis=1), 0.0)


@dataclass(frozen=True, slots=True)
class CommunicationModel:
    """A profile's communication: per-(collective, tier) ``fits`` (see the module docstring), or
    one figure (``bandwidth_gbps``, ``latency_ms``; no ``fits``). A per-tier model keeps its intra-host
    all-to-all's figures in ``bandwidth_gbps`` and ``latency_ms`` (``tiered`` fills them)."""

    bandwidth_gbps: float
    latency_ms: float
    measured_on: str = ""
    fits: tuple[LinkFit, ...] = ()

    def __post_init__(self) -> None:
        if not self.bandwidth_gbps > 0:
            raise InputError("bandwidth_gbps", f"must be > 0, got {self.bandwidth_gbps}")
        if not self.latency_ms >= 0:
            raise InputError("latency_ms", f"must be >= 0, got {self.latency_ms}")
        if self.fits:
            keys = [f.key for f in self.fits]
            missing = [f"{c.value} {t.value}" for c, t in KEYS if (c, t) not in keys]
            if missing or len(keys) != len(set(keys)):
                raise InputError(
                    "fits",
                    f"need one fit per (collective, tier); missing {missing or 'none'}, {len(keys)} given",
                    "re-measure with `autoshard bench comm`",
                )

    @classmethod
    def tiered(cls, fits: Sequence[LinkFit], measured_on: str = "") -> CommunicationModel:
        """A per-tier model of ``fits`` (one per (collective, tier)), in ``KEYS`` order; a profile
        without row-wise ids' fits prices them as its ``input_dist`` (``with_row_wise_ids``)."""
        fits = with_row_wise_ids(fits)
        by_key = {f.key: f for f in fits}
        ordered = tuple(by_key[k] for k in KEYS if k in by_key)
        head = by_key.get((Collective.ALL_TO_ALL, Tier.INTRA))
        if head is None or len(ordered) != len(fits):
            raise InputError("fits", "need one fit per (collective, tier)", "re-measure with `autoshard bench comm`")
        return cls(head.bandwidth_gbps, head.latency_ms, measured_on, ordered)

    @property
    def per_tier(self) -> bool:
        return bool(self.fits)

    @property
    def declared(self) -> bool:
        """Whether any fit is a declared constant, not a measurement."""
        return any(f.source == "declared" for f in self.fits)

    def fit(self, collective: Collective, tier: Tier, where: Links | Topology | int = 1) -> LinkFit:
        """The fit that prices ``collective`` on ``tier`` over ``where``'s links (its override's
        bandwidth where the user set one)."""
        if not self.fits:
            raise InputError("communication", "a one-figure model has no per-tier fits", "re-measure with bench comm")
        fit = self.fits[INDEX[collective, tier]]
        override = Links.of(where).override_gbps(tier)
        if override is None:
            return fit
        return LinkFit(fit.collective, fit.tier, fit.latency_ms, override, "override", (), fit.ranks, "the topology's")

    def pricing(self, where: Links | Topology | int) -> TierPricing:
        """The per-tier fits on ``where``'s links, as arrays (``TierPricing``): a group's ids pay
        their collective's ``CALLS`` x latency on each tier they cross (within the host where it
        has other ranks, between hosts where there are others). Made once per (model, links):
        the planners ask for it on every candidate."""
        return _pricing(self, Links.of(where))

    def traffic(self, table: Table, batch_size: int, where: Links | Topology | int) -> np.ndarray:
        """Bytes ``table`` (a shard's ``as_table``) sends per (collective, tier), in ``KEYS``
        order, at ``batch_size`` samples per rank (a shard serves ``links.bags``)."""
        links = Links.of(where)
        return np.array(shard_traffic(table, links.bags(batch_size), links.num_devices, links.devices_per_host))

    def _tier_terms(self, table: Table, batch_size: int, links: Links) -> list[float]:
        """A per-tier model's terms of ``table``: its bytes per key, then its ids group's column."""
        bags = links.bags(batch_size)
        traffic = shard_traffic(table, bags, links.num_devices, links.devices_per_host)
        return [*traffic, *shard_groups(table, links.num_devices)]

    def breakdown(self, tables: Sequence[Table], batch_size: int, where: Links | Topology | int) -> dict[str, float]:
        """A device's communication ms per ``"collective tier"`` it uses (a per-tier model)."""
        links = Links.of(where)
        if not tables or links.num_devices <= 1:
            return {}
        terms = np.sum([self._tier_terms(t, batch_size, links) for t in tables], axis=0)
        cost = self.pricing(links).key_cost_ms(terms[None, :])[0]
        return {f"{c.value} {t.value}": float(cost[i]) for i, (c, t) in enumerate(KEYS) if terms[i] > 0}

    def describe(self) -> str:
        """One line for outputs: where the figures come from."""
        if not self.fits:
            return f"one figure ({self.measured_on or 'measured'}): {self.bandwidth_gbps:.3g} GB/s, both tiers"
        if self.declared:
            return f"declared, not measured: {self.measured_on}"
        return f"measured per collective and tier: {self.measured_on}"

    def bytes(self, dims: int, batch_size: int, num_devices: int) -> float:
        """Bytes a device of ``dims`` output columns sends to the other devices of its host (all
        of them, on one host of ``num_devices``), at ``batch_size`` samples per rank."""
        return 2.0 * batch_size * num_devices * dims * 4 * (num_devices - 1) / num_devices

    def _host_bytes(self, dims: float, batch_size: int, links: Links) -> float:
        return 2.0 * links.bags(batch_size) * dims * 4 * (links.devices_per_host - 1) / links.num_devices

    def _slowest_per_ms(self, links: Links) -> float:
        """Bytes per ms over the slowest link a device's traffic crosses."""
        measured = self.bandwidth_gbps * 1e6
        if links.devices_per_host >= links.num_devices:
            return measured
        return min(measured, links.inter_host_bw_gbps * GIB / 1000)

    def _remote_ms(self, dims: float | np.ndarray, batch_size: int, links: Links) -> float | np.ndarray:
        """The inter-host part of the all-to-all (0 on one host)."""
        if links.devices_per_host >= links.num_devices:
            return 0.0
        return 2.0 * links.bags(batch_size) * dims * 4 * links.remote_share / self._slowest_per_ms(links)

    def allreduce_ms(self, table: Table, where: Links | Topology | int) -> float:
        """A data-parallel replica's gradient all-reduce (0 for any other shard)."""
        links = Links.of(where)
        sent = allreduce_bytes(table, links)
        return sent / self._slowest_per_ms(links) if sent else 0.0

    def cost_ms(self, tables: Sequence[Table], batch_size: int, where: Links | Topology | int) -> float:
        """The communication of a device holding ``tables`` (its shards, as tables)."""
        links = Links.of(where)
        if self.fits:
            if links.num_devices <= 1 or not tables:
                return 0.0
            terms = np.sum([self._tier_terms(t, batch_size, links) for t in tables], axis=0)
            return float(self.pricing(links).cost_ms(terms[None, :], np.array([len(tables)]))[0])
        host = remote = extra = 0.0
        for table in tables:
            h, r = link_dims(table, links)
            host, remote, extra = host + h, remote + r, extra + self.allreduce_ms(table, links)
        return self.cost_ms_of(host, len(tables), batch_size, links, remote, extra)

    def cost_ms_of(
        self,
        dims: float,
        count: int,
        batch_size: int,
        where: Links | Topology | int,
        remote_dims: float | None = None,
        extra_ms: float = 0.0,
    ) -> float:
        """The cost of a device holding ``count`` shards of ``dims`` output columns in all (and
        ``remote_dims`` to other hosts, if they differ; ``extra_ms`` of all-reduce)."""
        links = Links.of(where)
        if links.num_devices <= 1 or count == 0:
            return 0.0
        host = self._host_bytes(dims, batch_size, links) / (self.bandwidth_gbps * 1e6)
        remote = float(self._remote_ms(dims if remote_dims is None else remote_dims, batch_size, links))
        return 2 * self.latency_ms + host + remote + extra_ms

    def cost_ms_many(
        self,
        dims: np.ndarray,
        count: np.ndarray,
        batch_size: int,
        where: Links | Topology | int,
        remote_dims: np.ndarray | None = None,
        extra_ms: np.ndarray | None = None,
    ) -> np.ndarray:
        """The cost of many devices at once: arrays of their output dims inside the host (and,
        if they differ, to other hosts: ``remote_dims``), their shard counts, and their
        all-reduce time (``extra_ms``)."""
        links = Links.of(where)
        if links.num_devices <= 1:
            return np.zeros(len(dims))
        host = self._host_bytes(1, batch_size, links) * dims / (self.bandwidth_gbps * 1e6)
        remote = self._remote_ms(dims if remote_dims is None else remote_dims, batch_size, links)
        cost = 2 * self.latency_ms + host + remote
        if extra_ms is not None:
            cost = cost + extra_ms
        return np.where(count > 0, cost, 0.0)

    def terms(self, table: Table, links: Links, batch_size: int = 0) -> tuple[float, ...]:
        """What ``table`` adds to a device's communication, additive over its shards: a per-tier
        model's bytes per (collective, tier) at ``batch_size``, then 1 in its ids group's column
        (``ID_GROUPS``); a one-figure model's (host dims, remote dims, all-reduce ms)."""
        if self.fits:
            return tuple(self._tier_terms(table, batch_size, links))
        host, remote = link_dims(table, links)
        return host, remote, self.allreduce_ms(table, links)

    def terms_cost_ms(self, totals: np.ndarray, count: np.ndarray, batch_size: int, links: Links) -> np.ndarray:
        """The cost of devices from their summed ``terms`` (rows) and shard counts."""
        if links.num_devices <= 1:
            return np.zeros(len(count))
        if self.fits:
            return self.pricing(links).cost_ms(totals, count)
        return self.cost_ms_many(totals[:, 0], count, batch_size, links, totals[:, 1], totals[:, 2])

    def to_dict(self) -> dict:
        """``communication.json``: format 2 with every fit and its points; format 1: one figure."""
        if not self.fits:
            return dict(bandwidth_gbps=self.bandwidth_gbps, latency_ms=self.latency_ms, measured_on=self.measured_on)
        return {
            "format": FORMAT,
            "measured_on": self.measured_on,
            "source": "declared, not measured" if self.declared else "measured",
            "fits": [f.to_dict() for f in self.fits],
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> CommunicationModel:
        try:
            data = json.loads(path.read_text())
            if "fits" in data:
                return cls.tiered([LinkFit.from_dict(f) for f in data["fits"]], str(data.get("measured_on", "")))
            return cls(float(data["bandwidth_gbps"]), float(data["latency_ms"]), str(data.get("measured_on", "")))
        except (OSError, ValueError, KeyError, TypeError, InputError) as error:
            raise InputError(
                "communication",
                f"{path} is not a communication model ({error})",
                "re-measure it with `autoshard bench comm`",
            ) from None


@lru_cache(maxsize=64)
def _pricing(model: CommunicationModel, links: Links) -> TierPricing:
    """``CommunicationModel.pricing`` (read-only arrays: one is shared by every caller)."""
    fits = [model.fit(c, t, links) for c, t in KEYS]
    calls = np.array([CALLS[f.collective] * f.latency_ms for f in fits])
    crossed = {Tier.INTRA: links.devices_per_host > 1, Tier.INTER: links.num_devices > links.devices_per_host}
    group_fixed = np.zeros((len(ID_GROUPS), len(KEYS)))
    for g, (kind, _) in enumerate(ID_GROUPS):
        for tier in Tier:
            key = INDEX[ids_collective(kind), tier]
            group_fixed[g, key] = calls[key] if crossed[tier] else 0.0
    ids = np.array([c in IDS for c, _ in KEYS])
    arrays = np.where(ids, 0.0, calls), np.array([f.bandwidth_gbps * 1e6 for f in fits]), group_fixed
    for array in arrays:
        array.flags.writeable = False
    return TierPricing(*arrays)


def communication_warnings(model: CommunicationModel | None, where: Links | Topology | int = 1) -> tuple[str, ...]:
    """What a plan's output says about the communication it was priced with: declared figures
    (TorchRec's constants in a profile made without its devices) are not measurements, and a
    topology bandwidth the user set overrides the measured tier."""
    if model is None or not model.fits:
        return ()
    links = Links.of(where)
    said = [f"communication is {model.describe()}"] if model.declared else []
    for tier, field in ((Tier.INTRA, "intra_host_bw_gbps"), (Tier.INTER, "inter_host_bw_gbps")):
        if links.override_gbps(tier) is not None and (tier is Tier.INTRA or links.devices_per_host < links.num_devices):
            value = getattr(links, field)
            said.append(f"the topology's {field} {value:g} GiB/s overrides the profile's {tier.value}-host bandwidths")
    return tuple(said)


class WithCommunication(SetCostModel):
    """A cost model plus each device's communication on a topology (or a bare device count: one
    host), both at the bags DMP gives each shard from the per-rank batch it is asked at: the
    compute model through ``dmp_batch.at_dmp_batch``, the collectives through ``Links.bags``."""

    def __init__(self, compute: CostModel, communication: CommunicationModel | None, where: Topology | int) -> None:
        if communication is None:
            raise InputError(
                "communication",
                "the profile has no communication model (communication.json)",
                "measure one with `autoshard bench comm --out PROFILE`, or plan without communication",
            )
        self.links = Links.of(where)
        self.compute = at_dmp_batch(compute, self.links.num_devices)
        self.communication = communication
        self.max_set_size = compute.max_set_size
        self.dmp_world_size = self.links.num_devices

    @property
    def num_devices(self) -> int:
        return self.links.num_devices

    def _comm(self, tables: Sequence[Table], batch_size: int) -> float:
        return self.communication.cost_ms(tables, batch_size, self.links)

    def terms(self, table: Table, batch_size: int) -> tuple[float, ...]:
        return self.communication.terms(table, self.links, batch_size)

    def terms_cost_ms(self, totals: np.ndarray, count: np.ndarray, batch_size: int) -> np.ndarray:
        return self.communication.terms_cost_ms(totals, count, batch_size, self.links)

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        return self.compute.check_workload(workload, max_tables_per_device)

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        compute = self.compute.predict_many(table_sets, batch_size)
        return [c + self._comm(s, batch_size) for c, s in zip(compute, table_sets)]

    def accumulator(self, num_sets: int, batch_size: int) -> _CommAccumulator:
        return _CommAccumulator(self.compute.accumulator(num_sets, batch_size), self, num_sets, batch_size)

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]:
        return self.edit_scorer(base_sets, batch_size).predict(edits).tolist()

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int) -> _CommEdits:
        return _CommEdits(self.compute.edit_scorer(base_sets, batch_size), self, base_sets, batch_size)


class _CommEdits:
    """The compute model's edit scorer plus each edited set's communication (additive in its terms)."""

    def __init__(
        self, compute: EditScorer, model: WithCommunication, base_sets: Sequence[Sequence[Table]], batch_size: int
    ) -> None:
        self.compute, self.model, self.batch_size = compute, model, batch_size
        self.width = len(model.terms(Table("probe", 1, 1), batch_size))
        width = self.width
        terms = [model.terms(t, batch_size) for s in base_sets for t in s]
        self.terms = np.array(terms, dtype=np.float64).reshape(-1, width)
        self.sizes = np.array([len(s) for s in base_sets], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        self.set_terms = np.array(
            [np.sum([model.terms(t, batch_size) for t in s], axis=0) if s else np.zeros(width) for s in base_sets],
            dtype=np.float64,
        ).reshape(-1, width)

    def predict(self, edits: Edits) -> np.ndarray:
        edits = EditBatch.of(edits)
        compute = self.compute.predict(edits)
        if not len(edits):
            return compute
        has_rem, has_add = edits.removed >= 0, edits.add >= 0
        flat_row = np.minimum(self.offsets[edits.base] + edits.removed, max(len(self.terms) - 1, 0))
        removed = np.where(has_rem[:, None], self.terms[flat_row] if len(self.terms) else 0.0, 0.0)
        added_terms = [self.model.terms(t, self.batch_size) for t in edits.added]
        added = np.array([(0.0,) * self.width, *added_terms], dtype=np.float64)[edits.add + 1]
        count = (self.sizes[edits.base] - has_rem + has_add).astype(np.float64)
        total = self.set_terms[edits.base] - removed + added
        return compute + self.model.terms_cost_ms(total, count, self.batch_size)


class _CommAccumulator:
    """The compute model's accumulator plus each set's communication (additive in its terms)."""

    def __init__(self, compute: Accumulator, model: WithCommunication, num_sets: int, batch_size: int) -> None:
        self.compute, self.model, self.batch_size = compute, model, batch_size
        width = len(model.terms(Table("probe", 1, 1), batch_size))
        self.totals, self.count = np.zeros((num_sets, width)), np.zeros(num_sets)

    def costs(self) -> np.ndarray:
        return self.compute.costs() + self.model.terms_cost_ms(self.totals, self.count, self.batch_size)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        at = slice(None) if rows is None else rows
        terms = np.array(self.model.terms(table, self.batch_size))
        comm = self.model.terms_cost_ms(self.totals[at] + terms, self.count[at] + 1, self.batch_size)
        return self.compute.costs_if_added(table, rows) + comm

    def add(self, set_index: int, table: Table) -> None:
        self.compute.add(set_index, table)
        self.totals[set_index] += self.model.terms(table, self.batch_size)
        self.count[set_index] += 1
