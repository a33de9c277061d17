"""The workload's constraints as re-planning applies them (``incremental.replans``).

Re-planning keeps the current placement's shards (``current_placement``: a spread table's where
its constraints still allow its type) and places the other tables whole or as column blocks, so
it honours a table's constraints this way: a table to place whose ``sharding_types`` allow none of
table_wise, column_wise and table_column_wise is refused by name (``check_replannable``: plan it
from scratch); a table whose current shards its constraints no longer allow (column blocks where
it allows no column type, or narrower than its ``min_partition``) is placed anew, as a replaced
table (``keeps``); a whole table whose
constraints leave out table_wise is one column block, and column blocks of a table that allows
table_column_wise and not column_wise are table_column_wise (``shard_of``, as ``placed_kind``
and ``column_kind`` say for every planner); placement constraints (pin, colocate, apart) and
the table_column_wise host rule hold through ``PlacementRules``, and pinned tables' shards stay
where the current placement has them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from autoshard.core.constraints import Constraints
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, TableShard, Topology, Workload
from autoshard.planners.placement_rules import ConstraintsConflict, check_constraints
from autoshard.planners.sharding_options import ALL_TYPES, COLUMN_TYPES, PLACED_TYPES, column_kind, placed_kind


def check_replannable(workload: Workload, topology: Topology, kept: Collection[str] = ()) -> None:
    """``ConstraintsConflict`` for constraints no plan satisfies (``check_constraints``), and for
    a table to place (not in ``kept``) whose sharding types re-planning does not place (none of
    ``PLACED_TYPES``)."""
    check_constraints(workload, topology, ALL_TYPES)
    for name, _ in workload.constraints.tables:
        kinds = workload.constraints.allowed_types(name, ALL_TYPES)
        if name not in kept and not kinds & PLACED_TYPES:
            raise ConstraintsConflict(
                f"sharding_types {sorted(k.value for k in kinds)} of {name!r}: re-planning places a table "
                "the current plan does not hold in a form it keeps table-, column- or table-column-wise only",
                (
                    "plan it from scratch (`autoshard plan`), which places every sharding type",
                    f"allow table_wise or column_wise for {name!r}",
                ),
                "constraints",
            )


def keeps(table: Table, columns: Sequence[int], constraints: Constraints) -> bool:
    """Whether ``table``'s current shards (their widths, ``columns``) are a form its constraints
    allow: one whole shard under a placed type; column blocks under a column type, none narrower
    than its ``min_partition``."""
    own = constraints.of(table.name)
    if own is None:
        return True
    kinds = own.allowed_types(ALL_TYPES)
    if len(columns) == 1:
        return bool(kinds & PLACED_TYPES)
    return bool(kinds & COLUMN_TYPES) and (own.min_partition is None or min(columns) >= own.min_partition)


def shard_of(table: Table, column_offset: int, columns: int, kinds: frozenset[ShardingType]) -> TableShard:
    """The shard of ``table``'s columns ``[column_offset, +columns)`` under the types ``kinds``
    allow: a whole table table_wise, else one column block (``placed_kind``); a column block
    column_wise, or table_column_wise where only that is allowed (``column_kind``)."""
    if columns == table.embedding_dim:
        return TableShard(table, sharding=placed_kind(kinds))
    kind = ShardingType.TABLE_COLUMN_WISE if column_kind(kinds) is ShardingType.TABLE_COLUMN_WISE else None
    return TableShard(table, column_offset, columns, sharding=kind)


__all__ = ["check_replannable", "keeps", "shard_of"]
