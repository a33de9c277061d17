"""The collectives a sharded DMP step runs, the link tier each byte crosses, and each shard's traffic.

A rank of a cluster of H hosts x L devices (W = H L ranks) talks to the L - 1 other ranks of its
host over the **intra-host** tier and to the W - L ranks of other hosts over the **inter-host**
tier. Per iteration, with B the samples one table serves (the workload's ``batch_size``: every
rank's samples together, as ``autoshard.core.sharding`` counts them), a shard (its ``as_table``:
d columns, pooling factor L_s, its lookups' share already in it) makes a rank send, per tier
(``shard_traffic``), the bytes of TorchRec's collectives as DMP runs them:

- ``input_dist`` (every shard but a replica): the ids' all-to-all, B x (8 L_s + 4) bytes (int64
  ids and int32 lengths) a rank receives for the shard, (L - 1) / W of them from its host and
  (W - L) / W from other hosts; a row-wise, table-row-wise or grid shard's ids are bucketized by
  row block first (TorchRec's ``RwSparseFeaturesDist``, ``TwRwSparseFeaturesDist``), CPU work a
  table-wise shard's ids skip: the same bytes, priced as ``input_dist_row_wise``;
- a sequence table's shard (``Table.pooled`` False, an EmbeddingCollection's) sends every id's
  embedding, not one pooled row a sample: its outputs below are L_s times larger;
- ``all_to_all`` (table-, column- and table-column-wise): 2 x B x d x 4 bytes (fp32 pooled
  outputs forward, their gradients backward), split over the tiers as the ids are;
- ``reduce_scatter`` (row-wise forward) and ``all_gather`` (its backward): B x d x 4 bytes of
  partial sums each, split as the ids are;
- table-row-wise and grid shards (each column block row-sharded over one host): the
  ``reduce_scatter`` and ``all_gather`` inside the host, B x d x 4 x (L - 1) / L bytes each, and
  an ``all_to_all`` of the reduced rows between hosts, 2 x B x d x 4 x (W - L) / (L W);
- ``all_reduce`` (data parallel): the R x d gradient of b-byte elements, S = R d b, reduced as a
  two-level ring: 2 S (L - 1) / L inside the host, then 2 (S / L) (H - 1) / H between hosts.

``CALLS`` counts a collective's calls an iteration, each paying the fitted latency once. The ids
are distributed once per **group** (``ID_GROUPS``): TorchRec's sharded collection runs one
``KJTAllToAll`` per sharding type (``ShardedEmbeddingBagCollection._input_dists``, each with its
own splits exchange, lengths and ids), so a rank pays the ids' fixed cost (``CALLS`` x latency,
on each tier its ids cross) once per group it holds (``shard_groups``), where every other
collective pays it once per (collective, tier) it uses. A rank takes part in every group of the
plan, held or not; a device's price sees only its own shards (on 2 ranks, every rank holds
every group of its plan). The profile's fits (``LinkFit``) price ``latency_ms + bytes /
bandwidth`` per (collective, tier): bytes are those a rank sends on the tier, which is how `bench
comm` fits its points. `bench comm` times TorchRec's dist modules themselves (``KJTAllToAll``,
``PooledEmbeddingsAllToAll``, ``PooledEmbeddingsReduceScatter``, DDP's bucketed all-reduce), so a
fit's latency holds the CPU work TorchRec does around each call (KJT permutes and splits,
copies) and its bandwidth the
per-byte part of it, not only the link's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table

ID_BYTES, LENGTH_BYTES, OUTPUT_BYTES = 8, 4, 4  # int64 ids, int32 lengths, fp32 pooled outputs


class Collective(str, Enum):
    """The collectives of a sharded DMP step (TorchRec's names in the comments)."""

    INPUT_DIST = "input_dist"  # the ids' all-to-all (KJTAllToAll)
    INPUT_DIST_ROW_WISE = "input_dist_row_wise"  # the ids bucketized by row block, then all-to-all
    ALL_TO_ALL = "all_to_all"  # pooled embeddings (PooledEmbeddingsAllToAll)
    REDUCE_SCATTER = "reduce_scatter"  # row-wise partial sums (PooledEmbeddingsReduceScatter)
    ALL_GATHER = "all_gather"  # their gradients, backward
    ALL_REDUCE = "all_reduce"  # data-parallel gradients (DDP)


class Tier(str, Enum):
    """The link a byte crosses."""

    INTRA = "intra"  # between ranks of one host
    INTER = "inter"  # between hosts


CALLS = {
    Collective.INPUT_DIST: 2,  # lengths, then ids
    Collective.INPUT_DIST_ROW_WISE: 2,
    Collective.ALL_TO_ALL: 2,  # forward outputs, backward gradients
    Collective.REDUCE_SCATTER: 1,
    Collective.ALL_GATHER: 1,
    Collective.ALL_REDUCE: 1,
}
IDS = (Collective.INPUT_DIST, Collective.INPUT_DIST_ROW_WISE)
BUCKETIZED = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)
ID_GROUPS = tuple(
    (kind, pooled)
    for pooled in (True, False)
    for kind in (
        ShardingType.TABLE_WISE,
        ShardingType.COLUMN_WISE,
        ShardingType.TABLE_COLUMN_WISE,
        *BUCKETIZED,
    )
)
"""The groups that each run their own ids' all-to-all: a sharding type of a pooled collection
(EmbeddingBagCollection) or of a sequence one (EmbeddingCollection); a replica's ids stay local."""
GROUP_INDEX = {group: i for i, group in enumerate(ID_GROUPS)}
KEYS = tuple((c, t) for c in Collective for t in Tier)
"""Every (collective, tier), in the order of ``shard_traffic``'s vector."""
INDEX = {key: i for i, key in enumerate(KEYS)}
ROW_SHARDED_IN_HOST = (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)


def ids_collective(kind: ShardingType) -> Collective:
    """The collective that carries a shard's ids: bucketized by row block first for row-wise,
    table-row-wise and grid shards (TorchRec's ``RwSparseFeaturesDist``, ``TwRwSparseFeaturesDist``)."""
    return Collective.INPUT_DIST_ROW_WISE if kind in BUCKETIZED else Collective.INPUT_DIST


def shard_groups(table: Table, num_devices: int) -> list[float]:
    """1 in the column of ``table``'s ids group (``ID_GROUPS``), 0 elsewhere; all 0 for a replica
    or on one device. Summed over a device's shards, a column > 0 is a group whose ids' all-to-all
    the device runs."""
    out = [0.0] * len(ID_GROUPS)
    if num_devices > 1 and table.sharding_type is not ShardingType.DATA_PARALLEL:
        out[GROUP_INDEX[table.sharding_type, table.pooled]] = 1.0
    return out


@dataclass(frozen=True, slots=True)
class LinkFit:
    """One (collective, tier)'s fit: a call costs ``latency_ms + bytes / bandwidth_gbps`` (GB/s,
    1e9 bytes a second) for the bytes a rank sends on the tier. ``source`` says where it came from:
    ``measured`` (``points`` are the (bytes, median ms) it was fitted on, over ``ranks`` ranks of
    ``link``), ``declared`` (a constant, not measured) or ``override`` (the topology's bandwidth)."""

    collective: Collective
    tier: Tier
    latency_ms: float
    bandwidth_gbps: float
    source: str = "measured"
    points: tuple[tuple[int, float], ...] = ()
    ranks: int = 0
    link: str = ""

    def __post_init__(self) -> None:
        where = f"{self.collective.value} {self.tier.value}"
        if not self.bandwidth_gbps > 0:
            raise InputError("bandwidth_gbps", f"{where}: must be > 0, got {self.bandwidth_gbps}")
        if not self.latency_ms >= 0:
            raise InputError("latency_ms", f"{where}: must be >= 0, got {self.latency_ms}")
        if self.source not in ("measured", "declared", "override"):
            raise InputError("source", f"{where}: {self.source!r}", "use measured, declared or override")

    @property
    def key(self) -> tuple[Collective, Tier]:
        return self.collective, self.tier

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "collective": self.collective.value,
            "tier": self.tier.value,
            "latency_ms": self.latency_ms,
            "bandwidth_gbps": self.bandwidth_gbps,
            "source": self.source,
        }
        if self.link:
            out["link"] = self.link
        if self.ranks:
            out["ranks"] = self.ranks
        if self.points:
            out["points"] = [[int(b), round(float(ms), 4)] for b, ms in self.points]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> LinkFit:
        return cls(
            Collective(data["collective"]),
            Tier(data["tier"]),
            float(data["latency_ms"]),
            float(data["bandwidth_gbps"]),
            str(data.get("source", "measured")),
            tuple((int(b), float(ms)) for b, ms in data.get("points", ())),
            int(data.get("ranks", 0)),
            str(data.get("link", "")),
        )


def with_row_wise_ids(fits: Sequence[LinkFit]) -> list[LinkFit]:
    """``fits`` with an ``input_dist_row_wise`` fit on each tier that has none: the tier's
    ``input_dist`` fit, marked so (a profile measured before `bench comm` timed the bucketizing)."""
    have = {f.key for f in fits}
    added = [
        LinkFit(Collective.INPUT_DIST_ROW_WISE, f.tier, f.latency_ms, f.bandwidth_gbps, f.source, (), f.ranks, _AS_IDS)
        for f in fits
        if f.collective is Collective.INPUT_DIST and (Collective.INPUT_DIST_ROW_WISE, f.tier) not in have
    ]
    return [*fits, *added]


_AS_IDS = "input_dist's fit: bucketizing not measured"


def tier_shares(num_devices: int, devices_per_host: int) -> tuple[float, float]:
    """The shares of a rank's all-to-all bytes that go to its host's other ranks and to other hosts."""
    return (devices_per_host - 1) / num_devices, (num_devices - devices_per_host) / num_devices


def shard_traffic(table: Table, batch_size: int, num_devices: int, devices_per_host: int) -> list[float]:
    """Bytes a rank sends (receives, for the ids) an iteration for ``table`` (a shard's
    ``as_table``), one value per (collective, tier) in ``KEYS`` order (see the module docstring)."""
    out = [0.0] * len(KEYS)
    if num_devices <= 1:
        return out
    w, local = num_devices, devices_per_host
    intra, inter = tier_shares(w, local)
    kind, d = table.sharding_type, float(table.embedding_dim)
    if kind is ShardingType.DATA_PARALLEL:
        gradient = float(table.num_embeddings * table.embedding_dim * table.bytes_per_element)
        hosts = w // local
        out[INDEX[Collective.ALL_REDUCE, Tier.INTRA]] = 2.0 * gradient * (local - 1) / local
        out[INDEX[Collective.ALL_REDUCE, Tier.INTER]] = 2.0 * gradient / local * (hosts - 1) / hosts
        return out
    ids = batch_size * (ID_BYTES * table.pooling_factor + LENGTH_BYTES)
    dist = ids_collective(kind)
    out[INDEX[dist, Tier.INTRA]] = ids * intra
    out[INDEX[dist, Tier.INTER]] = ids * inter
    output = batch_size * d * OUTPUT_BYTES * (1.0 if table.pooled else table.pooling_factor)  # sequence: per id
    if kind in ROW_SHARDED_IN_HOST:
        for collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
            out[INDEX[collective, Tier.INTRA]] = output * (local - 1) / local
        out[INDEX[Collective.ALL_TO_ALL, Tier.INTER]] = 2.0 * output * (w - local) / (local * w)
    elif kind is ShardingType.ROW_WISE:
        for collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
            out[INDEX[collective, Tier.INTRA]] = output * intra
            out[INDEX[collective, Tier.INTER]] = output * inter
    else:
        out[INDEX[Collective.ALL_TO_ALL, Tier.INTRA]] = 2.0 * output * intra
        out[INDEX[Collective.ALL_TO_ALL, Tier.INTER]] = 2.0 * output * inter
    return out
