"""AutoShard as a TorchRec planner: a ``ShardingPlanner`` that takes ``EmbeddingShardingPlanner``'s
arguments, so that TorchRec users swap it in by changing one line.

```python
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner.types import ParameterConstraints, Topology
from autoshard.torchrec.drop_in import AutoShardShardingPlanner

topology = Topology(world_size=16, local_world_size=8, compute_device="cuda", hbm_cap=80 * 1024**3)
constraints = {"history": ParameterConstraints(pooling_factors=[50.0], sharding_types=["row_wise", "table_wise"])}
# planner = EmbeddingShardingPlanner(topology=topology, batch_size=4096, constraints=constraints)
planner = AutoShardShardingPlanner(topology=topology, batch_size=4096, constraints=constraints)
plan = planner.collective_plan(model, sharders, pg)     # rank 0 plans, then broadcasts
model = DistributedModelParallel(model, plan=plan, sharders=sharders)
```

With TorchRec's arguments alone it plans in this process, with the product's default planners
(every planner that can run, the best plan kept: ``autoshard.planning.plan``) and the profile
``autoshard.profile_choice.default_profile_for`` picks for the topology's compute device (a
profile traced on this host's processor; else on cpu the default CPU profile, on cuda TorchRec's
estimators). The plan's log line names the planner, the profile and why it was chosen. The
keywords ``model=`` (a profile, ``"torchrec"``, ``"none"`` or a cost model), ``planner=`` (one
planner by name, or an AutoShard planner object) and ``client=`` (an ``AutoShardClient``: ask
the service over HTTP) choose otherwise. Needs the ``torchrec`` extra.

It plans every ``EmbeddingBagCollection`` (pooled tables) and ``EmbeddingCollection`` (sequence
tables: every id's embedding is an output row) of the module that one of ``sharders`` covers, as
one workload, and returns a TorchRec ``ShardingPlan`` keyed by each collection's module path
(``autoshard.torchrec.bridge``). A collection no sharder covers is left out, named in a warning
and in ``last_unplanned``. Sequence tables take the types TorchRec's
``EmbeddingCollectionSharder`` runs (data parallel, table-, column- and row-wise); their compute
is priced by the cost model outside its trained range (its traces are of pooled lookups: the
plan's warnings say so).

What it takes from TorchRec's arguments:

- ``topology``: ``world_size``, ``local_world_size`` (devices per host), ``compute_device``, each
  device's memory (``hbm_cap``, or ``CustomTopologyData``'s per-device ``hbm_cap``; on ``cpu``,
  TorchRec's ``ddr_cap``) and the intra- and inter-host bandwidths (bytes/ms, as GiB/s).
- ``storage_reservation``: applied as TorchRec's planner applies it (by default
  ``HeuristicalStorageReservation(0.15)``); the memory it leaves each device is what the tables
  may use.
- ``constraints``, per table, become the workload's constraints (``autoshard.core.constraints``),
  which every planner honours: ``sharding_types`` (any non-empty list, alone or mixed),
  ``compute_kernels`` (``fused`` for the sharded types, ``dense`` for data parallel; under
  TorchRec's cost model on cuda also ``fused_uvm_caching`` and ``fused_uvm``, which the plan's
  ``ParameterSharding`` carries with its ``cache_params``; ``key_value`` is not planned),
  ``min_partition`` (the narrowest column block: TorchRec cuts blocks of exactly that width,
  AutoShard of that width or wider), the features'
  ``pooling_factors`` / ``num_poolings`` / ``batch_sizes`` (the table's lookups per sample, as
  TorchRec's estimator counts them: ``pooling_factor_of``), and the kernel settings
  ``cache_params``, ``enforce_hbm``, ``stochastic_rounding``, ``bounds_check_mode`` and
  ``output_dtype``, copied onto the table's ``ParameterSharding`` as TorchRec's planner does.
  ``key_value_params``, ``use_virtual_table`` and a ``device_group`` other than the compute
  device are refused, naming the table. Constraints no plan can satisfy are refused before
  planning, naming the table and the constraint (``ConstraintsConflict``).
- ``batch_size`` (default TorchRec's 512): samples per iteration on each device, TorchRec's meaning:
  a sharded table serves every rank's samples (``batch_size`` x world size bags), as DMP runs it.
- ``timeout_seconds``: the time budget of each searching planner (or of the service).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
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

from autoshard.core.constraints import Constraints, TableConstraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import CostModel, DevicePlan, Planner, ShardingPlan, Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planners.validate import check_plan_constraints
from autoshard.planning.options import PlanOptions
from autoshard.planning.plan import plan as plan_task
from autoshard.planning.registry import make_planner
from autoshard.torchrec.bridge import MODULE_PATH, to_torchrec_plan
from autoshard.torchrec.drop_in_inputs import (
    Collection,
    collections_of,
    sequence_constraints,
    table_constraints,
    topology_from_torchrec,
)
from autoshard.torchrec.drop_in_models import ChosenModels, choose_models

if TYPE_CHECKING:
    from autoshard.client import AutoShardClient

logger = logging.getLogger(__name__)

_KERNEL_SETTINGS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode", "output_dtype")
"""ParameterConstraints fields TorchRec's planner copies onto each table's ParameterSharding."""
_TORCHREC_SEARCH = ("enumerator", "proposer", "partitioner", "performance_model", "stats", "callbacks", "plan_loader")
"""EmbeddingShardingPlanner's arguments that configure TorchRec's own search: refused when given."""


class AutoShardShardingPlanner(ShardingPlanner):
    """TorchRec's ``ShardingPlanner`` interface (``plan`` / ``collective_plan``) backed by
    AutoShard, taking ``EmbeddingShardingPlanner``'s arguments with their meaning (see the module
    docstring for what each becomes).

    Args:
        topology: TorchRec's ``Topology``; default, as TorchRec's: the process group's world size,
            ``get_local_size()`` devices per host, the device type this process sees.
        batch_size: samples per iteration on each device (default TorchRec's ``BATCH_SIZE``, 512);
            a sharded table is priced at every rank's samples (``autoshard.core.dmp_batch``).
        storage_reservation: TorchRec's ``StorageReservation`` (default
            ``HeuristicalStorageReservation(heuristical_storage_reservation_percentage)``).
        constraints: TorchRec's ``ParameterConstraints`` by table name.
        debug: log a one-line summary of each plan (TorchRec logs its stats tables).
        timeout_seconds: the time budget of each searching planner, or of the service.
        enumerator, proposer, partitioner, performance_model, stats, callbacks, plan_loader:
            TorchRec's search components; AutoShard searches with its own planners, so giving
            one is an ``InputError``.
        model: the cost model: a profile name (a folder of the model directory) or folder,
            ``"torchrec"`` (TorchRec's estimators), ``"none"`` (the heuristics' proxies), or a
            ``CostModel`` object; default the compute device's profile (module docstring).
        planner: one AutoShard planner instead of the default set: a name (made with ``context``,
            else with ``model``'s models, the constraints and the timeout) or a planner object
            (its own model, types, splits and budget).
        context: the ``PlannerContext`` a named planner is made from.
        client: or ask an AutoShard service over HTTP; ``planners`` names which ones (default:
            the service's default set), and the best plan is used.
        zipf_alphas: access skew per table name (default 0; TorchRec's constraints carry none).
        allow_column_split: which planners may split tables column-wise (None: the default, the
            cost-model planners; an AutoShard planner object keeps its own setting).

    After planning, ``last_plan``, ``last_workload`` and ``last_topology`` hold AutoShard's plan
    (costs, devices), the workload and the cluster it planned; ``last_profile`` the profile and
    why it was chosen; ``last_unplanned`` the collections no sharder covers (module path and
    class); ``last_warnings`` the plan's warnings (e.g. inputs outside the model's range).
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
        model: CostModel | str | Path | None = None,
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
        _refuse_search(search)
        if planner is not None and client is not None:
            raise InputError("planner", "and client both given: plan in process or over HTTP", "leave one of them out")
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
        _check_supported(constraints, topology.compute_device)
        self.table_constraints = table_constraints(constraints, self.batch_size)
        self.debug, self.timeout_seconds = debug, timeout_seconds
        self.model, self.planner, self.context, self.client, self.planners = model, planner, context, client, planners
        self.zipf_alphas, self.allow_column_split = zipf_alphas, allow_column_split
        self._models: ChosenModels | None = None
        self.last_plan: ShardingPlan | None = None
        self.last_workload: Workload | None = None
        self.last_topology: Topology | None = None
        self.last_profile: tuple[str | None, str] | None = None
        self.last_unplanned: tuple[str, ...] = ()
        self.last_warnings: tuple[str, ...] = ()

    @property
    def compute_device(self) -> str:
        return str(self.torchrec_topology.compute_device)

    def plan(self, module: nn.Module, sharders: list[ModuleSharder[nn.Module]]) -> TorchRecShardingPlan:
        """Plan every collection of ``module`` that ``sharders`` cover (default TorchRec's
        default sharders) on this process (no collectives)."""
        sharders = list(sharders) or get_default_sharders()
        found, unplanned = collections_of(module, sharders, self._pooling(), self.zipf_alphas)
        if unplanned:
            logger.warning("AutoShard leaves out %s: no sharder in sharders covers it", ", ".join(unplanned))
        if not found:
            raise InputError(
                "module",
                "holds no EmbeddingBagCollection or EmbeddingCollection that a sharder covers"
                + (f" ({', '.join(unplanned)} left out)" if unplanned else ""),
                "pass the model whose tables to shard, with TorchRec's sharders of its collections",
            )
        workload = self.workload_of(found, type(module).__name__)
        topology = self.autoshard_topology(module, sharders)
        ours = self._plan(workload, topology)
        check_plan_constraints(ours, workload.constraints)
        self.last_plan, self.last_workload, self.last_topology = ours, workload, topology
        self.last_unplanned = tuple(unplanned)
        plan: dict[str, Any] = dict(self._module_plans(found, ours, topology))
        if self.debug:
            self._log(ours, workload, topology, found)
        return TorchRecShardingPlan(plan)

    def workload_of(self, found: Sequence[Collection], name: str) -> Workload:
        """One workload of every collection's tables, with each table's constraints (a sequence
        table's within the types TorchRec's EmbeddingCollectionSharder runs). ``InputError`` when
        two collections hold tables of one name."""
        seen: dict[str, str] = {}
        for collection in found:
            for table in collection.tables:
                if table.name in seen:
                    raise InputError(
                        "tables",
                        f"table {table.name!r} is in {seen[table.name] or 'the module'} and in "
                        f"{collection.path or 'the module'}",
                        "give every table of the model a unique name",
                    )
                seen[table.name] = collection.path
        every = tuple(t for c in found for t in c.tables)
        own: dict[str, TableConstraints] = {n: c for n, c in self.table_constraints.items() if n in seen}
        for table in every:
            if not table.pooled:
                own[table.name] = sequence_constraints(own.get(table.name))
        return Workload(every, self.batch_size, name, Constraints(tuple(sorted(own.items()))))

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

    def chosen_models(self) -> ChosenModels:
        """The models this planner plans with (``model=``, else the compute device's default
        profile), loaded on first use."""
        if self._models is None:
            self._models = choose_models(self.model, self.compute_device)
        return self._models

    def _pooling(self) -> dict[str, float]:
        out = {}
        for name, own in self.table_constraints.items():
            pooling = own.pooling_factor(self.batch_size)
            if pooling is not None:
                out[name] = pooling
        return out

    def _plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        """The best plan: the service's (``client``), the planner object's, the named planner's,
        or the default planners' (``autoshard.planning.plan``) with the chosen models."""
        self.last_warnings = ()
        if self.client is not None:
            self.last_profile = (None, "the service's")
            return self.client.plan(
                workload,
                topology,
                self.planners,
                allow_column_split=self.allow_column_split,
                time_budget_s=self.timeout_seconds,
            ).best_plan
        if self.planner is not None and not isinstance(self.planner, str):
            self.last_profile = (None, "the planner object's own")
            return self.planner.plan(workload, topology)
        chosen = self.chosen_models()
        self.last_profile = (chosen.profile, chosen.reason)
        if isinstance(self.planner, str):
            context = self.context or PlannerContext(chosen.models.cost_model, chosen.models.policy)
            if self.timeout_seconds is not None:
                context = replace(context, time_budget_s=float(self.timeout_seconds))
            if self.allow_column_split is not None:
                context = replace(context, allow_column_split=self.allow_column_split)
            return make_planner(self.planner, context.for_task(workload, topology)).plan(workload, topology)
        budget = float(self.timeout_seconds) if self.timeout_seconds is not None else None
        options = PlanOptions(allow_column_split=self.allow_column_split, time_budget_s=budget)
        report = plan_task(workload, topology, chosen.models, options)
        self.last_warnings = tuple(report.warnings)
        for warning in report.warnings:
            logger.warning("AutoShard: %s", warning)
        return best_honoured(report.best_plan, report.plans, workload.constraints)

    def _module_plans(
        self, found: Sequence[Collection], ours: ShardingPlan, topology: Topology
    ) -> list[tuple[str, dict[str, ParameterSharding]]]:
        """Each collection's TorchRec module plan, with the constraints' kernel settings."""
        out = []
        for collection in found:
            names = {t.name for t in collection.tables}
            sub = Workload(collection.tables, self.batch_size)
            converted = to_torchrec_plan(
                _restrict(ours, names), sub, topology.num_devices, self.compute_device, topology.local_world_size
            )
            shardings = dict(converted.plan[MODULE_PATH])  # type: ignore[call-overload]
            for name, sharding in shardings.items():
                shardings[name] = _with_kernel_settings(sharding, (self.constraints or {}).get(name))
            out.append((collection.path, shardings))
        return out

    def _log(self, ours: ShardingPlan, workload: Workload, topology: Topology, found: Sequence[Collection]) -> None:
        kinds = sorted({s.sharding_type.value for d in ours.devices for s in d.shards})
        profile, why = self.last_profile or (None, "")
        logger.info(
            "AutoShard (%s) planned %d tables of %d collections on %d x %d devices (%s): predicted max %.3f; "
            "profile %s (%s)%s",
            ours.planner,
            len(workload.tables),
            len(found),
            topology.num_hosts,
            topology.local_world_size,
            ", ".join(kinds),
            max((d.cost_ms for d in ours.devices), default=0.0),
            profile or "none",
            why,
            f"; left out: {', '.join(self.last_unplanned)}" if self.last_unplanned else "",
        )


def best_honoured(best: ShardingPlan, plans: Sequence[ShardingPlan], constraints: Constraints) -> ShardingPlan:
    """``best``, or where it breaks the constraints (TorchRec's planner may: on ``cpu`` its
    sharders offer no row-wise type, and it plans sequence tables as pooled ones), the plan of
    lowest max among ``plans`` that keeps them, each plan passed over logged with why. Raises
    ``best``'s ``PlannerError`` when none keeps them."""
    first: PlannerError | None = None
    for plan in [best, *sorted((p for p in plans if p is not best), key=lambda p: p.max_cost_ms)]:
        try:
            check_plan_constraints(plan, constraints)
        except PlannerError as error:
            logger.warning("AutoShard passes over %s's plan: %s", plan.planner, error.message)
            first = first or error
            continue
        return plan
    assert first is not None
    raise first


def _refuse_search(search: Mapping[str, object]) -> None:
    for name, value in search.items():
        if value is not None:
            raise InputError(
                name,
                "configures TorchRec's own search; AutoShard plans with its own planners",
                f"leave {name} out (choose AutoShard's planner with planner=, model= or client=)",
            )


def _check_supported(constraints: Mapping[str, ParameterConstraints] | None, compute_device: str) -> None:
    for name, constraint in (constraints or {}).items():
        where = f"constraints[{name!r}]"
        if constraint.key_value_params is not None:
            raise InputError(
                "key_value_params", "is for SSD and parameter-server kernels", "AutoShard plans 'fused'", where
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
    given = {f: getattr(constraint, f) for f in _KERNEL_SETTINGS}  # none given: the plan's own (its cache_params)
    return replace(sharding, **{f: v for f, v in given.items() if v is not None})


def _restrict(plan: ShardingPlan, names: set[str]) -> ShardingPlan:
    """The plan's shards of the tables in ``names`` (same devices, costs kept)."""
    return ShardingPlan(
        plan.planner,
        tuple(DevicePlan(tuple(s for s in d.shards if s.table.name in names), d.cost_ms) for d in plan.devices),
        plan.plan_time_s,
    )


__all__ = ["AutoShardShardingPlanner", "best_honoured", "check_plan_constraints", "topology_from_torchrec"]
