"""TorchRec's own planner (``EmbeddingShardingPlanner``) behind our Planner interface.

It plans for a CUDA topology of ``num_hosts`` x ``devices_per_host`` devices (TorchRec's
``world_size`` and ``local_world_size``, and its intra-/inter-host bandwidths) with
``device_memory_bytes`` of HBM each, or each rank its own cap through TorchRec's
``CustomTopologyData`` (no GPU is needed to plan), fused kernels, table-wise sharding (plus column-wise when allowed),
TorchRec's default proposers, partitioner and storage reservation. Needs the ``torchrec`` extra.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from autoshard.core.errors import PlannerError, PlannerErrorKind
from autoshard.core.types import (
    GIB,
    CostModel,
    Optimizer,
    ShardingPlan,
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
    fmt_bytes,
)
from autoshard.planners.placement_unit import Unit

if TYPE_CHECKING:
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

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
        allow_column_split: also let TorchRec shard tables column-wise (it only cuts equal widths
            of at least 128 columns, multiples of 4, that divide the dimension).
        cost_model: fills the plan's device costs; without one they are TorchRec's estimates.
        storage_reservation: the fraction of each device's memory TorchRec keeps back (its
            default 0.15); it also reserves room for each device's input and output buffers.
        compute_device: what TorchRec plans for: ``"cuda"`` (its GPU perf model, memory as HBM;
            the planner ``torchrec``) or ``"cpu"`` (its CPU perf model, memory as DDR; the planner
            ``torchrec_cpu``, the fair reference when plans are measured on a CPU).

        time_budget_s: TorchRec's planner takes no budget of its own (minutes on thousands of
            tables): past this one it is stopped and ``plan`` raises ``PlannerError(TIME_BUDGET)``
            (``_stopped_after``).

    Raises ``PlannerError(UNAVAILABLE)`` when constructed without torchrec installed.
    """

    def __init__(
        self,
        allow_column_split: bool = False,
        cost_model: CostModel | None = None,
        storage_reservation: float = 0.15,
        compute_device: str = "cuda",
        time_budget_s: float | None = None,
    ) -> None:
        if compute_device not in ("cuda", "cpu"):
            raise ValueError(f"compute_device must be cuda or cpu, not {compute_device!r}")
        self.compute_device = compute_device
        self.name = "torchrec" if compute_device == "cuda" else "torchrec_cpu"
        try:
            from autoshard.core import torchrec_bridge
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
        """Plan, and keep TorchRec's per-device perf estimates."""
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.distributed.planner import EmbeddingShardingPlanner
        from torchrec.distributed.planner import Topology as TorchRecTopology
        from torchrec.distributed.planner.storage_reservations import (
            HeuristicalStorageReservation,
        )
        from torchrec.distributed.planner.types import (
            PlannerError as TorchRecPlannerError,
        )

        started = time.perf_counter()
        units = [Unit.of(TableShard(t), 0.0) for t in workload.tables]
        if not self.allow_column_split:
            check_feasible(units, topology, split_allowed=False)
        else:
            _check_cuttable(workload, topology)
        world_size = topology.num_devices
        with _quiet_torchrec():
            planner = EmbeddingShardingPlanner(
                topology=TorchRecTopology(**torchrec_topology_args(topology, self.compute_device)),
                batch_size=workload.batch_size,
                storage_reservation=HeuristicalStorageReservation(
                    percentage=self.storage_reservation, dense_tensor_estimate=0
                ),
                constraints=self._constraints(workload),
                stats=[],
                debug=False,
            )
            try:
                with _stopped_after(self.time_budget_s, started):
                    torchrec_plan = planner.plan(self._module(workload), [EmbeddingBagCollectionSharder()])
            except TorchRecPlannerError as error:
                check_feasible(units, topology, self.allow_column_split)
                raise self._no_plan_error(workload, topology, error) from None
        estimates = [0.0] * world_size
        for option in planner._best_plan or ():
            for shard in option.shards:
                estimates[shard.rank] += shard.perf.total
        plan = self._bridge.from_torchrec_plan(
            torchrec_plan, workload, world_size, self.cost_model, self.name, time.perf_counter() - started
        )
        if self.cost_model is None:
            plan = replace(plan, devices=tuple(replace(d, cost_ms=e) for d, e in zip(plan.devices, estimates)))
        return TorchRecPlanResult(plan, tuple(estimates))

    def _constraints(self, workload: Workload) -> dict[str, Any]:
        from torchrec.distributed.planner.types import ParameterConstraints

        sharding_types = [self._bridge.TABLE_WISE]
        if self.allow_column_split:
            sharding_types.append(self._bridge.COLUMN_WISE)
        return {
            t.name: ParameterConstraints(
                sharding_types=sharding_types, compute_kernels=[self._bridge.FUSED], pooling_factors=[t.pooling_factor]
            )
            for t in workload.tables
        }

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

    def _no_plan_error(self, workload: Workload, topology: Topology, error: Exception) -> PlannerError:
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
        if not self.allow_column_split:
            fixes += (FIX_SPLIT,)
        return PlannerError(
            PlannerErrorKind.INSUFFICIENT_MEMORY,
            f"the tables fit {topology.num_devices} device(s) by AutoShard's count, "
            f"but not within TorchRec's reservations: {reason}",
            fixes,
        )


def torchrec_topology_args(topology: Topology, compute_device: str = "cuda") -> dict[str, Any]:
    """The keyword arguments of TorchRec's ``Topology`` for ours: world and local world size, the
    memory cap (HBM on cuda, DDR on cpu), per rank through ``CustomTopologyData`` where devices
    differ, and the bandwidths in TorchRec's bytes/ms (ours are GiB/s)."""
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
    if not topology.uniform_memory:
        args["custom_topology_data"] = CustomTopologyData(
            {cap: list(topology.device_memory_bytes_all)}, topology.world_size
        )
    return args


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


@contextmanager
def _quiet_torchrec() -> Iterator[None]:
    """Silence TorchRec planner's advice aimed at its own users (topology factory, dry runs)."""
    logger = logging.getLogger("torchrec.distributed.planner")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        logger.setLevel(level)


__all__ = ["TorchRecPlanResult", "TorchRecPlanner"]


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
        raise PlannerError(
            PlannerErrorKind.TIME_BUDGET,
            f"TorchRec's planner did not finish within the time budget of {budget_s:g} s",
            ("raise the time budget", "leave torchrec out of the planners"),
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
