"""TorchRec's sharding types, and what each one puts on a device.

A plan gives every table one sharding type. Each shard a device holds runs as one table of its
fused (TBE) kernel, so the cost model prices it as the table it is on that device
(``TableShard.as_table``): its rows, its columns, and the lookups it serves per iteration. With
B the samples one table serves per iteration (the workload's ``batch_size``), R rows, d columns,
pooling factor L, W devices in all, H hosts of L_h devices each:

- ``table_wise``: memory R x d + optimizer state on one device; compute: R rows, B bags of L
  lookups; communication: an all-to-all of its B x d pooled output (and of the gradients back).
- ``column_wise``: column blocks d_i on k devices, each R x d_i + state; compute: R rows, d_i
  columns, B bags of L lookups (every block pays every lookup); communication: the all-to-all
  of B x d_i per block.
- ``table_column_wise``: column_wise with every block on the devices of one host.
- ``row_wise``: row blocks on all W devices, each R / W rows + state; compute: R / W rows, B bags
  of L s_j lookups; communication: a reduce-scatter of the B x d partial sums (the same bytes a
  device sends as an all-to-all of its output).
- ``table_row_wise``: row blocks on the L_h devices of one host, each R / L_h rows + state;
  compute as row_wise; communication: a reduce-scatter inside the host, then B / L_h x d reduced
  rows per device to the other hosts.
- ``grid_shard``: column blocks, each row-sharded as table_row_wise over one host; memory
  R / L_h x d_i + state a device; compute and communication as table_row_wise, per block.
- ``data_parallel``: a full replica R x d + state on every device; compute: R rows, the B / W
  samples of its own device; communication: no pooled output, an all-reduce of the R x d
  gradient.

``s_j`` is the share of the table's lookups that row block j serves. Ids are hashed over the rows
(``scattered_row``: the same rule the microbenchmark draws with), so a block serves about 1/k of
them; skew makes blocks uneven because the hottest rows cannot be split: ``row_block_shares``
places the ``_HOT_RANKS`` hottest rows' Zipf mass on the block that holds each of them and
spreads the rest evenly, and the block's shard is priced at pooling factor L x s_j.
A data-parallel replica serves its own device's samples, B / W of them (priced as L / W lookups
per bag). Row blocks follow TorchRec's sizes (``row_blocks``: ceil(R / k) rows each, the last
block the rest). ``autoshard.core.collectives`` says which collectives each type runs (the ids'
all-to-all, the outputs', reduce-scatter, all-gather, all-reduce) and on which link tier;
``autoshard.core.communication`` prices them.
"""

from __future__ import annotations

import math
from enum import Enum

SCATTER_PRIME = 2_147_483_647
"""A prime above any physical row count: Zipf rank k lands on row (k x prime) mod R, which
scatters hot rows over the table as hashed ids do in production (a bijection modulo any smaller
row count)."""

_HOT_RANKS = 64


class ShardingType(str, Enum):
    """TorchRec's sharding types (``torchrec.distributed.types.ShardingType`` values)."""

    DATA_PARALLEL = "data_parallel"
    TABLE_WISE = "table_wise"
    COLUMN_WISE = "column_wise"
    ROW_WISE = "row_wise"
    TABLE_ROW_WISE = "table_row_wise"
    TABLE_COLUMN_WISE = "table_column_wise"
    GRID_SHARD = "grid_shard"

    @property
    def splits_rows(self) -> bool:
        return self in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)

    @property
    def within_host(self) -> bool:
        """Its shards stay on the devices of one host."""
        return self in (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD, ShardingType.TABLE_COLUMN_WISE)


def parse_sharding_types(names: object, field: str = "sharding_types") -> frozenset[ShardingType]:
    """TorchRec's sharding type names (a list, or one comma-separated string) as a set;
    ``InputError`` naming ``field`` and the valid names otherwise."""
    from autoshard.core.errors import InputError

    valid = ", ".join(t.value for t in ShardingType)
    items = names.split(",") if isinstance(names, str) else names
    if not isinstance(items, (list, tuple)) or not items:
        raise InputError(field, f"must list sharding types, got {names!r}", f"use some of: {valid}")
    found = set()
    for item in items:
        try:
            found.add(ShardingType(str(item).strip()))
        except ValueError:
            raise InputError(field, f"unknown sharding type {item!r}", f"use some of: {valid}") from None
    return frozenset(found)


def scattered_row(rank: int, rows: int) -> int:
    """The row that Zipf rank ``rank`` (0 = hottest) lands on among ``rows`` rows."""
    return (rank * SCATTER_PRIME) % rows


def row_blocks(rows: int, ways: int) -> tuple[tuple[int, int], ...]:
    """``(row_offset, rows)`` of each of ``ways`` row blocks, as TorchRec cuts them
    (``_calculate_rw_shard_sizes_and_offsets``): ceil(rows / ways) each, the last block the rest,
    and blocks of 0 rows past the end when ``rows`` is small."""
    block = math.ceil(rows / ways)
    out = []
    for j in range(ways):
        start = min(j * block, rows)
        out.append((start, min(block, rows - start)))
    return tuple(out)


def zipf_mass(rows: int, alpha: float, ranks: int) -> list[float]:
    """The probability of each of the ``ranks`` hottest ranks of a bounded Zipf(alpha) over
    ``rows`` rows (P(rank k) ~ (k + 1)^-alpha, the continuous law the microbenchmark samples)."""
    top = rows + 1.0

    def cdf(x: float) -> float:  # P(rank < x - 1), x in [1, rows + 1]
        if alpha < 1e-6:
            return (x - 1.0) / rows
        if abs(alpha - 1.0) < 1e-6:
            return math.log(x) / math.log(top)
        e = 1.0 - alpha
        return (x**e - 1.0) / (top**e - 1.0)

    return [cdf(k + 2.0) - cdf(k + 1.0) for k in range(min(ranks, rows))]


def row_block_shares(rows: int, alpha: float, blocks: tuple[tuple[int, int], ...]) -> tuple[float, ...]:
    """The share of a table's lookups each row block serves (see the module docstring)."""
    if alpha < 1e-6:
        return tuple(size / rows for _, size in blocks)
    hot = zipf_mass(rows, alpha, _HOT_RANKS)
    ends = [offset + size for offset, size in blocks]
    shares = [0.0] * len(blocks)
    cold = [size for _, size in blocks]  # each block's rows outside the hottest
    for rank, mass in enumerate(hot):
        block = next(j for j, end in enumerate(ends) if scattered_row(rank, rows) < end)
        shares[block] += mass
        cold[block] -= 1
    rest, cold_rows = 1.0 - sum(hot), sum(cold)
    for j in range(len(blocks)):
        shares[j] += rest * cold[j] / cold_rows if cold_rows > 0 else 0.0
    return tuple(shares)


__all__ = [
    "SCATTER_PRIME",
    "ShardingType",
    "parse_sharding_types",
    "row_block_shares",
    "row_blocks",
    "scattered_row",
    "zipf_mass",
]
