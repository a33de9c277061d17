"""AutoShard as a TorchRec planner: a ``ShardingPlanner`` that takes ``EmbeddingShardingPlanner``'s
arguments, so that TorchRec users swap it in by changing one line.

```python
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner.types import ParameterConstraints, Topology
from autoshard.client import AutoShardClient
from autoshard.torchrec.drop_in import AutoShardShardingPlanner

topology = Topology(world_size=16, local_world_size=8, compute_device="cuda", hbm_cap=80 * 1024**3)
constraints = {"history": ParameterConstraints(pooling_factors=[50.0], sharding_types=["row_wise", "table_wise"])}
# planner = EmbeddingShardingPlanner(topology=topology, batch_size=4096, constraints=constraints)
planner = AutoShardShardingPlanner(topology=topology, batch_size=4096, constraints=constraints,
                                   client=AutoShardClient("http://autoshard:8000"))
plan = planner.collective_plan(model, sharders, pg)     # rank 0 asks AutoShard, then broadcasts
model = DistributedModelParallel(model, plan=plan, sharders=sharders)
```

It reads the table configs of every ``EmbeddingBagCollection`` in the module and plans them as
one workload (in process with an AutoShard planner, or over HTTP with an ``AutoShardClient``) on
the cluster TorchRec's ``Topology`` describes, with the memory TorchRec's storage reservation
leaves each device, and returns a TorchRec ``ShardingPlan`` keyed by each collection's module
path, with whatever sharding types the plan uses (``autoshard.torchrec.bridge``). Needs the
``torchrec`` extra.

What it takes from TorchRec's arguments:

- ``topology``: ``world_size``, ``local_world_size`` (devices per host: the plan is made for
  ``world_size / local_world_size`` hosts), ``compute_device``, each device's memory (``hbm_cap``,
  or ``CustomTopologyData``'s per-device ``hbm_cap``; on ``cpu``, TorchRec's ``ddr_cap``) and the
  intra- and inter-host bandwidths (TorchRec's bytes/ms, as GiB/s).
- ``storage_reservation``: applied as TorchRec's planner applies it (by default
  ``HeuristicalStorageReservation(0.15)``: 15 % of HBM, 6 x the dense parameters, 20 x the
  KJT inputs); the memory it leaves each device is what the tables may use.
- ``constraints``, per table: ``pooling_factors`` (per feature; the table's pooling factor is
  their mean, each feature weighted by its ``num_poolings`` x ``batch_sizes`` bags), the
  ``sharding_types`` it may take, ``compute_kernels`` (``fused`` must be among them: it is the
  kernel AutoShard plans and measures; without ``dense``, the table is not placed data
  parallel), ``min_partition`` (checked on column blocks), and the kernel settings
  ``cache_params``, ``enforce_hbm``, ``stochastic_rounding``, ``bounds_check_mode`` and
  ``output_dtype``, copied onto the table's ``ParameterSharding`` as TorchRec's planner does.
  ``key_value_params``, ``use_virtual_table`` and a ``device_group`` other than the compute
  device are refused, naming the table.
- ``batch_size`` (default TorchRec's 512): samples per iteration on each device, for the cost
  model and the reservation; a feature's ``batch_sizes`` enter its table's pooling factor (as
  weights) and the reservation (as TorchRec counts the KJT inputs), not the workload's batch.
- ``timeout_seconds``: the time budget of a named in-process planner or of the service.

Each table's allowed sharding types (``allowed_types_by_table``) become its workload constraint
(``autoshard.core.constraints``), which every planner honours; the planners may choose among the
union of them, and a plan whose table took a type its constraints do not allow is still refused
(``check_constraints``, a safety net) naming the table, its allowed types and the type chosen.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch import nn
from torchrec.distributed.collective_utils import invoke_on_rank_and_broadcast_result
from torchrec.distributed.comm import get_local_size, get_topology_domain_multiple
from torchrec.distributed.planner.constants import BATCH_SIZE
from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
from torchrec.distributed.planner.types import ParameterConstraints, StorageReservation
from torchrec.distributed.planner.types import PlannerError as TorchRecPlannerError
from torchrec.distributed.planner.types import Topology as TorchRecTopology
from torchrec.distributed.sharding_plan import get_default_sharders
from torchrec.distributed.types import ModuleSharder, ParameterSharding, ShardingPlanner
from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan
from torchrec.distributed.utils import get_device_type
from torchrec.modules.embedding_configs import DataType
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from autoshard.core.constraints import Constraints, TableConstraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType, parse_sharding_types
from autoshard.core.types import (
    GIB,
    DevicePlan,
    Planner,
    ShardingPlan,
    Table,
    Topology,
    Workload,
)
from autoshard.planners.context import PlannerContext
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planning.registry import make_planner
from autoshard.torchrec.bridge import DENSE, FUSED, MODULE_PATH, to_torchrec_plan

if TYPE_CHECKING:
    from autoshard.client import AutoShardClient

logger = logging.getLogger(__name__)

_BYTES = {DataType.FP32: 4, DataType.FP16: 2}
_KERNEL_SETTINGS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode", "output_dtype")
"""ParameterConstraints fields TorchRec's planner copies onto each table's ParameterSharding."""
_TORCHREC_SEARCH = ("enumerator", "proposer", "partitioner", "performance_model", "stats", "callbacks", "plan_loader")
"""EmbeddingShardingPlanner's arguments that configure TorchRec's own search: refused when given."""
_BYTES_PER_MS = 1000 / GIB
"""TorchRec's bandwidths are bytes/ms; ours GiB/s."""


def embedding_bag_collections(module: nn.Module) -> list[tuple[str, EmbeddingBagCollection]]:
    """Every EmbeddingBagCollection in ``module``, with its module path ('' for the module itself)."""
    return [(path, m) for path, m in module.named_modules() if isinstance(m, EmbeddingBagCollection)]


def tables_from_module(
    module: nn.Module,
    pooling_factors: Mapping[str, float] | None = None,
    zipf_alphas: Mapping[str, float] | None = None,
) -> list[tuple[str, list[Table]]]:
    """Our tables, per collection path, from the collections' ``embedding_bag_configs()``.
    TorchRec's configs carry no access statistics: pooling factors (default 1.0) and Zipf skews
    (default 0) come from the arguments, by table name."""
    pooling, skew = dict(pooling_factors or {}), dict(zipf_alphas or {})
    out = []
    for path, collection in embedding_bag_collections(module):
        tables = []
        for config in collection.embedding_bag_configs():
            if config.data_type not in _BYTES:
                raise InputError(
                    "data_type",
                    f"table {config.name!r} is {config.data_type}",
                    "AutoShard plans fp32 and fp16 tables",
                    where=path or "module",
                )
            tables.append(
                Table(
                    config.name,
                    config.num_embeddings,
                    config.embedding_dim,
                    float(pooling.get(config.name, 1.0)),
                    float(skew.get(config.name, 0.0)),
                    _BYTES[config.data_type],
                )
            )
        out.append((path, tables))
    return out


def allowed_types_by_table(
    constraints: Mapping[str, ParameterConstraints] | None,
) -> dict[str, frozenset[ShardingType]]:
    """The sharding types each constrained table may take: its ``sharding_types`` (all types
    when unset), less ``data_parallel`` when its ``compute_kernels`` leave out ``dense`` (the
    kernel TorchRec runs data-parallel tables with). Tables without constraints are left out
    (they may take any type). ``InputError`` naming the table for an unknown type, or for
    kernels without ``fused``."""
    allowed: dict[str, frozenset[ShardingType]] = {}
    for name, constraint in (constraints or {}).items():
        where = f"constraints[{name!r}]"
        kinds = ALL_TYPES
        if constraint.sharding_types is not None:
            try:
                kinds = parse_sharding_types(list(constraint.sharding_types))
            except InputError as error:
                raise error.located(where) from None
        kernels = constraint.compute_kernels
        if kernels is not None:
            if FUSED not in kernels:
                raise InputError(
                    "compute_kernels",
                    f"allows {list(kernels)}; AutoShard plans the {FUSED!r} kernel (the one its cost model measures)",
                    f"include {FUSED!r}, or leave compute_kernels unset",
                    where=where,
                )
            if DENSE not in kernels:
                kinds -= {ShardingType.DATA_PARALLEL}
        if not kinds:
            raise InputError(
                "sharding_types",
                f"leaves no sharding type: data_parallel needs the {DENSE!r} kernel, not in compute_kernels",
                f"allow another sharding type, or add {DENSE!r} to compute_kernels",
                where=where,
            )
        allowed[name] = kinds
    return allowed


def pooling_factors_from_constraints(
    constraints: Mapping[str, ParameterConstraints] | None, batch_size: int
) -> dict[str, float]:
    """Each constrained table's pooling factor: the mean of its features' ``pooling_factors``,
    each weighted by its bags per iteration (``num_poolings`` x ``batch_sizes``; defaults 1 and
    ``batch_size``), so that the table's lookups per bag are what TorchRec counts. ``InputError``
    when the three lists differ in length or hold no bag."""
    out: dict[str, float] = {}
    for name, constraint in (constraints or {}).items():
        factors = list(constraint.pooling_factors or [])
        if not factors:
            continue
        polls = list(constraint.num_poolings or [1.0] * len(factors))
        batches = list(constraint.batch_sizes or [batch_size] * len(factors))
        where = f"constraints[{name!r}]"
        if not len(factors) == len(polls) == len(batches):
            raise InputError(
                "pooling_factors",
                f"lists {len(factors)} features, num_poolings {len(polls)}, batch_sizes {len(batches)}",
                "give one entry per feature in each (TorchRec's rule)",
                where=where,
            )
        bags = [float(p) * float(b) for p, b in zip(polls, batches)]
        if not sum(bags) > 0:
            raise InputError(
                "batch_sizes", f"num_poolings x batch_sizes {bags} hold no bag", "give positive values", where=where
            )
        out[name] = sum(float(f) * w for f, w in zip(factors, bags)) / sum(bags)
    return out


def topology_from_torchrec(topology: TorchRecTopology) -> Topology:
    """Our Topology of a TorchRec one (typically the one its storage reservation returns):
    ``world_size / local_world_size`` hosts of ``local_world_size`` devices, each device's memory
    for tables (HBM on ``cuda`` and ``mtia``, DDR on ``cpu``, as TorchRec's planner places
    tables) in GiB, the bandwidths in GiB/s. ``PlannerError`` if a device has no memory left."""
    world, local = topology.world_size, topology.local_world_size
    if not (1 <= local <= world and world % local == 0):
        raise InputError(
            "local_world_size",
            f"{local} devices per host do not divide the {world} devices",
            "give TorchRec's Topology a local_world_size that divides world_size",
        )
    on_hbm = topology.compute_device in ("cuda", "mtia")
    caps = [d.storage.hbm if on_hbm else d.storage.ddr for d in topology.devices]
    if min(caps) <= 0:
        rank = caps.index(min(caps))
        raise PlannerError(
            PlannerErrorKind.INSUFFICIENT_MEMORY,
            f"rank {rank} has {caps[rank] / GIB:.3f} GiB left for embedding tables after the storage reservation",
            (
                "give the Topology more memory (hbm_cap, or CustomTopologyData)",
                "reserve less (storage_reservation, heuristical_storage_reservation_percentage)",
            ),
        )
    return Topology.cluster(
        world // local,
        local,
        [c / GIB for c in caps],
        topology.intra_host_bw * _BYTES_PER_MS,
        topology.inter_host_bw * _BYTES_PER_MS,
    )


class AutoShardShardingPlanner(ShardingPlanner):
    """TorchRec's ``ShardingPlanner`` interface (``plan`` / ``collective_plan``) backed by
    AutoShard, taking ``EmbeddingShardingPlanner``'s arguments with their meaning (see the module
    docstring for what each becomes).

    Args:
        topology: TorchRec's ``Topology``; default, as TorchRec's: the process group's world size,
            ``get_local_size()`` devices per host, the device type this process sees.
        batch_size: samples per iteration on each device (default TorchRec's ``BATCH_SIZE``, 512).
        storage_reservation: TorchRec's ``StorageReservation`` (default
            ``HeuristicalStorageReservation(heuristical_storage_reservation_percentage)``).
        constraints: TorchRec's ``ParameterConstraints`` by table name.
        debug: log a one-line summary of each plan (TorchRec logs its stats tables).
        timeout_seconds: time budget of a named planner (``planner="cost_greedy"``) or of the
            service; an AutoShard planner object keeps its own.
        enumerator, proposer, partitioner, performance_model, stats, callbacks, plan_loader:
            TorchRec's search components; AutoShard searches with its own planners, so giving
            one is an ``InputError``.
        planner: plan in process with this AutoShard planner object (e.g.
            ``make_planner("cost_greedy", PlannerContext(model))``), or a planner name, made for
            each plan from ``context`` with the constraints' sharding types and the timeout.
        context: the ``PlannerContext`` a named planner is made from (its cost model; default:
            none, enough for the heuristics).
        client: or ask an AutoShard service over HTTP; ``planners`` names which ones (default:
            the service's default set), and the best plan is used.
        zipf_alphas: access skew per table name (default 0; TorchRec's constraints carry none).
        allow_column_split: which of the service's planners (or the named planner) may split
            tables column-wise (None: the default, the cost-model planners; an AutoShard planner
            object keeps its own setting).

    After planning, ``last_plan``, ``last_workload`` and ``last_topology`` hold AutoShard's plan
    (costs, devices), the workload and the cluster it planned.
    """

    def __init__(
        self,
        topology: TorchRecTopology | None = None,
        batch_size: int | None = None,
        enumerator: object = None,
        storage_reservation: StorageReservation | None = None,
        proposer: object = None,
        partitioner: object = None,
        performance_model: object = None,
        stats: object = None,
        constraints: dict[str, ParameterConstraints] | None = None,
        debug: bool = True,
        callbacks: object = None,
        timeout_seconds: int | None = None,
        plan_loader: object = None,
        *,
        planner: Planner | str | None = None,
        context: PlannerContext | None = None,
        client: AutoShardClient | None = None,
        planners: Sequence[str] | None = None,
        zipf_alphas: Mapping[str, float] | None = None,
        allow_column_split: bool | None = None,
        heuristical_storage_reservation_percentage: float = 0.15,
    ) -> None:
        search = dict(zip(_TORCHREC_SEARCH, (enumerator, proposer, partitioner, performance_model, stats)))
        search.update(callbacks=callbacks, plan_loader=plan_loader)
        for name, value in search.items():
            if value is not None:
                raise InputError(
                    name,
                    "configures TorchRec's own search; AutoShard plans with its own planners",
                    f"leave {name} out (choose AutoShard's planner with planner= or client=)",
                )
        if (planner is None) == (client is None):
            raise InputError(
                "planner",
                "give exactly one of planner (in process) or client (HTTP)",
                'pass planner="cost_greedy" (with context=PlannerContext(model)), planner=make_planner(...) '
                "or client=AutoShardClient(url)",
            )
        if timeout_seconds is not None and not timeout_seconds > 0:
            raise InputError("timeout_seconds", f"must be > 0, got {timeout_seconds!r}", "leave it out for no limit")
        if topology is None:  # TorchRec's default: the process group's cluster, as DMP runs on it
            topology = TorchRecTopology(
                local_world_size=get_local_size(),
                world_size=dist.get_world_size(),
                compute_device=get_device_type(),
                pod_size=get_topology_domain_multiple(),
            )
        self.torchrec_topology = topology
        self.batch_size = batch_size if batch_size else BATCH_SIZE
        self.storage_reservation: StorageReservation = storage_reservation or HeuristicalStorageReservation(
            percentage=heuristical_storage_reservation_percentage
        )
        self.constraints = constraints
        self.allowed_types = allowed_types_by_table(constraints)
        self.pooling_factors = pooling_factors_from_constraints(constraints, self.batch_size)
        _check_supported(constraints, topology.compute_device)
        self.debug, self.timeout_seconds = debug, timeout_seconds
        self.planner, self.context, self.client, self.planners = planner, context, client, planners
        self.zipf_alphas, self.allow_column_split = zipf_alphas, allow_column_split
        self.last_plan: ShardingPlan | None = None
        self.last_workload: Workload | None = None
        self.last_topology: Topology | None = None

    @property
    def compute_device(self) -> str:
        return str(self.torchrec_topology.compute_device)

    def plan(self, module: nn.Module, sharders: list[ModuleSharder[nn.Module]]) -> TorchRecShardingPlan:
        """Plan every EmbeddingBagCollection of ``module`` on this process (no collectives)."""
        _check_sharders(sharders)
        sharders = list(sharders) or get_default_sharders()
        per_collection = tables_from_module(module, self.pooling_factors, self.zipf_alphas)
        if not per_collection:
            raise InputError("module", "holds no EmbeddingBagCollection", "pass the model whose tables to shard")
        every = tuple(t for _, collection in per_collection for t in collection)
        names = {t.name for t in every}
        constraints = Constraints(
            tuple(
                (name, TableConstraints(sharding_types=kinds))
                for name, kinds in sorted(self.allowed_types.items())
                if name in names
            )
        )
        workload = Workload(every, self.batch_size, type(module).__name__, constraints)
        topology = self.autoshard_topology(module, sharders)
        ours = self._plan(workload, topology)
        self.last_plan, self.last_workload, self.last_topology = ours, workload, topology
        check_constraints(ours, self.allowed_types, self.constraints)
        plan: dict[str, Any] = {}
        for path, tables in per_collection:
            sub = _restrict(ours, {t.name for t in tables})
            converted = to_torchrec_plan(
                sub,
                Workload(tuple(tables), workload.batch_size),
                topology.num_devices,
                self.compute_device,
                topology.local_world_size,
            )
            plan[path] = converted.plan[MODULE_PATH]
            for name, sharding in plan[path].items():
                plan[path][name] = _with_kernel_settings(sharding, (self.constraints or {}).get(name))
        if self.debug:
            kinds = sorted({s.sharding_type.value for d in ours.devices for s in d.shards})
            logger.info(
                "AutoShard (%s) planned %d tables on %d x %d devices (%s): predicted max %.3f ms",
                ours.planner,
                len(workload.tables),
                topology.num_hosts,
                topology.local_world_size,
                ", ".join(kinds),
                max((d.cost_ms for d in ours.devices), default=0.0),
            )
        return TorchRecShardingPlan(plan)

    def collective_plan(
        self,
        module: nn.Module,
        sharders: list[ModuleSharder[nn.Module]] | None = None,
        pg: dist.ProcessGroup | None = None,
    ) -> TorchRecShardingPlan:
        """Plan on rank 0 and broadcast, so every rank shards the same way (TorchRec's contract);
        ``sharders`` default to TorchRec's default sharders."""
        if pg is None:
            if not dist.is_initialized():
                raise InputError(
                    "pg",
                    "no process group",
                    "call torch.distributed.init_process_group first, or use plan() in a single process",
                )
            pg = dist.GroupMember.WORLD
        if sharders is None:
            sharders = get_default_sharders()
        return invoke_on_rank_and_broadcast_result(pg, 0, self.plan, module, sharders)  # type: ignore[arg-type]

    def autoshard_topology(self, module: nn.Module, sharders: Sequence[ModuleSharder[nn.Module]]) -> Topology:
        """The cluster planned for ``module``: TorchRec's topology after its storage reservation
        (``topology_from_torchrec``)."""
        try:
            reserved = self.storage_reservation.reserve(
                topology=self.torchrec_topology,
                batch_size=self.batch_size,
                module=module,
                sharders=list(sharders) or get_default_sharders(),
                constraints=self.constraints,
            )
        except TorchRecPlannerError as error:
            raise PlannerError(
                PlannerErrorKind.INSUFFICIENT_MEMORY,
                f"TorchRec's storage reservation leaves no memory for embedding tables: {error}",
            ) from error
        return topology_from_torchrec(reserved)

    def _types(self, workload: Workload) -> frozenset[ShardingType]:
        """The union of the tables' allowed types (a table without constraints allows all)."""
        kinds: frozenset[ShardingType] = frozenset()
        for table in workload.tables:
            kinds |= self.allowed_types.get(table.name, ALL_TYPES)
        return kinds

    def _plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        kinds = self._types(workload)
        if self.client is not None:
            return self.client.plan(
                workload,
                topology,
                self.planners,
                allow_column_split=self.allow_column_split,
                sharding_types=None if kinds == ALL_TYPES else sorted(k.value for k in kinds),
                time_budget_s=self.timeout_seconds,
            ).best_plan
        if isinstance(self.planner, str):
            context = replace(self.context or PlannerContext(), sharding_types=kinds)
            if self.timeout_seconds is not None:
                context = replace(context, time_budget_s=float(self.timeout_seconds))
            if self.allow_column_split is not None:
                context = replace(context, allow_column_split=self.allow_column_split)
            return make_planner(self.planner, context.for_task(workload, topology)).plan(workload, topology)
        assert self.planner is not None  # an object: its own types, splits and budget
        return self.planner.plan(workload, topology)


def check_constraints(
    plan: ShardingPlan,
    allowed: Mapping[str, frozenset[ShardingType]],
    constraints: Mapping[str, ParameterConstraints] | None = None,
) -> None:
    """``PlannerError`` naming the table when a table's sharding type is not among its allowed
    types, or a column block of it is narrower than its ``min_partition``."""
    minimum = {n: c.min_partition for n, c in (constraints or {}).items() if c.min_partition is not None}
    for device in plan.devices:
        for shard in device.shards:
            name, kind = shard.table.name, shard.sharding_type
            if name in allowed and kind not in allowed[name]:
                raise PlannerError(
                    PlannerErrorKind.UNAVAILABLE,
                    f"table {name!r} allows sharding types {sorted(k.value for k in allowed[name])}, "
                    f"but the plan gives it {kind.value!r}: AutoShard's planners restrict sharding types for the "
                    "whole workload (the union of the tables'), not per table",
                    (
                        "give every constrained table the same sharding_types (they are then enforced for all)",
                        f"or allow {kind.value!r} for {name!r}",
                    ),
                )
            cut = shard.width != shard.table.embedding_dim
            if name in minimum and cut and shard.width < minimum[name]:
                raise PlannerError(
                    PlannerErrorKind.UNAVAILABLE,
                    f"table {name!r} has a column block of {shard.width} columns, below its min_partition "
                    f"{minimum[name]}",
                    ("lower min_partition", "or plan without column splits (allow_column_split=False)"),
                )


def _check_supported(constraints: Mapping[str, ParameterConstraints] | None, compute_device: str) -> None:
    for name, constraint in (constraints or {}).items():
        where = f"constraints[{name!r}]"
        if constraint.key_value_params is not None:
            raise InputError(
                "key_value_params", "is for SSD and parameter-server kernels", f"AutoShard plans {FUSED!r}", where
            )
        if constraint.use_virtual_table:
            raise InputError("use_virtual_table", "is not planned by AutoShard", "leave it False", where)
        if constraint.device_group is not None and constraint.device_group != compute_device:
            raise InputError(
                "device_group",
                f"is {constraint.device_group!r}; AutoShard plans every table on the topology's {compute_device!r}",
                "leave device_group unset",
                where,
            )


def _with_kernel_settings(sharding: ParameterSharding, constraint: ParameterConstraints | None) -> ParameterSharding:
    """The table's ParameterSharding with its constraints' kernel settings, as TorchRec's planner
    copies them (``to_sharding_plan``)."""
    if constraint is None:
        return sharding
    return replace(sharding, **{f: getattr(constraint, f) for f in _KERNEL_SETTINGS})


def _restrict(plan: ShardingPlan, names: set[str]) -> ShardingPlan:
    """The plan's shards of the tables in ``names`` (same devices, costs kept)."""
    return ShardingPlan(
        plan.planner,
        tuple(DevicePlan(tuple(s for s in d.shards if s.table.name in names), d.cost_ms) for d in plan.devices),
        plan.plan_time_s,
    )


def _check_sharders(sharders: Sequence[ModuleSharder[nn.Module]]) -> None:
    if sharders and not any(
        issubclass(EmbeddingBagCollection, getattr(s, "module_type", type(None))) for s in sharders
    ):
        raise InputError(
            "sharders", "none shards EmbeddingBagCollection", "include torchrec's EmbeddingBagCollectionSharder"
        )


__all__ = [
    "AutoShardShardingPlanner",
    "allowed_types_by_table",
    "check_constraints",
    "embedding_bag_collections",
    "pooling_factors_from_constraints",
    "tables_from_module",
    "topology_from_torchrec",
]
