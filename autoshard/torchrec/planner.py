"""TorchRec's own planner (``EmbeddingShardingPlanner``) behind our Planner interface.

It plans for a topology of ``num_hosts`` x ``devices_per_host`` devices (TorchRec's
``world_size`` and ``local_world_size``, and its intra-/inter-host bandwidths) with
``device_memory_bytes`` of HBM each, or each rank its own cap through TorchRec's
``CustomTopologyData`` (no GPU is needed to plan), with TorchRec's default proposers,
partitioner and storage reservation, over the sharding types of ``sharding_types``: by default
every type TorchRec's ``EmbeddingBagCollectionSharder`` offers for the device (data parallel,
table-wise, column-wise, table-column-wise, and on cuda row-wise, table-row-wise and grid) on a
cluster or where a table does not fit one device, and table-wise (plus column-wise when allowed)
on one host whose devices each fit every table, as before. Kernels are those our planners may
choose under the same cost model (``offered_kernels``): under TorchRec's estimator (``--model
torchrec``) on cuda ``fused``, ``fused_uvm_caching`` (its ``CacheParams`` load factor the table's,
TorchRec's default 0.2 unless constrained) and ``fused_uvm``; else ``fused`` alone; data parallel
``dense``, the one kernel TorchRec gives it. Never SSD offloading. Each rank's host memory for the
UVM kernels is the cost model's ``ddr_cap_bytes`` where it has one (TorchRec's ``ddr_cap``), else
TorchRec's default. Needs the ``torchrec`` extra.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import (
    FUSED_UVM_CACHING,
    GIB,
    CostModel,
    Optimizer,
    ShardingPlan,
    Table,
    TableShard,
    Topology,
    Workload,
)
from autoshard.planners.feasibility import (
    FIX_DEVICES,
    FIX_MEMORY,
    FIX_SHRINK,
    FIX_SPLIT,
    check_feasible,
    check_total,
    fmt_bytes,
)
from autoshard.planners.placement_unit import Unit
from autoshard.torchrec.kernel_choice import chooses_kernels, table_kernels

if TYPE_CHECKING:
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

AUTO = "auto"
"""``sharding_types``: the full space on a cluster or where a table does not fit one device, else
table-wise (plus column-wise when allowed)."""
FULL_SEARCH = "all"
"""``sharding_types``: every type TorchRec's sharder offers for the compute device."""
SOFT_BUDGET_SHARE = 0.8
"""TorchRec's own timeout ends at this share of the time budget: past it TorchRec keeps the best
plan found (a partial plan); the rest is for its last proposal and its plan's output, before the
hard stop at the budget."""

INSTALL_FIX = (
    "install the torchrec extra after torch, without its dependencies: "
    "pip install --no-deps torchrec==1.8.0 && "
    "pip install tensordict torchmetrics==1.0.3 tqdm pyre-extensions"
)


@dataclass(frozen=True, slots=True)
class TorchRecPlanResult:
    """Our plan, and TorchRec's own estimate of each device's cost (ms per iteration, on its
    model of a GPU: forward + backward compute and communication of the device's shards)."""

    plan: ShardingPlan
    torchrec_estimates_ms: tuple[float, ...]


class TorchRecPlanner:
    """TorchRec's ``EmbeddingShardingPlanner`` on our workloads.

    Args:
        allow_column_split: where ``sharding_types`` is ``"auto"`` and the task is one host whose
            devices each fit every table, also let TorchRec shard tables column-wise (it only
            cuts equal widths of at least 128 columns, multiples of 4, that divide the dimension).
        cost_model: fills the plan's device costs; without one they are TorchRec's estimates.
        storage_reservation: the fraction of each device's memory TorchRec keeps back (its
            default 0.15); it also reserves room for each device's input and output buffers.
        compute_device: what TorchRec plans for: ``"cuda"`` (its GPU perf model, memory as HBM;
            the planner ``torchrec``) or ``"cpu"`` (its CPU perf model, memory as DDR; the planner
            ``torchrec_cpu``, the fair reference when plans are measured on a CPU; the planner
            ``torchrec`` plans for cpu too where it plans beside ``--model torchrec
            --compute-device cpu``).
        time_budget_s: TorchRec's planner runs its proposers until its ``timeout_seconds`` ends
            at 80% of the budget (``SOFT_BUDGET_SHARE``), then returns the best plan it found by
            then: that plan has ``partial`` set. It checks its timeout only between proposals
            and not while it enumerates, so at the budget itself it is stopped and ``plan``
            raises ``PlannerError(TIME_BUDGET)`` (``_stopped_after``); so it does when its
            timeout ends before its first plan.
        sharding_types: the sharding types it may choose from: ``"auto"`` (the default,
            ``AUTO``): the full space (``FULL_SEARCH``) on a cluster (more than one host) or when
            a table needs more memory than one device offers, else table-wise (plus
            column-wise with ``allow_column_split``), its search before the full space (the full
            space plans single hosts differently and 20-60 times slower); ``"all"``
            (``FULL_SEARCH``): every type TorchRec's ``EmbeddingBagCollectionSharder`` offers for
            ``compute_device`` (on cuda: data_parallel, table_wise, column_wise,
            table_column_wise, row_wise, table_row_wise, grid_shard; on cpu the first four); or a
            sequence of TorchRec's type values to restrict it to (``allow_column_split`` then
            plays no part).

        name: the planner's name in reports (default: ``torchrec``, or ``torchrec_cpu`` for cpu).

    Raises ``PlannerError(UNAVAILABLE)`` when constructed without torchrec installed.
    """

    def __init__(
        self,
        allow_column_split: bool = False,
        cost_model: CostModel | None = None,
        storage_reservation: float = 0.15,
        compute_device: str = "cuda",
        time_budget_s: float | None = None,
        sharding_types: str | Sequence[str] = AUTO,
        name: str | None = None,
    ) -> None:
        if compute_device not in ("cuda", "cpu"):
            raise ValueError(f"compute_device must be cuda or cpu, not {compute_device!r}")
        if isinstance(sharding_types, str):
            if sharding_types not in (AUTO, FULL_SEARCH):
                raise ValueError(f"sharding_types must be {AUTO!r}, {FULL_SEARCH!r} or a list of types")
        else:
            known = {k.value for k in ShardingType}
            if not sharding_types or any(t not in known for t in sharding_types):
                raise ValueError(f"sharding_types must be TorchRec's types {sorted(known)}, not {sharding_types!r}")
            sharding_types = tuple(sharding_types)
        self.sharding_types = sharding_types
        self.compute_device = compute_device
        self.name = name or ("torchrec" if compute_device == "cuda" else "torchrec_cpu")
        try:
            from autoshard.torchrec import bridge as torchrec_bridge
        except (ImportError, OSError) as error:
            raise PlannerError(
                PlannerErrorKind.UNAVAILABLE,
                f"TorchRec's planner needs torchrec, which does not import ({error})",
                (INSTALL_FIX,),
            ) from None
        self._bridge = torchrec_bridge
        self.allow_column_split = allow_column_split
        self.cost_model = cost_model
        self.storage_reservation = storage_reservation
        self.time_budget_s = time_budget_s

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        """Our plan, carrying TorchRec's own per-device estimate in ``own_estimate_ms``."""
        result = self.plan_with_estimates(workload, topology)
        return replace(result.plan, own_estimate_ms=result.torchrec_estimates_ms)

    def plan_with_estimates(self, workload: Workload, topology: Topology) -> TorchRecPlanResult:
        """Plan, and keep TorchRec's per-device perf estimates. Placement constraints (pin,
        co-locate, apart) have no counterpart in TorchRec's planner: ``PlannerError`` (skipped)."""
        if workload.constraints.placement:
            raise PlannerError(
                PlannerErrorKind.UNAVAILABLE,
                "TorchRec's planner cannot pin, co-locate or keep tables apart (the workload's placement constraints)",
                ("compare with the planners that honour them", "drop the placement constraints for this comparison"),
            )
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.distributed.planner import EmbeddingShardingPlanner

        from autoshard.torchrec.annotation_lookup import find_annotations_once

        find_annotations_once()  # TorchRec's estimator as fast as ours uses it: the same estimates
        from torchrec.distributed.planner import Topology as TorchRecTopology
        from torchrec.distributed.planner.storage_reservations import (
            HeuristicalStorageReservation,
        )
        from torchrec.distributed.planner.types import (
            PlannerError as TorchRecPlannerError,
        )

        started = time.perf_counter()
        types = self.search_space(workload, topology)
        offered = tuple(EmbeddingBagCollectionSharder().sharding_types(self.compute_device)) if types is None else types
        kernels = self.offered_kernels(workload)
        units = [Unit.of(TableShard(k[-1]), 0.0) for k in kernels]  # each at its kernel of least device memory
        _check_before(units, workload, topology, offered)
        world_size = topology.num_devices
        soft_deadline = None if self.time_budget_s is None else started + SOFT_BUDGET_SHARE * self.time_budget_s
        with _quiet_torchrec() as timed_out:
            planner = EmbeddingShardingPlanner(
                topology=TorchRecTopology(
                    **torchrec_topology_args(
                        topology, self.compute_device, getattr(self.cost_model, "ddr_cap_bytes", None)
                    )
                ),
                batch_size=workload.batch_size,
                storage_reservation=HeuristicalStorageReservation(
                    percentage=self.storage_reservation, dense_tensor_estimate=0
                ),
                constraints=self._constraints(workload, types, kernels),
                stats=[],
                debug=False,
                timeout_seconds=_left(soft_deadline),  # type: ignore[arg-type]  # compared with float seconds
            )
            _timeout_from_search(planner, soft_deadline)
            try:
                with _stopped_after(self.time_budget_s, started):
                    torchrec_plan = planner.plan(self._module(workload), [EmbeddingBagCollectionSharder()])
            except TorchRecPlannerError as error:
                if timed_out:
                    raise _budget_error(self.time_budget_s) from None
                if _splits_rows(offered):
                    check_total(sum(u.memory_bytes for u in units), topology)
                else:
                    check_feasible(units, topology, _splits_columns(offered))
                raise self._no_plan_error(workload, topology, error, offered) from None
        estimates = [0.0] * world_size
        for option in planner._best_plan or ():
            for shard in option.shards:
                estimates[shard.rank] += shard.perf.total
        plan = self._bridge.from_torchrec_plan(
            torchrec_plan,
            workload,
            world_size,
            self.cost_model,
            self.name,
            time.perf_counter() - started,
            topology.local_world_size,
        )
        plan = replace(plan, partial=bool(timed_out))
        if self.cost_model is None:
            plan = replace(plan, devices=tuple(replace(d, cost_ms=e) for d, e in zip(plan.devices, estimates)))
        return TorchRecPlanResult(plan, tuple(estimates))

    def search_space(self, workload: Workload, topology: Topology) -> tuple[str, ...] | None:
        """The sharding types TorchRec may choose from for this task (``None``: every type its
        sharder offers; see ``sharding_types``)."""
        if self.sharding_types == FULL_SEARCH:
            return None
        if self.sharding_types != AUTO:
            return tuple(self.sharding_types)
        if topology.num_hosts > 1 or any(t.memory_bytes > topology.device_memory_bytes for t in workload.tables):
            return None
        split = (self._bridge.COLUMN_WISE,) if self.allow_column_split else ()
        return (self._bridge.TABLE_WISE, *split)

    def offered_kernels(self, workload: Workload) -> list[tuple[Table, ...]]:
        """Each table under each sharded kernel TorchRec may choose for it, least device memory
        last: the kernels our planners may choose under ``cost_model`` (TorchRec's estimator:
        ``table_kernels``, those its constraints allow that ``compute_device`` offers), else
        ``fused`` alone (the learned profiles measured it alone)."""
        if not chooses_kernels(self.cost_model):
            return [(t,) for t in workload.tables]
        return [table_kernels(workload, t, self.compute_device) for t in workload.tables]

    def _constraints(
        self, workload: Workload, types: tuple[str, ...] | None, kernels: Sequence[tuple[Table, ...]]
    ) -> dict[str, Any]:
        """Per table: the sharding types (``None``: all the sharder offers), its kernels (and
        dense, data parallel's only kernel, where data parallel may be chosen) with the cache
        load factor of ``fused_uvm_caching`` as ``CacheParams``, its pooling factor."""
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.distributed.types import CacheParams

        out = {}
        for t, options in zip(workload.tables, kernels):
            own = workload.constraints.of(t.name)
            kinds = types
            if own is not None and own.sharding_types is not None:  # the table's own constraint narrows it
                kinds = tuple(
                    k for k in (types or [s.value for s in ShardingType]) if ShardingType(k) in own.sharding_types
                )
            names = list(dict.fromkeys(o.compute_kernel for o in options))
            if kinds is None or ShardingType.DATA_PARALLEL.value in kinds:
                names.append(self._bridge.DENSE)
            cached = next((o for o in options if o.compute_kernel == FUSED_UVM_CACHING), None)
            out[t.name] = ParameterConstraints(
                sharding_types=None if kinds is None else list(kinds),
                compute_kernels=names,
                pooling_factors=[t.pooling_factor],
                min_partition=own.min_partition if own is not None else None,
                cache_params=None if cached is None else CacheParams(load_factor=cached.load_factor),
            )
        return out

    def _module(self, workload: Workload) -> EmbeddingBagCollection:
        """The workload on ``meta``, each weight tagged with its optimizer so that TorchRec counts
        the optimizer state in its memory estimate (as ``apply_optimizer_in_backward`` would)."""
        import torch
        from torchrec.optim import RowWiseAdagrad

        optimizer_class = {
            Optimizer.SGD: torch.optim.SGD,
            Optimizer.ADAGRAD: torch.optim.Adagrad,
            Optimizer.ROWWISE_ADAGRAD: RowWiseAdagrad,
        }
        module = self._bridge.embedding_bag_collection(workload)
        for table in workload.tables:
            weight = module.embedding_bags[table.name].weight
            weight._optimizer_classes = [optimizer_class[table.optimizer]]  # type: ignore[attr-defined]
        return module

    def _no_plan_error(
        self, workload: Workload, topology: Topology, error: Exception, types: tuple[str, ...]
    ) -> PlannerError:
        found = _UNPLACED.search(str(error))
        reason = (
            f"it found no room for table {found['table']!r} ({int(found['need']):,} bytes with "
            f"its buffers; the most a device had left was {int(found['free']):,})"
            if found
            else str(error).strip().splitlines()[0]
        )
        fixes: tuple[str, ...] = (
            FIX_DEVICES,
            FIX_MEMORY,
            f"reduce the batch size ({workload.batch_size}): TorchRec reserves input and "
            "output buffers for it on every device",
            f"lower storage_reservation ({self.storage_reservation})",
        )
        if not _splits_columns(types) and not _splits_rows(types):
            fixes += (FIX_SPLIT,)
        return PlannerError(
            PlannerErrorKind.INSUFFICIENT_MEMORY,
            f"the tables fit {topology.num_devices} device(s) by AutoShard's count, "
            f"but not within TorchRec's reservations: {reason}",
            fixes,
        )


def torchrec_topology_args(
    topology: Topology, compute_device: str = "cuda", ddr_cap_bytes: int | None = None
) -> dict[str, Any]:
    """The keyword arguments of TorchRec's ``Topology`` for ours: world and local world size, the
    memory cap (HBM on cuda, DDR on cpu), per rank through ``CustomTopologyData`` where devices
    differ, on cuda each rank's host memory for the UVM kernels (TorchRec's ``ddr_cap``:
    ``ddr_cap_bytes``, else its default), and the bandwidths in TorchRec's bytes/ms (ours are
    GiB/s)."""
    from torchrec.distributed.planner.types import CustomTopologyData

    cap = "hbm_cap" if compute_device == "cuda" else "ddr_cap"
    args: dict[str, Any] = {
        "world_size": topology.world_size,
        "local_world_size": topology.local_world_size,
        "compute_device": compute_device,
        cap: topology.device_memory_bytes,
        "intra_host_bw": topology.intra_host_bw_gbps * GIB / 1000,
        "inter_host_bw": topology.inter_host_bw_gbps * GIB / 1000,
    }
    if compute_device == "cuda" and ddr_cap_bytes is not None:
        args["ddr_cap"] = ddr_cap_bytes
    if not topology.uniform_memory:
        args["custom_topology_data"] = CustomTopologyData(
            {cap: list(topology.device_memory_bytes_all)}, topology.world_size
        )
    return args


def _splits_rows(types: tuple[str, ...]) -> bool:
    return any(ShardingType(t).splits_rows for t in types)


def _splits_columns(types: tuple[str, ...]) -> bool:
    return bool({ShardingType.COLUMN_WISE.value, ShardingType.TABLE_COLUMN_WISE.value} & set(types))


def _check_before(units: Sequence[Unit], workload: Workload, topology: Topology, types: tuple[str, ...]) -> None:
    """Raise before planning what no plan of these sharding types can get round: too little
    memory in all (any types), a table larger than a device (whole tables only), or too narrow
    for TorchRec's column blocks (column splits but no row splits)."""
    if _splits_rows(types):
        check_total(sum(u.memory_bytes for u in units), topology)
    elif _splits_columns(types):
        _check_cuttable(workload, topology)
    else:
        check_feasible(units, topology, split_allowed=False)


def _check_cuttable(workload: Workload, topology: Topology) -> None:
    """Raise before planning if a table too large for one device is too narrow for TorchRec to
    cut: its column-wise shards are never narrower than ``MIN_CW_DIM`` (128) columns, so a
    table of fewer than twice that stays whole (``TableShard``'s shards may be 4 columns wide)."""
    from torchrec.distributed.planner.constants import MIN_CW_DIM

    capacity = topology.device_memory_bytes
    for table in workload.tables:
        if table.memory_bytes > capacity and table.embedding_dim < 2 * MIN_CW_DIM:
            raise PlannerError(
                PlannerErrorKind.TABLE_DOES_NOT_FIT,
                f"table {table.name!r} needs {fmt_bytes(table.memory_bytes)}, more than one device's "
                f"{fmt_bytes(capacity)}, and TorchRec's column-wise sharding cuts no shard narrower than "
                f"{MIN_CW_DIM} columns: its {table.embedding_dim} columns stay whole",
                (
                    FIX_MEMORY,
                    FIX_SHRINK,
                    "leave it to AutoShard's planners (cost_greedy, rl, rl+refine), "
                    "which split it into narrower column shards",
                ),
            )


_UNPLACED = re.compile(
    r"Couldn't find a rank for shard .*?storage: Storage\(hbm=(?P<need>\d+).*?"
    r"of table (?P<table>[^,]+), largest device storage: Storage\(hbm=(?P<free>\d+)"
)


class _TimedOut(logging.Filter):
    """Notes TorchRec planner's log line that its ``timeout_seconds`` ran out (it keeps the best
    plan found by then, and says so only there), and lets only its errors through."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            self.seen = self.seen or record.getMessage().startswith("Exceeded time limit")
            return False
        return True

    def __bool__(self) -> bool:
        return self.seen


class _NoSpecWarning(logging.Filter):
    """Drops TorchRec's root-logger warning for every data-parallel table of its own plans
    ("Sharding spec not found": data parallel has none, by design)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Sharding spec not found")


@contextmanager
def _quiet_torchrec() -> Iterator[_TimedOut]:
    """Silence TorchRec planner's advice aimed at its own users (topology factory, dry runs) and
    its data-parallel warnings; yield what says whether its timeout ran out."""
    logger = logging.getLogger("torchrec.distributed.planner")
    planners = logging.getLogger("torchrec.distributed.planner.planners")
    level, planners_level = logger.level, planners.level
    timed_out, no_spec = _TimedOut(), _NoSpecWarning()
    logger.setLevel(logging.ERROR)
    planners.setLevel(logging.INFO)  # its timeout note reaches ``timed_out``, which keeps it there
    planners.addFilter(timed_out)
    root = logging.getLogger()
    root.addFilter(no_spec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield timed_out
    finally:
        root.removeFilter(no_spec)
        planners.removeFilter(timed_out)
        planners.setLevel(planners_level)
        logger.setLevel(level)


__all__ = ["AUTO", "FULL_SEARCH", "TorchRecPlanResult", "TorchRecPlanner", "torchrec_topology_args"]


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.perf_counter(), 1e-6)


def _timeout_from_search(planner: Any, deadline: float | None) -> None:
    """Make TorchRec's ``timeout_seconds`` end at ``deadline`` (``time.perf_counter``): TorchRec
    counts it from the start of its proposals, after its enumeration and its proposers' loading
    (a second or more on a few dozen tables with every sharding type), so it is set again when
    its last proposer has loaded. Without the attributes this needs (TorchRec 1.8's
    ``_proposers`` and ``_timeout_seconds``) the timeout stays counted from that start."""
    proposers = getattr(planner, "_proposers", None)
    if deadline is None or not proposers or not hasattr(planner, "_timeout_seconds"):
        return
    last = proposers[-1]
    load = last.load

    def load_then_start_the_clock(*args: Any, **kwargs: Any) -> None:
        load(*args, **kwargs)
        planner._timeout_seconds = _left(deadline)

    last.load = load_then_start_the_clock


def _budget_error(budget_s: float | None) -> PlannerError:
    return PlannerError(
        PlannerErrorKind.TIME_BUDGET,
        f"TorchRec's planner did not finish within the time budget of {budget_s:g} s",
        ("raise the time budget", "leave torchrec out of the planners"),
    )


class _OutOfTime(Exception):
    """The time budget of ``_stopped_after`` ran out."""


@contextmanager
def _stopped_after(budget_s: float | None, started: float) -> Iterator[None]:
    """Raise ``PlannerError(TIME_BUDGET)`` once ``budget_s`` has passed since ``started``
    (``time.perf_counter``) inside the block. By SIGALRM, so only in a main thread (the CLI, a
    service worker process); elsewhere the block runs to its end."""
    if budget_s is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(budget_s - (time.perf_counter() - started), 1e-6))
        yield
    except _OutOfTime:
        raise _budget_error(budget_s) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
