"""A workload's constraints as the planners apply them on a topology (``PlacementRules``), and
the check before planning that names constraints no plan can satisfy (``check_constraints``).

Every planner steps a ``PlacementState``, whose mask takes ``PlacementRules.mask``: a pinned
table only on its ranks; a co-located table on the device (or host) where its group already is;
a table kept apart from the devices holding another of its group; a table_column_wise table's
column blocks on the host of its first block. Local search and option
changes leave constrained tables where they were placed (their units are not movable), and a
table's sharding options are those its ``sharding_types`` allow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from autoshard.core.constraints import Apart, Colocate, Constraints, Pin, TableConstraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Topology, Workload
from autoshard.planners.feasibility import fmt_bytes
from autoshard.planners.sharding_options import ROW_TYPES, column_kind, must_spread, spread_options

if TYPE_CHECKING:
    from autoshard.planners.device_state import DeviceState


class PlacementRules:
    """``constraints`` on ``topology``: for each constrained table, the devices it may go to
    given where the others are."""

    def __init__(self, constraints: Constraints, topology: Topology) -> None:
        self.constraints, self.topology = constraints, topology
        self.pins: dict[str, np.ndarray] = {}
        self.together: dict[str, list[tuple[frozenset[str], bool]]] = {}  # table -> (group, host level)
        self.apart: dict[str, list[frozenset[str]]] = {}
        hosts = np.arange(topology.num_devices) // topology.local_world_size
        for c in constraints.placement:
            if isinstance(c, Pin):
                ranks = np.zeros(topology.num_devices, dtype=bool)
                if c.ranks:
                    ranks[[r for r in c.ranks if r < topology.num_devices]] = True
                else:
                    ranks[np.isin(hosts, c.hosts)] = True
                self.pins[c.table] = self.pins.get(c.table, np.ones_like(ranks)) & ranks
            elif isinstance(c, Colocate):
                for t in c.tables:
                    self.together.setdefault(t, []).append((frozenset(c.tables) - {t}, c.level == "host"))
            elif isinstance(c, Apart):
                for t in c.tables:
                    self.apart.setdefault(t, []).append(frozenset(c.tables) - {t})
        for name, own in constraints.tables:  # a table_column_wise table's blocks: on one host
            kinds = own.allowed_types(frozenset(ShardingType))
            if topology.num_hosts > 1 and column_kind(kinds) is ShardingType.TABLE_COLUMN_WISE:
                self.together.setdefault(name, []).append((frozenset({name}), True))
        self.hosts = hosts
        self.tables = frozenset(self.pins) | frozenset(self.together) | frozenset(self.apart)

    def __bool__(self) -> bool:
        return bool(self.tables)

    def mask(self, table: str, devices: Sequence[DeviceState]) -> np.ndarray:
        """The devices ``table`` may go to now (every device for an unconstrained table)."""
        ok = np.ones(len(devices), dtype=bool)
        if table not in self.tables:
            return ok
        if table in self.pins:
            ok &= self.pins[table]
        for group, host_level in self.together.get(table, ()):
            held = np.array([bool(group & d.parents) for d in devices])
            if held.any():
                ok &= np.isin(self.hosts, self.hosts[held]) if host_level else held
        for group in self.apart.get(table, ()):
            ok &= ~np.array([bool(group & d.parents) for d in devices])
        return ok

    def ranks_allowed(self, table: str, ranks: Sequence[int]) -> bool:
        """Whether a spread option on ``ranks`` keeps ``table``'s pin (spread tables are never
        co-located or kept apart: their options are not offered)."""
        pin = self.pins.get(table)
        return pin is None or bool(pin[list(ranks)].all())


def check_constraints(workload: Workload, topology: Topology, allowed: frozenset[ShardingType]) -> None:
    """Refuse, before planning, constraints no plan can satisfy: a pin past the topology
    (``InputError`` at the field); a pinned table larger than its devices, a device-level group
    larger than a device, a table that no allowed sharding type fits (``PlannerError``
    ``constraints_conflict`` naming the constraints, with numbered fixes)."""
    constraints = workload.constraints
    if not constraints:
        return
    tables = {t.name: t for t in workload.tables}
    largest = topology.device_memory_bytes
    for c in constraints.placement:
        if isinstance(c, Pin):
            bad = [r for r in c.ranks if r >= topology.num_devices] + [h for h in c.hosts if h >= topology.num_hosts]
            if bad:
                field, limit = ("ranks", topology.num_devices) if c.ranks else ("hosts", topology.num_hosts)
                raise InputError(
                    field, f"pin of {c.table!r} names {bad}, past the topology's {limit}", f"use {field} below {limit}"
                )
            rules = PlacementRules(Constraints(placement=(c,)), topology)
            room = max(topology.device_memory_bytes_of(int(r)) for r in np.flatnonzero(rules.pins[c.table]))
            kinds = constraints.allowed_types(c.table, allowed)
            pinned = int(rules.pins[c.table].sum())
            rows_split = bool(kinds & {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE}) and pinned > 1
            smallest = tables[c.table].memory_bytes / (pinned if rows_split else 1)
            if smallest > room:
                raise _conflict(
                    f"pin of {c.table!r} onto {pinned} device(s) of at most {fmt_bytes(room)}: the table needs "
                    f"{fmt_bytes(tables[c.table].memory_bytes)}",
                    ("pin it to more devices or hosts", "remove the pin", "allow row-wise sharding for it"),
                )
            if must_spread(kinds):
                table = tables[c.table]
                inside = [o for o in spread_options(table, topology, kinds) if rules.ranks_allowed(c.table, o.ranks)]
                if not inside:
                    raise _conflict(
                        f"pin of {c.table!r}: its sharding_types {sorted(t.value for t in kinds)} spread it beyond "
                        "the pinned devices",
                        (f"allow table_wise for {c.table!r}", "pin it to a whole host or every device"),
                    )
        if isinstance(c, (Colocate, Apart)):
            spread = [t for t in c.tables if must_spread(constraints.allowed_types(t, allowed))]
            if spread:
                kind = "colocate" if isinstance(c, Colocate) else "apart"
                raise _conflict(
                    f"{kind} {list(c.tables)}: the sharding_types of {spread[0]!r} spread it over several devices",
                    (f"allow table_wise for {spread[0]!r}", f"take {spread[0]!r} out of the group"),
                )
            too_big = [t for t in c.tables if tables[t].memory_bytes > largest]
            if too_big:
                kind, need = "colocate" if isinstance(c, Colocate) else "apart", tables[too_big[0]].memory_bytes
                raise _conflict(
                    f"{kind} {list(c.tables)}: {too_big[0]!r} fits no device whole ({fmt_bytes(need)} > "
                    f"{fmt_bytes(largest)}), and a split table cannot be placed by the group",
                    (f"take {too_big[0]!r} out of the group", "use devices with more memory"),
                )
        if isinstance(c, Colocate) and c.level == "device":
            need = sum(tables[t].memory_bytes for t in c.tables)
            if need > largest:
                raise _conflict(
                    f"colocate {list(c.tables)} on one device: together they need {fmt_bytes(need)}, "
                    f"more than the largest device's {fmt_bytes(largest)}",
                    ('co-locate them on one host instead ("level": "host")', "co-locate fewer tables"),
                )
    for name, own in constraints.tables:
        _check_table(tables[name], own, constraints.allowed_types(name, allowed), allowed, topology)


def _check_table(
    table: Table,
    own: TableConstraints,
    kinds: frozenset[ShardingType],
    allowed: frozenset[ShardingType],
    topology: Topology,
) -> None:
    """Refuse one table's ``sharding_types``, ``compute_kernels`` and ``min_partition`` when no
    plan can satisfy them: no type left, or no allowed type whose smallest shards fit a device."""
    name, largest = table.name, topology.device_memory_bytes
    if not kinds:
        kernels = f" with compute_kernels {list(own.compute_kernels)}" if own.compute_kernels is not None else ""
        raise _conflict(
            f"sharding_types of {name!r}{kernels} leave no type among those allowed "
            f"({sorted(t.value for t in allowed)}): data_parallel runs on the 'dense' kernel, the others on 'fused'",
            ("allow one of the table's sharding types", "add the kernel its types need to compute_kernels"),
            "constraints",
        )
    if table.memory_bytes <= largest or kinds & ROW_TYPES:
        return  # whole on a device, or row blocks as small as the devices need
    narrowest = column_block_bytes(table, kinds, own.min_partition, topology)
    if narrowest is not None and narrowest <= largest:
        return
    if narrowest is not None:
        raise _conflict(
            f"min_partition {own.min_partition} of {name!r} ({table.embedding_dim} columns): its narrowest column "
            f"blocks need {fmt_bytes(narrowest)}, a device holds {fmt_bytes(largest)}",
            ("lower min_partition", "allow row_wise or table_row_wise for it", "use devices with more memory"),
            "constraints",
        )
    raise _conflict(
        f"sharding_types {sorted(t.value for t in kinds)} of {name!r} cannot fit it: it needs "
        f"{fmt_bytes(table.memory_bytes)}, a device holds {fmt_bytes(largest)}",
        ("allow row_wise, table_row_wise or column_wise for it", "use devices with more memory"),
        "constraints",
    )


def column_block_bytes(
    table: Table, kinds: frozenset[ShardingType], min_partition: int | None, topology: Topology
) -> int | None:
    """The memory of ``table``'s widest block when cut column-wise into as many blocks as its
    ``kinds`` and ``min_partition`` allow (column_wise: one a device; table_column_wise: one a
    device of a host); ``None`` when it may not be cut column-wise."""
    if ShardingType.COLUMN_WISE in kinds:
        devices = topology.num_devices
    elif ShardingType.TABLE_COLUMN_WISE in kinds:
        devices = topology.local_world_size
    else:
        return None
    dim = table.embedding_dim
    ways = max(1, min(devices, dim // max(1, min_partition or 1)))
    return table.memory_bytes * math.ceil(dim / ways) // dim


class ConstraintsConflict(PlannerError):
    """No plan satisfies the workload's constraints; ``field``: the workload file's field that
    holds the constraint in conflict (``placement`` or ``constraints``)."""

    def __init__(self, what: str, fixes: tuple[str, ...], field: str) -> None:
        super().__init__(PlannerErrorKind.CONSTRAINTS_CONFLICT, f"the constraints conflict: {what}", fixes)
        self.field = field


def _conflict(what: str, fixes: tuple[str, ...], field: str = "placement") -> ConstraintsConflict:
    return ConstraintsConflict(what, fixes, field)
