"""The product's frozen data types and the two small interfaces every part speaks.

Units: memory in bytes, costs in milliseconds per training iteration (forward + backward + update).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from autoshard.core.errors import InputError

if TYPE_CHECKING:
    from autoshard.core.costing import Accumulator, Edits, EditScorer

MAX_ZIPF_ALPHA = 3.0
GIB = 1024**3
MAX_ROWS, MAX_DIM, MAX_POOLING, MAX_BATCH = 10**12, 65_536, 10**6, 2**31 - 1
MAX_DEVICES, MAX_DEVICE_GB = 4_096, 10**6
"""Beyond any model or cluster, and small enough that every memory total the planners keep in
int64 arrays holds (4,096 devices x 10^6 GiB < 2^63 bytes): a larger value is an input error,
not an overflow (or, for the device count, every core's memory)."""


class Optimizer(str, Enum):
    """The embedding optimizer; it decides the optimizer state kept next to the weights."""

    SGD = "sgd"
    ROWWISE_ADAGRAD = "rowwise_adagrad"
    ADAGRAD = "adagrad"

    def state_bytes(self, rows: int, dim: int) -> int:
        """Bytes of optimizer state for a rows x dim table (fp32 state)."""
        if self is Optimizer.ROWWISE_ADAGRAD:
            return rows * 4
        if self is Optimizer.ADAGRAD:
            return rows * dim * 4
        return 0


_ZIPF_RANGE = f"must be in [0, {MAX_ZIPF_ALPHA}], got {{value!r}}"
_OPTIMIZERS = f"must be one of {[o.value for o in Optimizer]}, got {{value!r}}"


def _require(ok: bool, field_name: str, message: str, fix: str, value: object = None) -> None:
    """Raise ``InputError`` unless ``ok``; ``message`` may name ``{value!r}`` (formatted only
    then: a workload of thousands of tables is checked field by field on every request)."""
    if not ok:
        raise InputError(field_name, message.format(value=value), fix)


def _require_at_most(value: float, limit: float, field_name: str, fix: str) -> None:
    if not value <= limit:
        raise InputError(field_name, f"must be at most {limit:,}, got {value!r}", fix)


@dataclass(frozen=True, slots=True)
class Table:
    """An embedding table as the cost depends on it.

    ``zipf_alpha`` is the access skew: indices follow a bounded Zipf law over the rows
    (0 = uniform, the default; 1 ~ typical production skew; at most 3).
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    pooling_factor: float = 1.0
    zipf_alpha: float = 0.0
    bytes_per_element: int = 4
    optimizer: Optimizer = Optimizer.SGD

    def __post_init__(self) -> None:
        _require(
            isinstance(self.name, str) and bool(self.name.strip()),
            "name",
            "must be a non-empty string",
            "give every table a unique name",
        )
        _require(
            is_int(self.num_embeddings) and self.num_embeddings >= 1,
            "num_embeddings",
            "must be an integer >= 1, got {value!r}",
            "set the table's row count",
            self.num_embeddings,
        )
        _require_at_most(self.num_embeddings, MAX_ROWS, "num_embeddings", "set the table's row count")
        _require(
            is_int(self.embedding_dim) and self.embedding_dim >= 1,
            "embedding_dim",
            "must be an integer >= 1, got {value!r}",
            "set the embedding dimension",
            self.embedding_dim,
        )
        _require_at_most(self.embedding_dim, MAX_DIM, "embedding_dim", "set the embedding dimension")
        _require(
            is_number(self.pooling_factor) and self.pooling_factor > 0,
            "pooling_factor",
            "must be a number > 0, got {value!r}",
            "use the mean number of lookups per sample (1 for one-hot features)",
            self.pooling_factor,
        )
        _require_at_most(
            self.pooling_factor,
            MAX_POOLING,
            "pooling_factor",
            "use the mean number of lookups per sample (1 for one-hot features)",
        )
        _require(
            is_number(self.zipf_alpha) and 0 <= self.zipf_alpha <= MAX_ZIPF_ALPHA,
            "zipf_alpha",
            _ZIPF_RANGE,
            "use 0 for uniform access, about 1 for production-like skew",
            self.zipf_alpha,
        )
        _require(
            is_int(self.bytes_per_element) and self.bytes_per_element in (1, 2, 4, 8),
            "bytes_per_element",
            "must be 1, 2, 4 or 8, got {value!r}",
            "use 4 for fp32, 2 for fp16",
            self.bytes_per_element,
        )
        _require(
            isinstance(self.optimizer, Optimizer),
            "optimizer",
            _OPTIMIZERS,
            "pick a supported optimizer",
            self.optimizer,
        )

    def __hash__(self) -> int:
        # Every field but the optimizer (an Enum hashes in Python, and these loops are hot):
        # caches keyed by table live as long as a server, and users name their tables alike
        # from one workload to the next ("t0", "C1"); hashed by name alone, every table of that
        # name ever cached collided, and planning slowed with each distinct workload served.
        return hash(
            (
                self.name,
                self.num_embeddings,
                self.embedding_dim,
                self.pooling_factor,
                self.zipf_alpha,
                self.bytes_per_element,
            )
        )

    @property
    def weight_bytes(self) -> int:
        return self.num_embeddings * self.embedding_dim * self.bytes_per_element

    @property
    def memory_bytes(self) -> int:
        """Weights plus optimizer state: what the table occupies on a device."""
        return self.weight_bytes + self.optimizer.state_bytes(self.num_embeddings, self.embedding_dim)


@dataclass(frozen=True, slots=True)
class Workload:
    """The tables of a model and the per-iteration batch size every device processes."""

    tables: tuple[Table, ...]
    batch_size: int = 2048
    name: str = "workload"

    def __post_init__(self) -> None:
        _require(len(self.tables) >= 1, "tables", "must hold at least one table", "add tables")
        _require(
            is_int(self.batch_size) and self.batch_size >= 1,
            "batch_size",
            "must be an integer >= 1, got {value!r}",
            "set the per-iteration batch size",
            self.batch_size,
        )
        _require_at_most(self.batch_size, MAX_BATCH, "batch_size", "set the per-iteration batch size")
        seen: set[str] = set()
        for i, table in enumerate(self.tables):
            if table.name in seen:
                raise InputError(
                    "name", f"duplicate table name {table.name!r}", "table names must be unique", where=f"tables[{i}]"
                )
            seen.add(table.name)

    @property
    def memory_bytes(self) -> int:
        return sum(t.memory_bytes for t in self.tables)


@dataclass(frozen=True, slots=True)
class Topology:
    """Identical devices: how many, and the memory each offers to embedding tables."""

    num_devices: int
    device_memory_gb: float

    def __post_init__(self) -> None:
        _require(
            is_int(self.num_devices) and self.num_devices >= 1,
            "num_devices",
            "must be an integer >= 1, got {value!r}",
            "set the number of devices",
            self.num_devices,
        )
        _require_at_most(self.num_devices, MAX_DEVICES, "num_devices", "set the number of devices")
        _require(
            is_number(self.device_memory_gb) and self.device_memory_gb > 0,
            "device_memory_gb",
            "must be a number > 0, got {value!r}",
            "set the memory per device available to embeddings, in GiB",
            self.device_memory_gb,
        )
        _require_at_most(
            self.device_memory_gb,
            MAX_DEVICE_GB,
            "device_memory_gb",
            "set the memory per device available to embeddings, in GiB",
        )

    @property
    def device_memory_bytes(self) -> int:
        return int(self.device_memory_gb * GIB)


@dataclass(frozen=True, slots=True)
class TableShard:
    """A table, or a column-wise slice ``[column_offset, column_offset + columns)`` of it."""

    table: Table
    column_offset: int = 0
    columns: int | None = None

    @property
    def width(self) -> int:
        return self.table.embedding_dim if self.columns is None else self.columns

    @property
    def as_table(self) -> Table:
        """The shard as a table of its own, which is what a device's cost depends on."""
        if self.width == self.table.embedding_dim:
            return self.table
        return Table(
            f"{self.table.name}[{self.column_offset}:{self.column_offset + self.width}]",
            self.table.num_embeddings,
            self.width,
            self.table.pooling_factor,
            self.table.zipf_alpha,
            self.table.bytes_per_element,
            self.table.optimizer,
        )

    @property
    def memory_bytes(self) -> int:
        return self.as_table.memory_bytes


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """What one device holds, and its predicted cost."""

    shards: tuple[TableShard, ...]
    cost_ms: float

    @property
    def memory_bytes(self) -> int:
        return sum(s.memory_bytes for s in self.shards)

    @property
    def set_key(self) -> tuple:
        """What the device runs, as a comparable key: its shards (table, first column, columns) in
        any order. Two devices with one key run alike, whatever plan or index they have."""
        return tuple(sorted((s.table.name, s.column_offset, s.width) for s in self.shards))


@dataclass(frozen=True, slots=True)
class ShardingPlan:
    """A placement of a workload onto a topology; every planner returns one."""

    planner: str
    devices: tuple[DevicePlan, ...]
    plan_time_s: float = 0.0
    own_estimate_ms: tuple[float, ...] = ()  # the planner's own per-device estimate, if it has one
    partial: bool = False  # its time budget ran out: the best plan found by then, not its full search
    reused_s: float = 0.0  # planning time of placements taken from planners before it (planners.task_cache)

    @property
    def max_cost_ms(self) -> float:
        return max(d.cost_ms for d in self.devices)

    @property
    def imbalance(self) -> float:
        """max / mean device cost - 1 (0 = perfectly balanced)."""
        mean = sum(d.cost_ms for d in self.devices) / len(self.devices)
        return self.max_cost_ms / mean - 1.0 if mean > 0 else 0.0


@dataclass(frozen=True, slots=True)
class DeviceSet:
    """One device of one plan, as a set to measure: which (task, planner, device) it is, its
    tables (shards as tables), the batch size it runs at."""

    member: tuple[str, str, int]
    tables: tuple[Table, ...]
    batch_size: int


@dataclass(frozen=True, slots=True)
class MeasuredDeviceSet:
    """A ``DeviceSet`` measured in one run (``run``: a name for the tasks measured together), at
    ``measured_ms`` per iteration (compute, the median over that run's rounds)."""

    run: str
    device: DeviceSet
    measured_ms: float


@dataclass(frozen=True, slots=True)
class MeasuredPlan:
    """A plan measured in interleaved rounds (``autoshard.evaluation.measure_plan.measure_plans``), or read
    back from a report (``autoshard.evaluation.measured_reports.reported_result``)."""

    planner: str
    device_ms: tuple[float, ...]  # per-device median over rounds
    max_ms: float  # median over rounds of the per-round max
    max_iqr_ms: float
    ratio_to_reference: float  # geometric mean over rounds of max / reference max
    ratio_ci95: tuple[float, float]
    round_max_ms: tuple[float, ...]  # the max in each round (pairs with another plan's by round)
    round_device_ms: tuple[tuple[float, ...], ...] = ()  # each round's per-device measurements


@runtime_checkable
class CostModel(Protocol):
    """Predicts one device's cost (ms per iteration) for the set of tables it holds, and answers
    the incremental questions planners ask (``autoshard.core.costing.SetCostModel`` gives every model
    a fallback for them). ``max_set_size``: the largest set it was fitted on, if known."""

    max_set_size: int | None

    def predict(self, tables: Sequence[Table], batch_size: int) -> float: ...

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]: ...

    def accumulator(self, num_sets: int, batch_size: int) -> Accumulator: ...

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]: ...

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int) -> EditScorer: ...

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]: ...


@runtime_checkable
class Planner(Protocol):
    """Places a workload onto a topology."""

    @property
    def name(self) -> str: ...

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan: ...


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


__all__ = [
    "CostModel",
    "DevicePlan",
    "DeviceSet",
    "GIB",
    "MeasuredPlan",
    "Optimizer",
    "Planner",
    "ShardingPlan",
    "Table",
    "TableShard",
    "Topology",
    "Workload",
]
