"""What users constrain: per table, TorchRec's ``ParameterConstraints`` fields; and placement
constraints across tables (pin, co-locate, keep apart).

In a workload file::

    "constraints": {"user_id": {"sharding_types": ["row_wise", "table_row_wise"],
                                "pooling_factors": [12.0]}},
    "placement": [{"pin": {"table": "item_id", "ranks": [0, 1]}},
                  {"colocate": ["a", "b"]},
                  {"colocate": ["c", "d"], "level": "host"},
                  {"apart": ["e", "f"]}]

- ``sharding_types``: the types the table may take (TorchRec's names).
- ``compute_kernels``: TorchRec's kernels AutoShard plans: ``fused`` (weights in device memory),
  ``fused_uvm_caching`` (in host memory, cached in device memory) and ``fused_uvm`` (in host
  memory) for every sharded type, ``dense`` for ``data_parallel`` (the kernel TorchRec's sharders
  give data parallel). A table whose kernels leave out ``dense`` is not placed data parallel, and
  one with none of the others only data parallel; any other kernel (``key_value``, the virtual
  tables) is refused. The UVM kernels are chosen under TorchRec's cost model on ``cuda`` only
  (``--model torchrec``; its CPU sharder offers ``fused`` alone, and the learned profiles measured
  ``fused`` alone): elsewhere a table limited to them is refused when planned.
- ``cache_params``: ``{"load_factor": x}``, the share of a ``fused_uvm_caching`` table cached in
  device memory (TorchRec's ``CacheParams``; default 0.2).
- ``min_partition``: the narrowest column shard the table may be cut into.
- ``pooling_factors`` / ``num_poolings`` / ``batch_sizes`` / ``is_weighted`` / ``feature_names``:
  as TorchRec reads them. The table's pooling factor becomes TorchRec's lookups per iteration
  over the workload's batch (``pooling_factor_of``), replacing the table's own.
- ``pin``: the table's shards only on these ``ranks`` (or the devices of these ``hosts``).
- ``colocate``: the tables on one device (``"level": "host"``: one host).
- ``apart``: no two of the tables share a device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType, parse_sharding_types
from autoshard.core.values import is_int, is_number

FUSED, DENSE = "fused", "dense"
FUSED_UVM_CACHING, FUSED_UVM = "fused_uvm_caching", "fused_uvm"
SHARDED_KERNELS = (FUSED, FUSED_UVM_CACHING, FUSED_UVM)
"""The kernels of a sharded (not data-parallel) table, as ``autoshard.core.types.TABLE_KERNELS``."""
KERNELS = (FUSED, DENSE, FUSED_UVM_CACHING, FUSED_UVM)
"""TorchRec's compute kernels (``EmbeddingComputeKernel`` values) AutoShard plans (``fused`` and
``dense`` first: the kernels every device and cost model offers)."""
_TABLE_FIELDS = (
    "sharding_types",
    "compute_kernels",
    "cache_params",
    "min_partition",
    "pooling_factors",
    "num_poolings",
    "batch_sizes",
    "is_weighted",
    "feature_names",
)


@dataclass(frozen=True, slots=True)
class TableConstraints:
    """TorchRec's ``ParameterConstraints`` of one table (``None``: not constrained)."""

    sharding_types: frozenset[ShardingType] | None = None
    compute_kernels: tuple[str, ...] | None = None
    min_partition: int | None = None
    pooling_factors: tuple[float, ...] | None = None
    num_poolings: tuple[float, ...] | None = None
    batch_sizes: tuple[int, ...] | None = None
    is_weighted: bool = False
    feature_names: tuple[str, ...] | None = None
    cache_load_factor: float | None = None  # TorchRec's CacheParams.load_factor

    @property
    def sharded_kernels(self) -> tuple[str, ...]:
        """The kernels the table may run sharded (``SHARDED_KERNELS`` when not constrained)."""
        if self.compute_kernels is None:
            return SHARDED_KERNELS
        return tuple(k for k in SHARDED_KERNELS if k in self.compute_kernels)

    def pooling_factor(self, batch_size: int) -> float | None:
        """The table's pooling factor from ``pooling_factors`` (``None`` if not given):
        ``pooling_factor_of`` at the workload's ``batch_size``."""
        if not self.pooling_factors:
            return None
        return pooling_factor_of(self.pooling_factors, self.num_poolings, self.batch_sizes, batch_size)

    def allowed_types(self, default: frozenset[ShardingType]) -> frozenset[ShardingType]:
        """The types this table may take within ``default``: its ``sharding_types``, less
        ``data_parallel`` when its ``compute_kernels`` leave out ``dense`` and the sharded types
        when they list no sharded kernel (``SHARDED_KERNELS``)."""
        kinds = default if self.sharding_types is None else default & self.sharding_types
        if self.compute_kernels is not None:
            if DENSE not in self.compute_kernels:
                kinds -= {ShardingType.DATA_PARALLEL}
            if not self.sharded_kernels:
                kinds &= {ShardingType.DATA_PARALLEL}
        return kinds


def pooling_factor_of(
    pooling_factors: Sequence[float],
    num_poolings: Sequence[float] | None,
    batch_sizes: Sequence[int] | None,
    batch_size: int,
) -> float:
    """A table's lookups per sample, as TorchRec's planner counts them: its features' lookups
    per iteration, sum over features of ``pooling_factor x num_poolings x batch_size``
    (``shard_estimators``' ``batch_inputs``; ``num_poolings`` default 1, ``batch_sizes`` the
    workload's), over the workload's ``batch_size``. With one feature, its pooling factor; with
    several, their sum (TorchRec's stats print this sum as the table's pooling factor): every
    feature's lookups go to the one table. ``InputError`` when the lists differ in length."""
    count = len(pooling_factors)
    polls = list(num_poolings) if num_poolings else [1.0] * count
    batches = list(batch_sizes) if batch_sizes else [batch_size] * count
    if not count == len(polls) == len(batches):
        raise InputError(
            "pooling_factors",
            f"lists {count} features, num_poolings {len(polls)}, batch_sizes {len(batches)}",
            "give one entry per feature in each (TorchRec's rule)",
        )
    lookups = sum(float(f) * float(p) * float(b) for f, p, b in zip(pooling_factors, polls, batches))
    if not lookups > 0:
        raise InputError("pooling_factors", f"give no lookups ({list(pooling_factors)})", "give values > 0")
    return lookups / batch_size


@dataclass(frozen=True, slots=True)
class Pin:
    table: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Colocate:
    tables: tuple[str, ...]
    level: str = "device"  # or "host"


@dataclass(frozen=True, slots=True)
class Apart:
    tables: tuple[str, ...]


PlacementConstraint = Pin | Colocate | Apart


@dataclass(frozen=True, slots=True)
class Constraints:
    """A workload's constraints: per table name, and placement constraints in the file's order."""

    tables: tuple[tuple[str, TableConstraints], ...] = ()
    placement: tuple[PlacementConstraint, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(self.tables or self.placement)

    def of(self, table: str) -> TableConstraints | None:
        return dict(self.tables).get(table)

    def allowed_types(self, table: str, default: frozenset[ShardingType]) -> frozenset[ShardingType]:
        """The sharding types ``table`` may take: its own constraint (types and kernels,
        ``TableConstraints.allowed_types``) within ``default``."""
        own = self.of(table)
        return default if own is None else own.allowed_types(default)

    @property
    def placed_tables(self) -> frozenset[str]:
        """Tables under a placement constraint."""
        names: set[str] = set()
        for c in self.placement:
            names.update((c.table,) if isinstance(c, Pin) else c.tables)
        return frozenset(names)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tables:
            out["constraints"] = {name: _table_to_dict(c) for name, c in self.tables}
        if self.placement:
            out["placement"] = [_placement_to_dict(c) for c in self.placement]
        return out


def constraints_from_dict(raw_tables: Any, raw_placement: Any, names: set[str]) -> Constraints:
    """The file's ``constraints`` and ``placement`` (either may be None); ``InputError`` naming the
    field for anything else, a table that is not the workload's included."""
    tables: list[tuple[str, TableConstraints]] = []
    if raw_tables is not None:
        if not isinstance(raw_tables, dict):
            raise InputError("constraints", "must be an object of table name -> ParameterConstraints fields")
        for name, raw in raw_tables.items():
            _known(name, names, f"constraints.{name}")
            try:
                tables.append((name, _table_from_dict(raw)))
            except InputError as error:
                raise error.located(f"constraints.{name}") from None
    placement: list[PlacementConstraint] = []
    if raw_placement is not None:
        if not isinstance(raw_placement, list):
            raise InputError("placement", "must be a list of pin, colocate and apart constraints")
        for i, raw in enumerate(raw_placement):
            try:
                placement.append(_placement_from_dict(raw, names))
            except InputError as error:
                raise error.located(f"placement[{i}]") from None
    return Constraints(tuple(tables), tuple(placement))


def _known(name: str, names: set[str], where: str) -> None:
    if name not in names:
        raise InputError("table", f"{name!r} is not a table of the workload", "name one of its tables", where)


def _numbers(value: Any, name: str, integer: bool = False) -> tuple:
    ok = is_int if integer else is_number
    if not isinstance(value, list) or not value or not all(ok(v) and v > 0 for v in value):
        kind = "integers" if integer else "numbers"
        example = f"e.g. [{2 if integer else 1.5}]"
        raise InputError(name, f"must be a non-empty list of {kind} > 0, got {value!r}", example)
    return tuple(value)


def _table_from_dict(raw: Any) -> TableConstraints:
    if not isinstance(raw, dict):
        raise InputError("constraints", f"must be an object of ParameterConstraints fields, got {raw!r}")
    for key in raw:
        if key not in _TABLE_FIELDS:
            raise InputError(str(key), "unknown field", f"use one of {', '.join(_TABLE_FIELDS)}")
    kernels = raw.get("compute_kernels")
    if kernels is not None:
        if not isinstance(kernels, list) or not kernels or any(k not in KERNELS for k in kernels):
            raise InputError(
                "compute_kernels",
                f"must list some of {list(KERNELS)}, got {kernels!r}",
                "AutoShard plans TorchRec's fused, fused_uvm_caching and fused_uvm kernels (dense for data "
                "parallel), not key_value or the virtual tables: list some of those, or leave it out",
            )
    load_factor = _cache_load_factor(raw.get("cache_params"), kernels)
    min_partition = raw.get("min_partition")
    if min_partition is not None and not (is_int(min_partition) and min_partition >= 1):
        raise InputError("min_partition", f"must be an integer >= 1, got {min_partition!r}", "e.g. 32")
    weighted = raw.get("is_weighted", False)
    if not isinstance(weighted, bool):
        raise InputError("is_weighted", f"must be true or false, got {weighted!r}")
    features = raw.get("feature_names")
    if features is not None and (not isinstance(features, list) or not all(isinstance(f, str) for f in features)):
        raise InputError("feature_names", f"must be a list of strings, got {features!r}")
    pooling = _numbers(raw["pooling_factors"], "pooling_factors") if "pooling_factors" in raw else None
    poolings = _numbers(raw["num_poolings"], "num_poolings") if "num_poolings" in raw else None
    if pooling and poolings and len(pooling) != len(poolings):
        raise InputError("num_poolings", "must have one entry per pooling factor", "match pooling_factors' length")
    return TableConstraints(
        parse_sharding_types(raw["sharding_types"]) if "sharding_types" in raw else None,
        tuple(kernels) if kernels is not None else None,
        min_partition,
        pooling,
        poolings,
        _numbers(raw["batch_sizes"], "batch_sizes", integer=True) if "batch_sizes" in raw else None,
        weighted,
        tuple(features) if features is not None else None,
        load_factor,
    )


def _cache_load_factor(raw: Any, kernels: list[str] | None) -> float | None:
    """``cache_params``' load factor (``None`` when not given); ``InputError`` for another field,
    a factor outside (0, 1], or kernels that leave out ``fused_uvm_caching``."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"load_factor"}:
        raise InputError(
            "cache_params",
            f"must be an object with load_factor (TorchRec's CacheParams), got {raw!r}",
            'e.g. {"load_factor": 0.2}',
        )
    factor = raw.get("load_factor")
    if factor is None:
        return None
    if not (is_number(factor) and 0 < factor <= 1):
        raise InputError(
            "cache_params.load_factor",
            f"must be a number in (0, 1], got {factor!r}",
            "use the share of the table cached in device memory (TorchRec's default: 0.2)",
        )
    if kernels is not None and FUSED_UVM_CACHING not in kernels:
        raise InputError(
            "cache_params",
            f"sets a cache, but compute_kernels {kernels!r} leave out fused_uvm_caching",
            "add fused_uvm_caching to compute_kernels, or leave cache_params out",
        )
    return float(factor)


def _placement_from_dict(raw: Any, names: set[str]) -> PlacementConstraint:
    if not isinstance(raw, dict) or len({"pin", "colocate", "apart"} & raw.keys()) != 1:
        raise InputError("placement", f"must be one of pin, colocate or apart, got {raw!r}", '{"apart": ["a", "b"]}')
    if "pin" in raw:
        pin = raw["pin"]
        if not isinstance(pin, dict) or not isinstance(pin.get("table"), str):
            raise InputError("pin", "must name a table and its ranks or hosts", '{"pin": {"table": "t", "ranks": [0]}}')
        _known(pin["table"], names, "pin")
        if ("ranks" in pin) == ("hosts" in pin):
            raise InputError("pin", "must give ranks or hosts (one of them)", '{"pin": {"table": "t", "hosts": [0]}}')
        key = "ranks" if "ranks" in pin else "hosts"
        values = pin[key]
        if not isinstance(values, list) or not values or not all(is_int(v) and v >= 0 for v in values):
            raise InputError(key, f"must be a non-empty list of integers >= 0, got {values!r}", "e.g. [0, 1]")
        return Pin(pin["table"], tuple(values) if key == "ranks" else (), tuple(values) if key == "hosts" else ())
    key = "colocate" if "colocate" in raw else "apart"
    group = raw[key]
    if not isinstance(group, list) or len(group) < 2 or not all(isinstance(t, str) for t in group):
        raise InputError(key, f"must list at least two table names, got {group!r}", f'{{"{key}": ["a", "b"]}}')
    for name in group:
        _known(name, names, key)
    if key == "apart":
        return Apart(tuple(group))
    level = raw.get("level", "device")
    if level not in ("device", "host"):
        raise InputError("level", f"must be 'device' or 'host', got {level!r}", 'use "level": "host" for one host')
    return Colocate(tuple(group), level)


def _table_to_dict(c: TableConstraints) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.sharding_types is not None:
        out["sharding_types"] = sorted(t.value for t in c.sharding_types)
    for name in ("compute_kernels", "pooling_factors", "num_poolings", "batch_sizes", "feature_names"):
        value = getattr(c, name)
        if value is not None:
            out[name] = list(value)
    if c.min_partition is not None:
        out["min_partition"] = c.min_partition
    if c.is_weighted:
        out["is_weighted"] = True
    if c.cache_load_factor is not None:
        out["cache_params"] = {"load_factor": c.cache_load_factor}
    return out


def _placement_to_dict(c: PlacementConstraint) -> dict[str, Any]:
    if isinstance(c, Pin):
        return {"pin": {"table": c.table, **({"ranks": list(c.ranks)} if c.ranks else {"hosts": list(c.hosts)})}}
    if isinstance(c, Colocate):
        return {"colocate": list(c.tables), **({"level": c.level} if c.level != "device" else {})}
    return {"apart": list(c.tables)}


def mapping_of(constraints: Constraints) -> Mapping[str, TableConstraints]:
    return dict(constraints.tables)
