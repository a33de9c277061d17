"""TorchRec's own estimates of one task's shards: its perf and storage estimators, run once per
distinct shard and cached.

TorchRec prices a shard from its sharding option (table, sharding type, compute kernel) and its
size alone: ``EmbeddingPerfEstimator`` gives forward and backward compute and communication on
TorchRec's ``Topology`` (world and local world size, bandwidths, compute device), and
``EmbeddingStorageEstimator`` the bytes it holds (weights, optimizer state, input and output
buffers; HBM on cuda, DDR on cpu). Neither depends on the rank or on the other shards of the rank,
and TorchRec's planner adds a rank's shards up (``NoopPerfModel``), so a rank's cost is the sum of
its shards' estimates: each distinct (table, sharding type, kernel, rows x columns) is estimated
once, all the misses of a call in one estimator call per sharding option.

A shard reaches the cost model as ``TableShard.as_table`` (named ``name[...]``, its rows, columns
and sharding type); its table is looked up by name in the task's workload. Its kernel is the shard's own
(``Table.compute_kernel``: ``fused``, ``fused_uvm_caching`` with its cache load factor as
TorchRec's ``CacheParams``, or ``fused_uvm``); data parallel runs ``dense`` (the one kernel
TorchRec's sharder gives it). ``bytes`` is the device's part (HBM on cuda: a UVM-caching shard's
cache and the buffers; its host part is ``host_bytes``). What each rank may hold is TorchRec's
``HeuristicalStorageReservation`` applied to the topology (``capacities``), as its planner does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import Topology as TorchRecTopology
from torchrec.distributed.planner.constants import DEFAULT_PERF_ESTIMATOR
from torchrec.distributed.planner.enumerators import get_partition_by_type
from torchrec.distributed.planner.estimator.estimator import EmbeddingPerfEstimatorFactory
from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator
from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
from torchrec.distributed.planner.types import GeneralizedCommsBandwidth, ParameterConstraints, Shard, ShardingOption
from torchrec.distributed.planner.utils import build_sharder_data, sharder_name
from torchrec.distributed.types import CacheParams
from torchrec.distributed.types import ShardingType as TorchRecShardingType
from torchrec.optim import RowWiseAdagrad

from autoshard.core.errors import InputError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Optimizer, Table, Topology, Workload
from autoshard.torchrec import bridge
from autoshard.torchrec.annotation_lookup import find_annotations_once
from autoshard.torchrec.planner import _quiet_torchrec, torchrec_topology_args

COMPUTE_DEVICES = ("cuda", "cpu")
STORAGE_RESERVATION = 0.15
"""TorchRec's default share of each device's memory kept back (``TorchRecPlanner``'s too)."""
_OPTIMIZERS: dict[Optimizer, type[torch.optim.Optimizer]] = {
    Optimizer.SGD: torch.optim.SGD,
    Optimizer.ADAGRAD: torch.optim.Adagrad,
    Optimizer.ROWWISE_ADAGRAD: RowWiseAdagrad,
}


@dataclass(frozen=True, slots=True)
class ShardEstimate:
    """TorchRec's estimate of one shard: ``ms`` its ``Perf.total`` (forward and backward compute
    and communication, ms per iteration), ``bytes`` its storage on the compute device (HBM on
    cuda, DDR on cpu)."""

    ms: float
    bytes: int
    host_bytes: int = 0
    """Its host memory (DDR) on cuda: a UVM kernel's weights and optimizer state."""


_Option = tuple[str, ShardingType, str, float | None]  # (table, sharding type, kernel, cache load factor)
_Key = tuple[str, ShardingType, str, float | None, int, int]  # an option's, then rows and columns


class TaskEstimates:
    """TorchRec's estimates of ``workload``'s shards on ``topology`` for ``compute_device``,
    cached per distinct shard. ``capacities``: each rank's bytes for shards after TorchRec's
    storage reservation (``storage_reservation`` of the memory, its input buffers; no dense
    part, as ``TorchRecPlanner`` plans); ``storage_reservation`` None: the topology's memory is
    already what a reservation left (the drop-in's). ``host_capacities`` (cuda): each rank's host
    memory (DDR) for the UVM kernels' weights, TorchRec's ``ddr_cap`` (``ddr_cap_bytes``, else its
    default), which its reservation leaves whole; ``uses_host``: whether a table of the workload
    runs a UVM kernel (its shards hold host memory). ``comms_bandwidths``: TorchRec's
    ``GeneralizedCommsBandwidth`` for its comms in place of the topology's declared links
    (``autoshard.torchrec.measured_links``)."""

    def __init__(
        self,
        workload: Workload,
        topology: Topology,
        compute_device: str = "cuda",
        storage_reservation: float | None = STORAGE_RESERVATION,
        comms_bandwidths: GeneralizedCommsBandwidth | None = None,
        ddr_cap_bytes: int | None = None,
    ) -> None:
        if compute_device not in COMPUTE_DEVICES:
            raise InputError("compute_device", f"must be cuda or cpu, got {compute_device!r}", "use cuda or cpu")
        find_annotations_once()
        self.workload, self.topology, self.compute_device = workload, topology, compute_device
        self.tables = {t.name: t for t in workload.tables}
        self._comms_bandwidths = comms_bandwidths
        self.ddr_cap_bytes = ddr_cap_bytes
        with _quiet_torchrec():  # its advice to its own users (topology factory, dry runs)
            self._setup(workload, storage_reservation)
        self._by_table: dict[Table, ShardEstimate] = {}
        self._by_key: dict[_Key, ShardEstimate] = {}
        self._by_id: dict[int, tuple[Table, ShardEstimate]] = {}

    def _setup(self, workload: Workload, storage_reservation: float | None) -> None:
        topology, compute_device = self.topology, self.compute_device
        self._torchrec_topology = TorchRecTopology(
            **torchrec_topology_args(topology, compute_device, self.ddr_cap_bytes),
            generalized_comms_bandwidths=self._comms_bandwidths,
        )
        cuda = compute_device == "cuda"  # on cpu the tables are in DDR already: ``capacities`` is it
        self.host_capacities = tuple(int(d.storage.ddr) for d in self._torchrec_topology.devices) if cuda else None
        self.uses_host = cuda and any(t.compute_kernel != bridge.FUSED for t in workload.tables)
        self._module = bridge.embedding_bag_collection(workload)  # checks every table's precision
        for table in workload.tables:  # its optimizer state in TorchRec's storage estimate
            weight = self._module.embedding_bags[table.name].weight
            weight._optimizer_classes = [_OPTIMIZERS[table.optimizer]]  # type: ignore[attr-defined]
        sharder = EmbeddingBagCollectionSharder()
        self._sharder_data = {sharder_name(type(self._module)): build_sharder_data(sharder)}
        constraints = {t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in workload.tables}
        self._perf = EmbeddingPerfEstimatorFactory.create(
            DEFAULT_PERF_ESTIMATOR, topology=self._torchrec_topology, constraints=constraints
        )
        self._storage = EmbeddingStorageEstimator(topology=self._torchrec_topology, constraints=constraints)
        self.capacities = (
            topology.device_memory_bytes_all
            if storage_reservation is None
            else _reserved_capacities(
                self._torchrec_topology, workload.batch_size, self._module, sharder, constraints, storage_reservation
            )
        )

    def of(self, tables: Sequence[Table]) -> list[ShardEstimate]:
        """Each shard's estimate (``tables``: shards as tables, ``TableShard.as_table``)."""
        by_id = self._by_id  # _seen, inlined: planners ask for tens of thousands of shards a call
        found = [e[1] if (e := by_id.get(id(t))) is not None and e[0] is t else None for t in tables]
        missing = [t for t, e in zip(tables, found) if e is None]
        if missing:
            self._estimate([t for t in dict.fromkeys(missing) if t not in self._by_table])
            found = [e if e is not None else self._remember(t) for t, e in zip(tables, found)]
        return found  # type: ignore[return-value]

    def one(self, table: Table) -> ShardEstimate:
        found = self._seen(table)
        return found if found is not None else self.of([table])[0]

    def _seen(self, table: Table) -> ShardEstimate | None:
        """The estimate of this very object, if asked before: by its id, which holds while the
        entry keeps the object alive (planners ask for the same shard objects many times, and a
        table hashes field by field)."""
        entry = self._by_id.get(id(table))
        return entry[1] if entry is not None and entry[0] is table else None

    def _remember(self, table: Table) -> ShardEstimate:
        estimate = self._by_table[table]
        self._by_id[id(table)] = (table, estimate)
        return estimate

    def parent(self, shard: Table) -> Table:
        """The workload's table that ``shard`` (a shard as a table) is cut from."""
        found = self.tables.get(shard.name)
        if found is None:
            cut = shard.name.rfind("[")
            found = self.tables.get(shard.name[:cut]) if cut > 0 else None
        if found is None:
            raise InputError(
                "tables",
                f"{shard.name!r} is no table of workload {self.workload.name!r} nor a shard of one",
                "price plans of the workload this TorchRec cost model was bound to (for_task)",
            )
        return found

    def _estimate(self, shards: Sequence[Table]) -> None:
        keys = {t: self._key(t) for t in shards}
        groups: dict[_Option, list[tuple[int, int]]] = {}
        for key in (k for k in dict.fromkeys(keys.values()) if k not in self._by_key):
            groups.setdefault(key[:4], []).append(key[4:])
        options = [self._option(option, sizes) for option, sizes in groups.items()]
        if options:
            self._perf.estimate(options, self._sharder_data)
            self._storage.estimate(options, self._sharder_data)
        cuda = self.compute_device == "cuda"
        for (option_key, sizes), option in zip(groups.items(), options):
            for (rows, columns), shard in zip(sizes, option.shards):
                assert shard.perf is not None and shard.storage is not None
                held, host = (shard.storage.hbm, shard.storage.ddr) if cuda else (shard.storage.ddr, 0)
                estimate = ShardEstimate(shard.perf.total, int(held), int(host))
                self._by_key[(*option_key, rows, columns)] = estimate
        for table, key in keys.items():
            self._by_table[table] = self._by_key[key]

    def _key(self, shard: Table) -> _Key:
        kind = shard.sharding_type
        dense = kind is ShardingType.DATA_PARALLEL
        kernel = bridge.DENSE if dense else shard.compute_kernel
        factor = shard.load_factor if kernel == bridge.FUSED_UVM_CACHING else None
        if kernel != bridge.FUSED and not dense and self.compute_device != "cuda":
            raise InputError(
                "compute_kernel",
                f"{kernel} runs on cuda only (TorchRec's sharder offers cpu the fused kernel alone)",
                "plan for cuda, or keep the table fused",
                where=f"table {shard.name!r}",
            )
        return (self.parent(shard).name, kind, kernel, factor, shard.num_embeddings, shard.embedding_dim)

    def _option(self, option: _Option, sizes: list[tuple[int, int]]) -> ShardingOption:
        """TorchRec's sharding option of table ``name`` under ``kind`` with ``kernel`` (and its
        cache load factor as ``CacheParams``), with one shard per size (the estimators price
        each shard from its size and the option alone). Table-wise and data parallel have one
        size: the whole table."""
        name, kind, kernel, factor = option
        table = self.tables[name]
        return ShardingOption(
            name=name,
            tensor=self._module.embedding_bags[name].weight,
            module=(bridge.MODULE_PATH, self._module),
            input_lengths=[table.pooling_factor],
            batch_size=self.workload.batch_size,
            sharding_type=kind.value,
            partition_by=_partition_by(kind),
            compute_kernel=kernel,
            shards=[Shard(size=[rows, columns], offset=[0, 0]) for rows, columns in sizes],
            cache_params=None if factor is None else CacheParams(load_factor=factor),
            is_pooled=True,
        )


def _partition_by(kind: ShardingType) -> str:
    return get_partition_by_type(TorchRecShardingType(kind.value).value)


def _reserved_capacities(
    topology: TorchRecTopology,
    batch_size: int,
    module: Any,
    sharder: EmbeddingBagCollectionSharder,
    constraints: dict[str, ParameterConstraints],
    percentage: float,
) -> tuple[int, ...]:
    """Each rank's bytes for shards once TorchRec's ``HeuristicalStorageReservation`` has kept
    back its share and the input buffers (no dense part: ``dense_tensor_estimate=0``, as
    ``TorchRecPlanner`` plans). Negative where nothing is left."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        reservation = HeuristicalStorageReservation(percentage=percentage, dense_tensor_estimate=0)
    try:
        reserved = reservation.reserve(topology, batch_size, module, [sharder], constraints)
    except Exception:  # TorchRec raises when the reservation leaves a device negative
        reserved = None
    if reserved is None:
        return tuple(-1 for _ in topology.devices)
    cuda = topology.compute_device == "cuda"
    return tuple(int(d.storage.hbm if cuda else d.storage.ddr) for d in reserved.devices)
