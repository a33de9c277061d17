"""A plan's shards read back from their labels (``TableShard.label``): ``name`` (whole),
``name[a:b]`` (columns), ``name[ra:rb]`` and ``name[ra:rb,a:b]`` (row blocks), ``name[dp]`` (a
replica), as reports and plan files list each device's tables.

A label does not name its row sharding type; the plan's other labels do: a table whose blocks
have column ranges is ``grid_shard``; one whose blocks sit on one host of several is
``table_row_wise``; otherwise ``row_wise``. Each block's lookup share is priced from the table's
blocks as ``row_block_shares`` prices them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from autoshard.core.sharding import ShardingType, row_block_shares
from autoshard.core.types import Table, TableShard, replica

_LABEL = re.compile(
    r"^(?P<table>.+)\[(?:(?P<dp>dp)|r(?P<r0>\d+):(?P<r1>\d+)(?:,(?P<c0>\d+):(?P<c1>\d+))?|(?P<a>\d+):(?P<b>\d+))\]$"
)


def plan_shards(
    devices: Sequence[Sequence[str]], tables: dict[str, Table], local_world_size: int | None = None
) -> list[tuple[TableShard, ...]]:
    """Each device's shards from its labels (one host of every device without ``local_world_size``).
    ``KeyError`` names a label that is no table's nor a shard of one."""
    world = len(devices)
    local = local_world_size or world
    parsed: list[list[tuple[str, re.Match[str] | None]]] = []
    blocks: dict[str, list[tuple[int, int, int, int | None, int | None]]] = {}  # name -> (rank, r0, r1, c0, c1)
    for rank, names in enumerate(devices):
        row: list[tuple[str, re.Match[str] | None]] = []
        for name in names:
            if name in tables:
                row.append((name, None))
                continue
            found = _LABEL.match(name)
            if found is None or found["table"] not in tables:
                raise KeyError(name)
            if found["r0"] is not None:
                c0 = None if found["c0"] is None else int(found["c0"])
                c1 = None if found["c1"] is None else int(found["c1"])
                blocks.setdefault(found["table"], []).append((rank, int(found["r0"]), int(found["r1"]), c0, c1))
            row.append((found["table"], found))
        parsed.append(row)
    shares = {name: _shares(tables[name], found, local, world) for name, found in blocks.items()}
    out = []
    for rank, row in enumerate(parsed):
        shards = []
        for name, found in row:
            table = tables[name]
            if found is None:
                shards.append(TableShard(table))
            elif found["dp"]:
                shards.append(replica(table, world))
            elif found["a"] is not None:
                shards.append(TableShard(table, int(found["a"]), int(found["b"]) - int(found["a"])))
            else:
                shards.append(shares[name][(rank, int(found["r0"]), found["c0"])])
        out.append(tuple(shards))
    return out


def _shares(
    table: Table, blocks: list[tuple[int, int, int, int | None, int | None]], local: int, world: int
) -> dict[tuple[int, int, str | None], TableShard]:
    """Each row block of ``table`` (rank, first row, first column as labelled) as its shard."""
    if any(c0 is not None for *_, c0, _ in blocks):
        kind = ShardingType.GRID_SHARD
    elif len({rank // local for rank, *_ in blocks}) == 1 and local < world:
        kind = ShardingType.TABLE_ROW_WISE
    else:
        kind = ShardingType.ROW_WISE
    out: dict[tuple[int, int, str | None], TableShard] = {}
    for c0, c1 in sorted({(c0, c1) for *_, c0, c1 in blocks}, key=lambda c: c[0] or 0):
        mine = sorted((r0, r1, rank) for rank, r0, r1, b0, _ in blocks if b0 == c0)
        shares = row_block_shares(table.num_embeddings, table.zipf_alpha, tuple((r0, r1 - r0) for r0, r1, _ in mine))
        width = None if c0 is None or c1 is None else c1 - c0
        for (r0, r1, rank), share in zip(mine, shares):
            shard = TableShard(table, c0 or 0, width, r0, r1 - r0, kind, share)
            out[(rank, r0, None if c0 is None else str(c0))] = shard
    return out
