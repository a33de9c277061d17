"""The product's frozen data types and the two small interfaces every part speaks.

Units: memory in bytes, costs in milliseconds per training iteration (forward + backward + update).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from autoshard.core.constraints import Constraints
from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType, row_block_shares, row_blocks
from autoshard.core.values import is_int, is_number

if TYPE_CHECKING:
    from autoshard.core.costing import Accumulator, Edits, EditScorer

MAX_ZIPF_ALPHA = 3.0
GIB = 1024**3
MAX_ROWS, MAX_DIM, MAX_POOLING, MAX_BATCH = 10**12, 65_536, 10**6, 2**31 - 1
MAX_DEVICES, MAX_DEVICE_GB = 4_096, 10**6
"""Beyond any model or cluster, and small enough that every memory total the planners keep in
int64 arrays holds (4,096 devices x 10^6 GiB < 2^63 bytes): a larger value is an input error,
not an overflow (or, for the device count, every core's memory)."""


FUSED, FUSED_UVM_CACHING, FUSED_UVM = "fused", "fused_uvm_caching", "fused_uvm"
TABLE_KERNELS = (FUSED, FUSED_UVM_CACHING, FUSED_UVM)
"""TorchRec's compute kernels (``EmbeddingComputeKernel`` values) a sharded table may run: ``fused``
(all of it in the device's memory, the default), ``fused_uvm_caching`` (in host memory, a cache of
``cache_load_factor`` of it in the device's) and ``fused_uvm`` (in host memory, read over the
bus). A data-parallel table runs TorchRec's ``dense`` kernel whatever its table's."""
DEFAULT_CACHE_LOAD_FACTOR = 0.2
"""TorchRec's cache load factor when none is given (``UVM_CACHING_RATIO``)."""


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
    (0 = uniform, the default; 1 ~ typical production skew; at most 3). ``pooled``: its lookups
    are summed per sample (an ``EmbeddingBagCollection`` table, the default); ``False``: a
    sequence table (an ``EmbeddingCollection``'s), whose every id's embedding is an output row.
    ``compute_kernel``: TorchRec's kernel for its shards (``TABLE_KERNELS``; planners under TorchRec's
    cost model choose it, ``autoshard.torchrec.kernel_choice``), ``cache_load_factor`` the share
    of it ``fused_uvm_caching`` caches in the device's memory (``None``: TorchRec's 0.2).
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    pooling_factor: float = 1.0
    zipf_alpha: float = 0.0
    bytes_per_element: int = 4
    optimizer: Optimizer = Optimizer.SGD
    sharding_type: ShardingType = ShardingType.TABLE_WISE
    pooled: bool = True
    compute_kernel: str = FUSED
    cache_load_factor: float | None = None

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
        if self.compute_kernel != FUSED or self.cache_load_factor is not None:
            _check_kernel(self.compute_kernel, self.cache_load_factor)

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
        """What the table occupies in its device's memory: weights plus optimizer state under
        ``fused``; under ``fused_uvm_caching`` its cache, ``cache_load_factor`` of them, and the
        cache's state (TorchRec's count: rows x (4 + 16 x load factor) bytes); under ``fused_uvm``
        nothing (all of it in host memory)."""
        if self.compute_kernel == FUSED:
            return self.weight_bytes + self.optimizer.state_bytes(self.num_embeddings, self.embedding_dim)
        if self.compute_kernel == FUSED_UVM:
            return 0
        factor = self.load_factor
        cached = round(self.weight_bytes * factor)
        state = math.ceil(self.optimizer.state_bytes(self.num_embeddings, self.embedding_dim) * factor)
        return cached + state + math.ceil(self.num_embeddings * (4 + 16 * factor))

    @property
    def host_bytes(self) -> int:
        """What the table occupies in host memory: weights plus optimizer state under the UVM
        kernels, nothing under ``fused``."""
        if self.compute_kernel == FUSED:
            return 0
        return self.weight_bytes + self.optimizer.state_bytes(self.num_embeddings, self.embedding_dim)

    @property
    def load_factor(self) -> float:
        """The cache load factor ``fused_uvm_caching`` runs with (TorchRec's default when none)."""
        return DEFAULT_CACHE_LOAD_FACTOR if self.cache_load_factor is None else self.cache_load_factor


def _check_kernel(kernel: object, load_factor: object) -> None:
    _require(
        kernel in TABLE_KERNELS,
        "compute_kernel",
        f"must be one of {list(TABLE_KERNELS)}, got {{value!r}}",
        "use fused (the default), fused_uvm_caching or fused_uvm",
        kernel,
    )
    if load_factor is None:
        return
    _require(
        kernel == FUSED_UVM_CACHING,
        "cache_load_factor",
        "applies to fused_uvm_caching only, the table's kernel is {value!r}",
        "leave cache_load_factor out, or use the fused_uvm_caching kernel",
        kernel,
    )
    _require(
        is_number(load_factor) and 0 < load_factor <= 1,  # type: ignore[operator]
        "cache_load_factor",
        "must be a number in (0, 1], got {value!r}",
        f"use the share of the table to cache in device memory (TorchRec's default: {DEFAULT_CACHE_LOAD_FACTOR})",
        load_factor,
    )


@dataclass(frozen=True, slots=True)
class Workload:
    """The tables of a model and the per-iteration batch size every device processes."""

    tables: tuple[Table, ...]
    batch_size: int = 2048
    name: str = "workload"
    constraints: Constraints = Constraints()  # per table (TorchRec's ParameterConstraints) and placement

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


INTRA_HOST_BW_GBPS = 600.0
"""Bandwidth between the devices of one host, GiB/s: TorchRec 1.8.0's ``INTRA_NODE_BANDWIDTH``
(``600 * 1024**3 / 1000`` bytes/ms, i.e. 600 GiB/s; NVLink class)."""
INTER_HOST_BW_GBPS = 12.5
"""Bandwidth between hosts, GiB/s: TorchRec 1.8.0's ``CROSS_NODE_BANDWIDTH``
(``12.5 * 1024**3 / 1000`` bytes/ms, i.e. 12.5 GiB/s; a 100 Gbit/s NIC)."""
_MEMORY_FIX = "set the memory per device available to embeddings, in GiB (one number, or one per device)"
_HOSTS_FIX = (
    "give num_hosts and devices_per_host with num_hosts * devices_per_host = num_devices (or leave num_devices out)"
)


@dataclass(frozen=True, slots=True)
class Topology:
    """The devices: ``num_hosts`` hosts of ``devices_per_host`` devices each (TorchRec's
    ``world_size`` = ``num_devices`` and ``local_world_size`` = ``devices_per_host``), rank r on
    host ``r // devices_per_host``, and the memory each offers to embedding tables.

    ``Topology(8, 16)`` is one host of 8 devices with 16 GiB each, as before. ``device_memory_gb``
    may be given as a sequence, one GiB value per rank (TorchRec's ``CustomTopologyData``
    ``hbm_cap``): it is kept in ``device_memory_caps_gb`` and ``device_memory_gb`` becomes the
    largest device's; a sequence of equal values is the same topology as that one value.
    ``devices_per_host`` 0 (the default) means ``num_devices // num_hosts``. Bandwidths are GiB/s
        (TorchRec's defaults); ``autoshard.core.communication`` says how they price the traffic
    between devices.
    """

    num_devices: int
    device_memory_gb: float
    num_hosts: int = 1
    devices_per_host: int = 0
    intra_host_bw_gbps: float = INTRA_HOST_BW_GBPS
    inter_host_bw_gbps: float = INTER_HOST_BW_GBPS
    device_memory_caps_gb: tuple[float, ...] = ()  # per rank; () = every device has device_memory_gb

    @classmethod
    def cluster(
        cls,
        num_hosts: int,
        devices_per_host: int,
        device_memory_gb: float | Sequence[float],
        intra_host_bw_gbps: float = INTRA_HOST_BW_GBPS,
        inter_host_bw_gbps: float = INTER_HOST_BW_GBPS,
    ) -> Topology:
        """``num_hosts`` x ``devices_per_host`` devices (``device_memory_gb``: one value, or one per rank)."""
        _require(
            is_int(num_hosts) and is_int(devices_per_host),
            "num_hosts",
            "num_hosts and devices_per_host must be integers, got {value!r}",
            _HOSTS_FIX,
            (num_hosts, devices_per_host),
        )
        memory, caps = _memory_and_caps(device_memory_gb)
        return cls(
            num_hosts * devices_per_host,
            memory,
            num_hosts,
            devices_per_host,
            intra_host_bw_gbps,
            inter_host_bw_gbps,
            caps,
        )

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
            is_int(self.num_hosts) and self.num_hosts >= 1,
            "num_hosts",
            "must be an integer >= 1, got {value!r}",
            "set the number of hosts (1 for a single machine)",
            self.num_hosts,
        )
        if self.devices_per_host == 0:
            _require(
                self.num_devices % self.num_hosts == 0,
                "num_hosts",
                f"{self.num_devices} devices do not divide evenly over {{value!r}} hosts",
                _HOSTS_FIX,
                self.num_hosts,
            )
            object.__setattr__(self, "devices_per_host", self.num_devices // self.num_hosts)
        _require(
            is_int(self.devices_per_host) and self.devices_per_host >= 1,
            "devices_per_host",
            "must be an integer >= 1, got {value!r}",
            "set the number of devices in each host",
            self.devices_per_host,
        )
        _require(
            self.num_hosts * self.devices_per_host == self.num_devices,
            "devices_per_host",
            f"num_hosts * devices_per_host = {self.num_hosts} * {self.devices_per_host} = "
            f"{self.num_hosts * self.devices_per_host}, but num_devices is {{value!r}}",
            _HOSTS_FIX,
            self.num_devices,
        )
        for name in ("intra_host_bw_gbps", "inter_host_bw_gbps"):
            value = getattr(self, name)
            _require(
                is_number(value) and value > 0,
                name,
                "must be a number > 0 (GiB/s), got {value!r}",
                "give the bandwidth in GiB/s, or leave it out for TorchRec's default",
                value,
            )
        if not isinstance(self.device_memory_gb, (int, float)) or isinstance(self.device_memory_gb, bool):
            memory, caps = _memory_and_caps(self.device_memory_gb)  # a sequence, one per rank
            _require(
                not self.device_memory_caps_gb or tuple(self.device_memory_caps_gb) == caps,
                "device_memory_gb",
                "and device_memory_caps_gb differ",
                _MEMORY_FIX,
            )
            object.__setattr__(self, "device_memory_gb", memory)
            object.__setattr__(self, "device_memory_caps_gb", caps)
        caps = self.device_memory_caps_gb
        _require(
            isinstance(caps, tuple),
            "device_memory_gb",
            "per-device memory must be a tuple, got {value!r}",
            _MEMORY_FIX,
            caps,
        )
        for value in (self.device_memory_gb, *caps):
            _require(
                is_number(value) and value > 0,
                "device_memory_gb",
                "must be a number > 0, got {value!r}",
                _MEMORY_FIX,
                value,
            )
            _require_at_most(value, MAX_DEVICE_GB, "device_memory_gb", _MEMORY_FIX)
        if caps:
            _require(
                len(caps) == self.num_devices,
                "device_memory_gb",
                f"lists {{value!r}} per-device values, but the topology has num_hosts * devices_per_host = "
                f"{self.num_hosts} * {self.devices_per_host} = {self.num_devices} devices",
                "give one value per device (rank order: host 0's devices first), or one value for all",
                len(caps),
            )
            if all(c == caps[0] for c in caps):  # uniform after all: the same topology as one value
                object.__setattr__(self, "device_memory_caps_gb", ())
                object.__setattr__(self, "device_memory_gb", caps[0])
            else:
                object.__setattr__(self, "device_memory_gb", max(caps))

    @property
    def world_size(self) -> int:
        """TorchRec's name: every device of every host."""
        return self.num_devices

    @property
    def local_world_size(self) -> int:
        """TorchRec's name: the devices of one host."""
        return self.devices_per_host

    @property
    def uniform_memory(self) -> bool:
        """Whether every device offers ``device_memory_gb``."""
        return not self.device_memory_caps_gb

    @property
    def device_memory_bytes(self) -> int:
        """The largest device's memory for embeddings (every device's, unless per-device caps)."""
        return int(self.device_memory_gb * GIB)

    def device_memory_bytes_of(self, rank: int) -> int:
        """Rank ``rank``'s memory for embeddings, bytes."""
        if not 0 <= rank < self.num_devices:
            raise IndexError(f"rank {rank} is not in [0, {self.num_devices})")
        return int(self.device_memory_caps_gb[rank] * GIB) if self.device_memory_caps_gb else self.device_memory_bytes

    @property
    def device_memory_bytes_all(self) -> tuple[int, ...]:
        """Every rank's memory for embeddings, bytes."""
        if self.device_memory_caps_gb:
            return tuple(int(c * GIB) for c in self.device_memory_caps_gb)
        return (self.device_memory_bytes,) * self.num_devices

    @property
    def total_memory_bytes(self) -> int:
        return sum(self.device_memory_bytes_all)

    @property
    def smallest_device_memory_bytes(self) -> int:
        return min(self.device_memory_bytes_all)

    def device_memory_gb_of(self, rank: int) -> float:
        """Rank ``rank``'s memory for embeddings, GiB."""
        return self.device_memory_caps_gb[rank] if self.device_memory_caps_gb else self.device_memory_gb

    def host_of(self, rank: int) -> int:
        """The host of rank ``rank`` (ranks fill host 0 first, as TorchRec numbers them)."""
        if not (is_int(rank) and 0 <= rank < self.num_devices):
            raise IndexError(f"rank {rank!r} is not in [0, {self.num_devices})")
        return rank // self.devices_per_host

    @property
    def memory_label(self) -> str:
        """``16`` GiB, or ``8-16`` when devices differ: for one-line summaries."""
        if not self.device_memory_caps_gb:
            return f"{self.device_memory_gb:g}"
        return f"{min(self.device_memory_caps_gb):g}-{max(self.device_memory_caps_gb):g}"

    def to_dict(self) -> dict[str, object]:
        """The workload file's ``topology`` object; a single host with default bandwidths keeps
        the two fields it always had."""
        out: dict[str, object] = {"num_devices": self.num_devices}
        if self.num_hosts > 1:
            out.update(num_hosts=self.num_hosts, devices_per_host=self.devices_per_host)
        out["device_memory_gb"] = (
            list(self.device_memory_caps_gb) if self.device_memory_caps_gb else self.device_memory_gb
        )
        if self.intra_host_bw_gbps != INTRA_HOST_BW_GBPS:
            out["intra_host_bw_gbps"] = self.intra_host_bw_gbps
        if self.inter_host_bw_gbps != INTER_HOST_BW_GBPS:
            out["inter_host_bw_gbps"] = self.inter_host_bw_gbps
        return out


def _memory_and_caps(device_memory_gb: object) -> tuple[float, tuple[float, ...]]:
    """One value (no caps), or a sequence of per-rank values (the largest, and the caps)."""
    if isinstance(device_memory_gb, (list, tuple)):
        _require(
            len(device_memory_gb) >= 1,
            "device_memory_gb",
            "the per-device list is empty",
            _MEMORY_FIX,
        )
        caps = tuple(device_memory_gb)
        for value in caps:
            _require(
                is_number(value) and value > 0,
                "device_memory_gb",
                "must be a number > 0, got {value!r}",
                _MEMORY_FIX,
                value,
            )
        return max(caps), caps
    _require(
        is_number(device_memory_gb),
        "device_memory_gb",
        "must be a number > 0 or a list of one per device, got {value!r}",
        _MEMORY_FIX,
        device_memory_gb,
    )
    return device_memory_gb, ()  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class TableShard:
    """One shard of a table on one device: rows ``[row_offset, row_offset + rows)`` and columns
    ``[column_offset, column_offset + columns)`` of it (``None``: all of them), placed under
    ``sharding`` (``None``: ``table_wise`` when whole, ``column_wise`` when a column slice).
    ``lookup_share``: the share of the table's lookups it serves (a row block's ``s_j``, a
    data-parallel replica's 1 / W; see ``autoshard.core.sharding``)."""

    table: Table
    column_offset: int = 0
    columns: int | None = None
    row_offset: int = 0
    rows: int | None = None
    sharding: ShardingType | None = None
    lookup_share: float = 1.0

    @property
    def width(self) -> int:
        return self.table.embedding_dim if self.columns is None else self.columns

    @property
    def height(self) -> int:
        return self.table.num_embeddings if self.rows is None else self.rows

    @property
    def sharding_type(self) -> ShardingType:
        if self.sharding is not None:
            return self.sharding
        return ShardingType.TABLE_WISE if self.width == self.table.embedding_dim else ShardingType.COLUMN_WISE

    @property
    def label(self) -> str:
        """``name``, ``name[c0:c1]`` (columns), ``name[r0:r1]`` or ``name[r0:r1,c0:c1]`` (rows),
        ``name[dp]`` (a replica): unique among one device's shards."""
        t = self.table
        columns = f"{self.column_offset}:{self.column_offset + self.width}"
        if self.sharding is ShardingType.DATA_PARALLEL:
            return f"{t.name}[dp]"
        if self.rows is not None:
            rows = f"r{self.row_offset}:{self.row_offset + self.rows}"
            return f"{t.name}[{rows}]" if self.width == t.embedding_dim else f"{t.name}[{rows},{columns}]"
        return t.name if self.width == t.embedding_dim else f"{t.name}[{columns}]"

    @property
    def as_table(self) -> Table:
        """The shard as a table of its own, which is what a device's cost depends on."""
        t = self.table
        if self.width == t.embedding_dim and self.rows is None and self.lookup_share == 1.0 and self.sharding is None:
            return t
        return _shard_table(self)

    @property
    def memory_bytes(self) -> int:
        return self.as_table.memory_bytes


@lru_cache(maxsize=1 << 16)
def _shard_table(shard: TableShard) -> Table:
    """``TableShard.as_table`` of a shard that is not its whole table, made once (planners ask
    for each shard's table many times, and a Table checks its fields when made)."""
    t = shard.table
    return Table(
        shard.label,
        shard.height,
        shard.width,
        t.pooling_factor * shard.lookup_share,
        t.zipf_alpha,
        t.bytes_per_element,
        t.optimizer,
        shard.sharding_type,
        t.pooled,
        t.compute_kernel,
        t.cache_load_factor,
    )


@lru_cache(maxsize=1 << 14)
def row_shards(
    table: Table,
    ways: int,
    sharding: ShardingType,
    column_offset: int = 0,
    columns: int | None = None,
) -> tuple[TableShard, ...]:
    """The ``ways`` row blocks of ``table`` (of its columns ``[column_offset, +columns)``) under
    ``sharding``, TorchRec's sizes, each priced at its lookup share; blocks of 0 rows are left out."""
    blocks = row_blocks(table.num_embeddings, ways)
    shares = row_block_shares(table.num_embeddings, table.zipf_alpha, blocks)
    return tuple(
        TableShard(table, column_offset, columns, offset, size, sharding, share)
        for (offset, size), share in zip(blocks, shares)
        if size > 0
    )


def replica(table: Table, world_size: int) -> TableShard:
    """A data-parallel replica of ``table``: all of it, serving its device's 1 / ``world_size``
    of the samples."""
    return TableShard(table, sharding=ShardingType.DATA_PARALLEL, lookup_share=1.0 / world_size)


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
        return tuple(sorted(_shard_key(s) for s in self.shards))


def _shard_key(shard: TableShard) -> tuple:
    if shard.rows is None and shard.sharding is None:
        return (shard.table.name, shard.column_offset, shard.width)
    kind = shard.sharding_type.value
    return (shard.table.name, shard.column_offset, shard.width, shard.row_offset, shard.height, kind)


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


__all__ = [
    "DEFAULT_CACHE_LOAD_FACTOR",
    "FUSED",
    "FUSED_UVM",
    "FUSED_UVM_CACHING",
    "TABLE_KERNELS",
    "CostModel",
    "DevicePlan",
    "DeviceSet",
    "GIB",
    "MeasuredPlan",
    "Optimizer",
    "Planner",
    "ShardingPlan",
    "ShardingType",
    "Table",
    "TableShard",
    "Topology",
    "Workload",
    "replica",
    "row_shards",
]
