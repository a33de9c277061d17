"""cost_greedy against TorchRec's planner with every sharding type, on multi-host topologies and
tables larger than a device (issue 51): the bundled ``giants`` and ``hosts`` suites.

    python benchmarks/sharding_4d.py giants hosts                     # both suites, predicted
    python benchmarks/sharding_4d.py giants --time-limit 60 --tasks criteo_tb_2x8,criteo_tb_4x8
    python benchmarks/sharding_4d.py giants --measure --rounds 4      # also measured here (minutes a task)

For every task of each suite, both planners plan the same workload on the same topology:

- ``cost_greedy`` as the product ships it: the default profile's cost model, with each device's
  all-to-all per link tier (``WithCommunication``), every sharding type, ``--time-limit`` as its
  time budget (past it, its best plan so far, marked partial).
- TorchRec's ``EmbeddingShardingPlanner`` (``TorchRecPlanner``, planner ``torchrec``) with its full
  search space (every type its sharder offers on cuda: data_parallel, table_wise, column_wise,
  table_column_wise, row_wise, table_row_wise, grid_shard), fused kernels, TorchRec's default
  proposers and storage reservation, under the same time limit (TorchRec keeps its best plan at
  80% of it, marked partial; past the limit itself it has no plan). So that both planners have the
  same bytes for tables, each device's HBM cap given to TorchRec is raised by what its
  reservation takes back: the 15% margin and its input (KJT) buffers, ``(cap + kjt) / 0.85``
  (``torchrec_caps_gb``). TorchRec also counts each shard's input and output buffers against a
  device; that stays its own. Whether each plan fits OUR per-device memory is reported.

Each plan is priced twice: under our cost model (compute + all-to-all, ms per iteration) and under
TorchRec's own perf estimate (``EmbeddingPerfEstimator``, what its planner minimises): for
TorchRec's plan the estimate its planner kept (``own_estimate_ms``), for cost_greedy's the same
estimator run on its shards (``torchrec_estimate_ms``: TorchRec's enumerator builds each table's
sharding option of the plan's type and the estimator prices the plan's own shards; re-run on
TorchRec's own plan, it gives back TorchRec's figures exactly: ``estimate_check``). Reported per
task and in geometric mean: both maxima under both models, the ratio cost_greedy / torchrec under
each, the tables per sharding type in each plan, planning times, and whether TorchRec's plan was
partial, timed out or failed (with the error). The issue's bars: cost_greedy <= 0.85 x TorchRec in
geometric mean (predicted, our model), and <= 1 on every task.

``--measure`` also runs both plans' device sets here with the interleaved microbenchmark
(``autoshard.evaluation.measure_plan.measure_plans``, as ``autoshard evaluate --measure``; tables
capped at ``--row-cap-mb`` MiB of rows, as the traces are): each round's max of measured compute
plus the modelled all-to-all, cost_greedy's over TorchRec's, geometric mean with a 95% interval.

Writes ``OUT/<suite>.json`` (after every task) and ``OUT/<suite>.md``, and prints the table.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
import traceback
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.communication import WithCommunication  # noqa: E402
from autoshard.core.errors import AutoShardError  # noqa: E402
from autoshard.core.stats import geomean, ratio_ci95  # noqa: E402
from autoshard.core.task import Task, load_suite  # noqa: E402
from autoshard.core.types import GIB, Optimizer, ShardingPlan, Topology, Workload  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from benchmarks import sharding_4d_judges as judges  # noqa: E402
from cost_model.process import one_thread  # noqa: E402

BAR_GEOMEAN = 0.85
"""cost_greedy's predicted max over TorchRec's, geometric mean over a suite's tasks (our model)."""
BAR_TASK = 1.0
"""... and on every task."""
DEFAULT_TIME_LIMIT_S = 120.0
STORAGE_RESERVATION = 0.15
"""TorchRec's default storage reservation, as ``TorchRecPlanner`` sets it."""
KJT_COPIES = 20
"""TorchRec's ``HeuristicalStorageReservation``: 2 pipelined batches of 10 copies of each device's input ids."""


# --- TorchRec's side ----------------------------------------------------------------------------


def kjt_bytes(workload: Workload) -> int:
    """The input (KJT) buffers TorchRec's storage reservation takes from every device: the batch's
    ids of every table (pooling factor x batch, 8-byte ids), 20 copies (``_reserve_kjt_storage``)."""
    from torchrec.distributed.planner.constants import BIGINT_DTYPE

    ids = sum(t.pooling_factor * workload.batch_size for t in workload.tables)
    return math.ceil(ids * float(BIGINT_DTYPE)) * KJT_COPIES


def torchrec_caps_gb(workload: Workload, topology: Topology, reservation: float = STORAGE_RESERVATION) -> Topology:
    """``topology`` with each device's memory raised by what TorchRec's storage reservation keeps
    back (``reservation`` of the cap, then the input buffers), so that TorchRec has the bytes for
    tables that our planners have: ``int((1 - reservation) x cap') - kjt >= cap``."""
    kjt = kjt_bytes(workload)

    def raised(gb: float) -> float:
        needed = math.ceil((gb * GIB + kjt) / (1.0 - reservation)) + 1024  # a KiB above float rounding
        return needed / GIB

    caps = tuple(raised(topology.device_memory_gb_of(r)) for r in range(topology.num_devices))
    return Topology.cluster(  # equal caps collapse to one value
        topology.num_hosts,
        topology.devices_per_host,
        caps,
        topology.intra_host_bw_gbps,
        topology.inter_host_bw_gbps,
    )


def torchrec_planner(cost_model: Any, time_limit_s: float, compute_device: str = "cuda") -> tuple[Any, str]:
    """TorchRec's planner for ``compute_device`` with its full search space (and what that space
    is, for the report): ``torchrec`` on cuda, ``torchrec_cpu`` on cpu, where TorchRec's sharder
    offers only data-parallel, table-, column- and table-column-wise. A checkout whose
    ``TorchRecPlanner`` has no ``sharding_types`` gets its default search."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    from autoshard.torchrec import planner as module

    full = getattr(module, "FULL_SEARCH", None)
    if full is not None and "sharding_types" in inspect.signature(module.TorchRecPlanner).parameters:
        planner = module.TorchRecPlanner(
            cost_model=cost_model, time_budget_s=time_limit_s, sharding_types=full, compute_device=compute_device
        )
        offered = ", ".join(EmbeddingBagCollectionSharder().sharding_types(compute_device))
        return planner, f"every type its sharder offers on {compute_device} ({offered})"
    planner = module.TorchRecPlanner(allow_column_split=True, cost_model=cost_model, time_budget_s=time_limit_s)
    return planner, "table_wise, column_wise (this checkout's TorchRecPlanner has no full search)"


def torchrec_estimate_ms(plan: ShardingPlan, workload: Workload, topology: Topology) -> list[float]:
    """TorchRec's own perf estimate of each device of ``plan`` (``torchrec_estimates``)."""
    return torchrec_estimates(plan, workload, topology)[0]


def torchrec_estimates(
    plan: ShardingPlan, workload: Workload, topology: Topology, compute_device: str = "cuda", links: Any = None
) -> tuple[list[float], list[int]]:
    """TorchRec's own estimates of each device of ``plan``: its perf (ms per iteration, summed
    over the device's shards as its planner sums them) and its storage (bytes: HBM on cuda, DDR on
    cpu). TorchRec's enumerator builds, for each table, the sharding option of the plan's sharding
    type and kernel (fused; data parallel: dense), its shards are replaced by the plan's own
    (sizes, offsets, ranks), and TorchRec's estimators price them on ``topology`` (its
    ``world_size``, ``local_world_size``, bandwidths; ``links``: a ``GeneralizedCommsBandwidth`` in
    place of its declared bandwidths). Independent of ``--model torchrec``'s code: the check of it."""
    estimate, storage = [0.0] * topology.world_size, [0] * topology.world_size
    for shard in _estimated_shards(plan, workload, topology, compute_device, links):
        estimate[shard.rank] += shard.perf.total
        storage[shard.rank] += shard.storage.hbm if compute_device == "cuda" else shard.storage.ddr
    return estimate, storage


def torchrec_rank_parts(
    plan: ShardingPlan, workload: Workload, topology: Topology, compute_device: str = "cuda", links: Any = None
) -> list[tuple[float, float]]:
    """TorchRec's estimate of each rank of ``plan`` split as (compute, communication), ms: its
    shards' forward, backward and prefetch compute; their forward and backward comms (the input
    dist's comms, which TorchRec's ``Perf.total`` and so its planner leave out, left out too);
    ``links`` as ``torchrec_estimates``'."""
    parts = [[0.0, 0.0] for _ in range(topology.world_size)]
    for shard in _estimated_shards(plan, workload, topology, compute_device, links):
        perf = shard.perf
        parts[shard.rank][0] += perf.fwd_compute + perf.bwd_compute + perf.prefetch_compute
        parts[shard.rank][1] += perf.fwd_comms + perf.bwd_comms
    return [(c, m) for c, m in parts]


def _estimated_shards(
    plan: ShardingPlan, workload: Workload, topology: Topology, compute_device: str, links: Any = None
) -> list[Any]:
    """TorchRec's ``Shard``s of ``plan``, each with its perf and storage estimate (see
    ``torchrec_estimates``)."""
    import torch
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import Topology as TorchRecTopology
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.types import ParameterConstraints, Shard
    from torchrec.optim import RowWiseAdagrad

    from autoshard.torchrec import bridge
    from autoshard.torchrec.planner import torchrec_topology_args

    shardings = bridge.table_shardings(plan, workload, topology.world_size, topology.local_world_size)
    constraints = {
        t.name: ParameterConstraints(
            sharding_types=[shardings[t.name].sharding_type.value],
            compute_kernels=[shardings[t.name].compute_kernel],
            pooling_factors=[t.pooling_factor],
        )
        for t in workload.tables
    }
    enumerator = EmbeddingEnumerator(
        TorchRecTopology(**torchrec_topology_args(topology, compute_device), generalized_comms_bandwidths=links),
        workload.batch_size,
        constraints,
    )
    module = bridge.embedding_bag_collection(workload)
    optimizer: dict[Optimizer, type[torch.optim.Optimizer]] = {
        Optimizer.SGD: torch.optim.SGD,
        Optimizer.ADAGRAD: torch.optim.Adagrad,
    }
    for table in workload.tables:  # its optimizer state in TorchRec's storage estimate, as TorchRecPlanner tags it
        weight = module.embedding_bags[table.name].weight
        weight._optimizer_classes = [optimizer.get(table.optimizer, RowWiseAdagrad)]  # type: ignore[attr-defined]
    options: dict[str, Any] = {}
    for option in enumerator.enumerate(module, [EmbeddingBagCollectionSharder()]):
        options.setdefault(option.name, option)
    for name, option in options.items():
        option.shards = [
            Shard(size=[p.rows, p.columns], offset=[p.row_offset, p.column_offset], rank=p.rank)
            for p in shardings[name].shards
        ]
    enumerator.populate_estimates(list(options.values()))
    shards = [shard for option in options.values() for shard in option.shards]
    assert all(s.perf is not None and s.storage is not None and s.rank is not None for s in shards)
    return shards


def torchrec_reserved_bytes(
    workload: Workload, topology: Topology, compute_device: str = "cuda", reservation: float = STORAGE_RESERVATION
) -> list[int]:
    """What TorchRec's ``HeuristicalStorageReservation`` leaves each rank of ``topology`` for
    shards (its planner's default, no dense part), from TorchRec's own code."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import Topology as TorchRecTopology
    from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
    from torchrec.distributed.planner.types import ParameterConstraints

    from autoshard.torchrec import bridge
    from autoshard.torchrec.planner import torchrec_topology_args

    constraints = {t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in workload.tables}
    reserved = HeuristicalStorageReservation(percentage=reservation, dense_tensor_estimate=0).reserve(
        TorchRecTopology(**torchrec_topology_args(topology, compute_device)),
        workload.batch_size,
        bridge.embedding_bag_collection(workload),
        [EmbeddingBagCollectionSharder()],
        constraints,
    )
    return [int(d.storage.hbm if compute_device == "cuda" else d.storage.ddr) for d in reserved.devices]


# --- one task -----------------------------------------------------------------------------------


def sharding_counts(plan: ShardingPlan) -> dict[str, int]:
    """Tables per sharding type (a table's shards all have its type)."""
    kinds = {s.table.name: s.sharding_type.value for d in plan.devices for s in d.shards}
    return dict(sorted(Counter(kinds.values()).items()))


def not_table_wise(plan: ShardingPlan) -> dict[str, str]:
    """Each table the plan splits or replicates, and its sharding type."""
    kinds = {s.table.name: s.sharding_type.value for d in plan.devices for s in d.shards}
    return {name: kind for name, kind in sorted(kinds.items()) if kind != "table_wise"}


def memory_fit(plan: ShardingPlan, topology: Topology) -> dict[str, Any]:
    """The fullest device's bytes against its cap (ours), and whether every device fits."""
    used = [d.memory_bytes / topology.device_memory_bytes_of(r) for r, d in enumerate(plan.devices)]
    return {"fits_our_caps": all(u <= 1.0 + 1e-9 for u in used), "fullest_device_share": round(max(used), 4)}


def compute_max_ms(plan: ShardingPlan, compute: Any, batch_size: int) -> float:
    """The plan's max under our cost model's compute alone (no collectives), each shard at the
    bags DMP gives it (``at_dmp_batch``: a sharded shard B x W, a replica B), as the plan's own
    costs price it."""
    from autoshard.core.costing import predict_nonempty
    from autoshard.core.dmp_batch import at_dmp_batch

    sets = [[s.as_table for s in d.shards] for d in plan.devices]
    return max(predict_nonempty(at_dmp_batch(compute, len(plan.devices)), sets, batch_size))


def _plan_summary(plan: ShardingPlan, topology: Topology, compute: Any, batch_size: int) -> dict[str, Any]:
    return {
        "max_ms": plan.max_cost_ms,
        "compute_max_ms": compute_max_ms(plan, compute, batch_size),
        "plan_time_s": round(plan.plan_time_s, 3),
        "partial": plan.partial,
        "sharding_types": sharding_counts(plan),
        "not_table_wise": not_table_wise(plan),
        "shards": sum(len(d.shards) for d in plan.devices),
        **memory_fit(plan, topology),
        "device_ms": [round(d.cost_ms, 4) for d in plan.devices],
    }


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def run_task(
    task: Task, profile: Any, time_limit_s: float, measure: Any = None, torchrec_device: str = "cuda"
) -> tuple[dict, list]:
    """Both planners on one task: its row of the report, and the plans (cost_greedy's, TorchRec's;
    None where a planner failed). TorchRec plans for ``torchrec_device`` (``torchrec`` on cuda,
    ``torchrec_cpu`` on cpu)."""
    workload, topology = task.workload, task.topology
    row: dict[str, Any] = {
        "task": task.name,
        "tables": len(workload.tables),
        "hosts": topology.num_hosts,
        "devices_per_host": topology.devices_per_host,
        "device_memory_gb": topology.memory_label,
        "tables_gib": round(workload.memory_bytes / GIB, 2),
        "largest_table_gib": round(max(t.memory_bytes for t in workload.tables) / GIB, 2),
        "memory_over_tables": round(topology.total_memory_bytes / workload.memory_bytes, 3),
        "torchrec_device": torchrec_device,
    }
    cost_model = WithCommunication(profile.model, profile.communication, topology)
    plans: list[ShardingPlan | None] = [None, None]

    # cost_greedy, as the product plans (compare_planners wraps the communication model the same way)
    context = PlannerContext(profile.model, profile.policy, time_budget_s=time_limit_s)
    started = time.perf_counter()
    try:
        comparison = compare_planners(workload, topology, ["cost_greedy"], context, profile.communication)
        if comparison.plans:
            plans[0] = comparison.plans[0]
            row["cost_greedy"] = _plan_summary(comparison.plans[0], topology, profile.model, workload.batch_size)
        else:
            row["cost_greedy"] = {"error": comparison.skipped[0][1] if comparison.skipped else "no plan"}
    except Exception as error:  # noqa: BLE001 - a benchmark reports a planner's failure and goes on
        row["cost_greedy"] = {"error": _error(error), "traceback": traceback.format_exc(limit=6)}
    row["cost_greedy"].setdefault("wall_s", round(time.perf_counter() - started, 3))

    # TorchRec, full search for its compute device, the same bytes for tables; where TorchRec's CPU
    # sharder cannot place the tables (no row-wise types on cpu), its cuda search space instead
    raised = torchrec_caps_gb(workload, topology)
    row["torchrec_hbm_cap_gb"] = raised.memory_label
    plans[1], row["torchrec"] = _torchrec_plan(
        workload, raised, topology, cost_model, profile, time_limit_s, torchrec_device
    )
    if torchrec_device == "cpu" and plans[1] is None and not row["torchrec"].get("timed_out"):
        row["torchrec_cpu_error"] = row["torchrec"]["error"]
        torchrec_device = "cuda"
        plans[1], row["torchrec"] = _torchrec_plan(
            workload, raised, topology, cost_model, profile, time_limit_s, "cuda"
        )
    row["torchrec_device"] = torchrec_device
    row["torchrec_planner"] = row["torchrec"].pop("planner", None)
    row["torchrec_search_space"] = row["torchrec"].pop("search_space", None)

    # TorchRec's estimator on TorchRec's own plan, for its own device: its planner's figures again
    if plans[1] is not None and plans[1].own_estimate_ms:
        try:
            again = torchrec_estimates(plans[1], workload, raised, torchrec_device)[0]
            row["estimate_check"] = max(abs(a - b) for a, b in zip(again, plans[1].own_estimate_ms))
        except Exception as error:  # noqa: BLE001
            row["estimate_check"] = _error(error)
    if plans[0] is not None and plans[1] is not None:
        row["ratio_ours"] = plans[0].max_cost_ms / plans[1].max_cost_ms
        row["ratio_ours_compute_only"] = row["cost_greedy"]["compute_max_ms"] / row["torchrec"]["compute_max_ms"]
        measured = measure(plans, workload, topology) if measure is not None else None
        if measured is not None:
            row["measured"] = measured
        row["judges"] = judge_task(plans, workload, topology, raised, profile, torchrec_device, measured)
        estimated = row["judges"].get("torchrec_estimator")
        if estimated:
            row["cost_greedy"]["torchrec_estimate_max_ms"] = estimated["cost_greedy"]["max_ms"]
            row["torchrec"]["torchrec_estimate_max_ms"] = estimated["torchrec"]["max_ms"]
            row["ratio_torchrec_estimate"] = estimated["cost_greedy"]["max_ms"] / estimated["torchrec"]["max_ms"]
        else:
            row["cost_greedy"]["torchrec_estimate_error"] = row["judges"].get("estimator_error")
            row["ratio_torchrec_estimate"] = None
    return row, plans


def _torchrec_plan(
    workload: Workload,
    raised: Topology,
    topology: Topology,
    cost_model: Any,
    profile: Any,
    time_limit_s: float,
    device: str,
) -> tuple[ShardingPlan | None, dict[str, Any]]:
    """TorchRec's plan for ``device`` on the raised caps, and its summary (or its error)."""
    started = time.perf_counter()
    summary: dict[str, Any]
    plan = None
    try:
        planner, space = torchrec_planner(cost_model, time_limit_s, device)
        plan = planner.plan(workload, raised)
        summary = _plan_summary(plan, topology, profile.model, workload.batch_size)
        summary["own_estimate_max_ms"] = max(plan.own_estimate_ms) if plan.own_estimate_ms else None
        summary.update(planner=planner.name, search_space=space)
    except AutoShardError as error:
        timed_out = getattr(getattr(error, "kind", None), "value", "") == "time_budget"
        summary = {"error": _error(error), "timed_out": timed_out}
    except Exception as error:  # noqa: BLE001 - a benchmark reports a planner's failure and goes on
        summary = {"error": _error(error), "traceback": traceback.format_exc(limit=6)}
    summary.setdefault("wall_s", round(time.perf_counter() - started, 3))
    return plan, summary


def judge_task(
    plans: list,
    workload: Workload,
    topology: Topology,
    raised: Topology,
    profile: Any,
    torchrec_device: str,
    measured: dict | None,
) -> dict[str, Any]:
    """The three judges of both plans side by side (``sharding_4d_judges``): our model (each
    rank's compute and collectives, ``predict_ranks``), TorchRec's estimator on each plan's shards
    (for TorchRec's device, or cuda where cost_greedy's plan uses a type TorchRec's CPU sharder
    lacks: ``estimator_device``) at the topology's declared links and, where the profile measured
    its links, at those (``autoshard.torchrec.measured_links``), and the measurement where there is
    one; which plan each prefers, and where ours and TorchRec's disagree, the cause their split shows."""
    from autoshard.torchrec.judges import estimator_device, predict_ranks
    from autoshard.torchrec.measured_links import MEASURED_LINKS, measured_links

    by = dict(zip(judges.PLANS, plans))
    ours = {
        name: judges.JudgedPlan.of(
            [
                (r.lookup_ms, r.total_ms - r.lookup_ms)
                for r in predict_ranks(plan, workload.batch_size, topology, profile.model, profile.communication)
            ]
        )
        for name, plan in by.items()
    }
    device = torchrec_device if torchrec_device == "cuda" else estimator_device(plans)
    note = (
        f"{judges.NOT_ON_CPU}: cost_greedy's plan uses {', '.join(judges.types_not_on_cpu(plans[0]))}, "
        "so both plans are estimated as cuda plans"
        if device != torchrec_device
        else f"estimated on {device}"
    )
    out: dict[str, Any] = {"estimator_device": device, "estimator_note": note}
    estimated: dict[str, Any] | None = None
    try:
        estimated = {
            name: judges.JudgedPlan.of(torchrec_rank_parts(plan, workload, raised, device)) for name, plan in by.items()
        }
        storage = torchrec_estimates(plans[0], workload, raised, device)[1]
        caps = torchrec_reserved_bytes(workload, raised, device)
        out["cost_greedy_fits_torchrec_caps"] = all(u <= c for u, c in zip(storage, caps))
    except Exception as error:  # noqa: BLE001 - a plan TorchRec cannot estimate is reported, not fatal
        out["estimator_error"] = _error(error)
    links = measured_links(profile.communication, topology)
    at_links: dict[str, Any] | None = None
    if links is not None and estimated:
        out["measured_links"] = links.describe()
        at_links = {
            name: judges.JudgedPlan.of(torchrec_rank_parts(plan, workload, raised, device, links))
            for name, plan in by.items()
        }
    measured_ms = (measured["cost_greedy_max_ms"], measured["torchrec_max_ms"]) if measured else None
    verdicts = judges.verdicts(ours, estimated, note, measured_ms, at_links)
    out["ours"] = {name: j.to_dict() for name, j in ours.items()}
    if estimated:
        out["torchrec_estimator"] = {name: j.to_dict() for name, j in estimated.items()}
    if at_links:
        out[MEASURED_LINKS] = {name: j.to_dict() for name, j in at_links.items()}
    out["prefers"] = verdicts.preferred()
    out["agree"] = verdicts.agree
    out["disagreement"] = verdicts.disagreement()
    if estimated and out["prefers"]["autoshard"] != out["prefers"]["torchrec_estimator"]:
        out["cause"] = judges.cause(
            ours,
            estimated,
            by,
            {
                "our_links": judges.links(profile.communication, topology),
                "declared_links": f"{topology.intra_host_bw_gbps:g} / {topology.inter_host_bw_gbps:g} GiB/s",
                "estimator_device": device,
                "torchrec_device": torchrec_device,
                "torchrec_over_our_cap": not memory_fit(plans[1], topology)["fits_our_caps"],
                "cost_greedy_over_torchrec_cap": out.get("cost_greedy_fits_torchrec_caps") is False,
                "at_measured_links": out["prefers"].get(MEASURED_LINKS),
            },
        )
    if at_links and out["prefers"]["autoshard"] != out["prefers"].get(MEASURED_LINKS):
        out["cause_at_measured_links"] = judges.cause_at_links(ours, at_links, by, device)
    return out


def measured_maxima(
    plan: ShardingPlan, rounds_ms: Any, batch_size: int, topology: Topology, communication: Any
) -> list[float]:
    """Each round's max over ``plan``'s devices of measured compute (``rounds_ms``: per round, per
    device) plus the device's modelled collectives."""
    extra = [communication.cost_ms([s.as_table for s in d.shards], batch_size, topology) for d in plan.devices]
    return [max(m + c for m, c in zip(devices, extra)) for devices in rounds_ms]


def measured_ratio(plans: list, workload: Workload, topology: Topology, rounds: int, row_cap_mb: int, profile: Any):
    """Both plans measured here in interleaved rounds: per round, each plan's max over its devices
    of measured compute (each device as DMP runs a rank: its sharded shards at B x W bags, its
    replicas at B) plus the modelled collectives; cost_greedy's over TorchRec's."""
    from autoshard.evaluation.measurers import plans_measurer

    measured = plans_measurer(rounds, row_cap_mb, profile)(plans, workload.batch_size, 1, topology.num_devices)
    ours = measured_maxima(plans[0], measured[0].round_device_ms, workload.batch_size, topology, profile.communication)
    theirs = measured_maxima(
        plans[1], measured[1].round_device_ms, workload.batch_size, topology, profile.communication
    )
    ratio, low, high = ratio_ci95(ours, theirs)
    compute = measured[0].ratio_to_reference
    c_low, c_high = measured[0].ratio_ci95
    return {
        "rounds": rounds,
        "row_cap_mb": row_cap_mb,
        "ratio": ratio,
        "ci95": [low, high],
        "compute_only_ratio": compute,
        "compute_only_ci95": [c_low, c_high],
        "cost_greedy_max_ms": sorted(ours)[len(ours) // 2],
        "torchrec_max_ms": sorted(theirs)[len(theirs) // 2],
    }


# --- the report ---------------------------------------------------------------------------------


def summarise(rows: list[dict]) -> dict[str, Any]:
    paired = [r for r in rows if r.get("ratio_ours") is not None]
    ours = [r["ratio_ours"] for r in paired]
    estimated = [r["ratio_torchrec_estimate"] for r in paired if r.get("ratio_torchrec_estimate")]
    worse = [r["task"] for r in paired if r["ratio_ours"] > BAR_TASK]
    failed = {
        f"{r['task']}/{name}": r[name]["error"]
        for r in rows
        for name in ("cost_greedy", "torchrec")
        if "error" in r.get(name, {})
    }
    summary: dict[str, Any] = {
        "tasks": len(rows),
        "paired_tasks": len(paired),
        "geomean_ratio_ours": geomean(ours) if ours else None,
        "geomean_ratio_ours_compute_only": geomean([r["ratio_ours_compute_only"] for r in paired]) if paired else None,
        "geomean_ratio_torchrec_estimate": geomean(estimated) if estimated else None,
        "tasks_worse_under_torchrec_estimate": [
            r["task"] for r in paired if (r.get("ratio_torchrec_estimate") or 0) > 1
        ],
        "tasks_where_cost_greedy_is_worse": worse,
        "failed": failed,
        "torchrec_partial": [r["task"] for r in rows if r.get("torchrec", {}).get("partial")],
        "cost_greedy_partial": [r["task"] for r in rows if r.get("cost_greedy", {}).get("partial")],
    }
    summary["bar_geomean_met"] = bool(ours) and summary["geomean_ratio_ours"] <= BAR_GEOMEAN and not failed
    summary["bar_every_task_met"] = bool(ours) and not worse and len(paired) == len(rows)
    measured = [r["measured"]["ratio"] for r in paired if "measured" in r]
    if measured:
        summary["geomean_measured_ratio"] = geomean(measured)
    judged = [r["judges"] for r in paired if "judges" in r]
    summary["judges_prefer_cost_greedy"] = {
        judge: sum(1 for j in judged if j["prefers"].get(judge) == "cost_greedy")
        for judge in ("autoshard", "torchrec_estimator", judges.MEASURED_LINKS, "measured")
        if any(j["prefers"].get(judge) for j in judged)
    }
    summary["judges_disagree"] = [
        r["task"]
        for r in paired
        if "judges" in r and r["judges"]["prefers"].get("autoshard") != r["judges"]["prefers"].get("torchrec_estimator")
    ]
    summary["measured_links_side_with_ours"] = [
        r["task"]
        for r in paired
        if "judges" in r
        and r["judges"]["prefers"].get(judges.MEASURED_LINKS) is not None
        and r["judges"]["prefers"][judges.MEASURED_LINKS] == r["judges"]["prefers"].get("autoshard")
    ]
    summary["torchrec_cpu_cannot_plan"] = {
        r["task"]: r["torchrec_cpu_error"] for r in rows if r.get("torchrec_cpu_error")
    }
    summary["estimated_as_cuda"] = [
        r["task"] for r in paired if "judges" in r and r["judges"]["estimator_device"] != r.get("torchrec_device")
    ]
    return summary


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _types(counts: dict[str, int]) -> str:
    short = {
        "table_wise": "TW",
        "column_wise": "CW",
        "table_column_wise": "TWCW",
        "row_wise": "RW",
        "table_row_wise": "TWRW",
        "grid_shard": "GRID",
        "data_parallel": "DP",
    }
    return " ".join(f"{short.get(k, k)} {v}" for k, v in counts.items())


def markdown(report: dict) -> str:
    s = report["summary"]
    lines = [
        f"# cost_greedy vs TorchRec's planner (full search): suite `{report['suite']}`",
        "",
        f"`{report['command']}` ({report['started']}, profile `{report['profile']}`, time limit "
        f"{report['time_limit_s']:g} s a planner a task; TorchRec's planner "
        f"`{report.get('torchrec_planner', 'torchrec')}`: {report['torchrec_search_space']}).",
        "",
        f"Communication: {report.get('communication', 'as the profile')}.",
        "",
        f"At commit `{report['git']['commit'][:10]}`"
        + (f" with uncommitted edits to {', '.join(report['git']['modified'])}" if report["git"]["modified"] else "")
        + f"; 1-minute load {report['host_load_1min']:.1f} at the start, "
        f"{report.get('host_load_1min_end', report['host_load_1min']):.1f} at the end"
        f" ({os.cpu_count()} cores): planning times are wall-clock seconds on this host.",
        "",
        "Max = the slowest device, ms per iteration. *ours*: our cost model, compute + all-to-all per "
        "link tier; *TR est.*: TorchRec's own perf estimate (for cost_greedy's plan, TorchRec's "
        "estimator run on its shards). Ratio = cost_greedy / torchrec (< 1: cost_greedy is better). "
        "Types: tables per sharding type. TorchRec's HBM cap is raised by its storage reservation "
        "(same bytes for tables).",
        "",
        "| task | H x L x GiB | cg max (ours) | tr max (ours) | ratio (ours) | ratio (ours, compute only) "
        "| cg max (TR est.) | tr max (TR est.) | ratio (TR est.) | cg types | tr types | cg s | tr s | tr status |"
        + (
            " measured ratio [95% CI] (with the modelled all-to-all) |"
            if s.get("geomean_measured_ratio") is not None
            else ""
        ),
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |"
        + (" ---: |" if s.get("geomean_measured_ratio") is not None else ""),
    ]
    for r in report["rows"]:
        cg, tr = r.get("cost_greedy", {}), r.get("torchrec", {})
        status = (
            "timed out"
            if tr.get("timed_out")
            else "failed"
            if "error" in tr
            else "partial"
            if tr.get("partial")
            else "complete"
        )
        if r.get("torchrec_cpu_error"):
            status = f"torchrec_cpu cannot plan, so torchrec (cuda types): {status}"
        if "fits_our_caps" in tr and not tr["fits_our_caps"]:
            status += f", over our cap ({tr['fullest_device_share']:.2f}x)"
        if "error" in cg:
            status += "; cost_greedy failed"
        elif cg.get("partial"):
            status += "; cost_greedy partial"
        cells = [
            r["task"],
            f"{r['hosts']} x {r['devices_per_host']} x {r['device_memory_gb']}",
            _f(cg.get("max_ms")),
            _f(tr.get("max_ms")),
            _f(r.get("ratio_ours")),
            _f(r.get("ratio_ours_compute_only")),
            _f(cg.get("torchrec_estimate_max_ms")),
            _f(tr.get("torchrec_estimate_max_ms", tr.get("own_estimate_max_ms"))),
            _f(r.get("ratio_torchrec_estimate")),
            _types(cg.get("sharding_types", {})) or "-",
            _types(tr.get("sharding_types", {})) or "-",
            _f(cg.get("plan_time_s", cg.get("wall_s")), 2),
            _f(tr.get("plan_time_s", tr.get("wall_s")), 2),
            status,
        ]
        if s.get("geomean_measured_ratio") is not None:
            m = r.get("measured")
            cells.append(
                f"{m['ratio']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]; "
                f"compute alone {m['compute_only_ratio']:.3f}"
                if m
                else "-"
            )
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Geometric mean of cost_greedy / torchrec: **{_f(s['geomean_ratio_ours'])}** under our model "
        f"(bar <= {BAR_GEOMEAN}: {'met' if s['bar_geomean_met'] else 'NOT met'}), "
        f"{_f(s['geomean_ratio_ours_compute_only'])} under our model's compute alone, "
        f"{_f(s['geomean_ratio_torchrec_estimate'])} under TorchRec's estimate"
        + (f", {_f(s['geomean_measured_ratio'])} measured" if s.get("geomean_measured_ratio") is not None else "")
        + f"; over {s['paired_tasks']} of {s['tasks']} tasks.",
        f"cost_greedy worse than TorchRec (our model) on: {', '.join(s['tasks_where_cost_greedy_is_worse']) or 'none'} "
        f"(bar: none; {'met' if s['bar_every_task_met'] else 'NOT met'}).",
    ]
    lines.append(
        "cost_greedy worse than TorchRec under TorchRec's estimate on: "
        + (", ".join(s["tasks_worse_under_torchrec_estimate"]) or "none")
        + "."
    )
    if s["failed"]:
        lines.append("Failed: " + "; ".join(f"{k}: {v}" for k, v in s["failed"].items()))
    if s["torchrec_partial"]:
        lines.append("TorchRec partial (its time ran out; best plan by then): " + ", ".join(s["torchrec_partial"]))
    return "\n".join(lines + judges_markdown(report)) + "\n"


def judges_markdown(report: dict, heading: str | None = "## The judges side by side") -> list[str]:
    """The judges side by side: each judge's max of each plan (compute + communication), the plan
    it prefers, and where ours and TorchRec's estimator disagree, the cause (under ``heading``;
    None: none, ``benchmarks/report`` gives its own)."""
    s = report["summary"]
    prefer = s.get("judges_prefer_cost_greedy", {})
    judged = sum(1 for r in report["rows"] if "judges" in r)
    lines = [
        *(["", heading, ""] if heading else []),
        "Each judge's slowest rank of each plan, ms per iteration, as compute + communication at that "
        "judge's largest (*ours*: our model's compute at DMP's batch and its collectives per link tier; "
        "*TR est.*: TorchRec's `EmbeddingPerfEstimator` on each plan's shards, priced for "
        + ("cuda" if report.get("torchrec_device") == "cuda" else "cpu where it can, else cuda")
        + ", with the topology's declared bandwidths; *measured*: each rank's shards microbenchmarked "
        "here plus the modelled communication). cg = cost_greedy, tr = "
        + f"`{report.get('torchrec_planner', 'torchrec')}`.",
        "",
        f"Judges preferring cost_greedy's plan, of {judged} tasks: "
        + ", ".join(f"{judge} {n}" for judge, n in prefer.items())
        + ". Ours and TorchRec's estimator disagree on: "
        + (", ".join(s.get("judges_disagree", [])) or "none")
        + ".",
    ]
    at_links = [r for r in report["rows"] if judges.MEASURED_LINKS in r.get("judges", {})]
    if at_links:
        sides = s.get("measured_links_side_with_ours", [])
        lines.append("")
        lines.append(
            f"*{judges.MEASURED_LINKS_TITLE}*: TorchRec's estimator with the profile's measured bandwidth of each "
            f"collective per link tier as its `Topology`'s comms bandwidths "
            f"({at_links[0]['judges']['measured_links']}). It prefers the plan ours prefers on "
            f"{len(sides)} of {len(at_links)} tasks" + (f" ({', '.join(sides)})" if sides else "") + "."
        )
    show_links = bool(at_links)
    if s.get("torchrec_cpu_cannot_plan"):
        lines.append(
            f"{judges.NOT_ON_CPU}: `torchrec_cpu` cannot plan {', '.join(s['torchrec_cpu_cannot_plan'])} "
            "(a table larger than a device that column-wise cannot cut: "
            + next(iter(s["torchrec_cpu_cannot_plan"].values())).split("\n")[0]
            + "), so there TorchRec's cuda planner `torchrec` (row-wise types too) is the reference."
        )
    if s.get("estimated_as_cuda"):
        lines.append(
            f"{judges.NOT_ON_CPU}: on {', '.join(s['estimated_as_cuda'])} cost_greedy's plan uses a type it lacks, "
            "so TorchRec's estimator prices both plans there as cuda plans."
        )
    lines += [
        "",
        "| task | ours: cg / tr (compute + comm) | ours prefers | TR est.: cg / tr (compute + comm) | TR est. prefers "
        + ("| TR est. at measured links: cg / tr (compute + comm) | it prefers " if show_links else "")
        + "| measured: cg / tr | measured prefers | cause of the disagreement |",
        "| --- | --- | --- | --- | --- |" + (" --- | --- |" if show_links else "") + " --- | --- | --- |",
    ]

    def pair(judge: dict | None) -> str:
        if not judge:
            return "-"
        return " / ".join(
            f"{j['max_ms']:.3g} ({j['compute_ms']:.3g} + {j['comm_ms']:.3g})"
            for j in (judge["cost_greedy"], judge["torchrec"])
        )

    for r in report["rows"]:
        j = r.get("judges")
        if not j:
            continue
        m = r.get("measured")
        prefers = j["prefers"]
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{r['task']} (tr: {r.get('torchrec_planner') or '-'})",
                    pair(j.get("ours")),
                    prefers.get("autoshard") or "-",
                    pair(j.get("torchrec_estimator")) if j.get("torchrec_estimator") else j.get("estimator_error", "-"),
                    (prefers.get("torchrec_estimator") or "-")
                    + (" (as cuda)" if j["estimator_device"] != r.get("torchrec_device") else ""),
                    *(
                        [pair(j.get(judges.MEASURED_LINKS)), prefers.get(judges.MEASURED_LINKS) or "-"]
                        if show_links
                        else []
                    ),
                    f"{m['cost_greedy_max_ms']:.3g} / {m['torchrec_max_ms']:.3g}" if m else "-",
                    prefers.get("measured") or "-",
                    "; ".join(j[k] for k in ("cause", "cause_at_measured_links") if k in j) or "-",
                ]
            )
            + " |"
        )
    return lines


def run_suite(suite: str, args: argparse.Namespace, profile: Any, command: str) -> dict:
    name, tasks = load_suite(suite)
    if args.tasks:
        wanted = set(args.tasks.split(","))
        tasks = [t for t in tasks if t.name in wanted]
    measure = None
    if args.measure:
        measure = lambda plans, workload, topology: measured_ratio(  # noqa: E731
            plans, workload, topology, args.rounds, args.row_cap_mb, profile
        )
    planner, space = torchrec_planner(None, args.time_limit, args.torchrec_device)
    report: dict[str, Any] = {
        "suite": name,
        "command": command,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "host_load_1min": os.getloadavg()[0],
        "git": _git_state(),
        "profile": getattr(profile, "profile", str(args.model)),
        "communication": profile.communication.describe() if profile.communication else "none",
        "time_limit_s": args.time_limit,
        "torchrec_search_space": space,
        "torchrec_device": args.torchrec_device,
        "torchrec_planner": planner.name,
        "torchrec_storage_reservation": STORAGE_RESERVATION,
        "bars": {"geomean": BAR_GEOMEAN, "every_task": BAR_TASK},
        "rows": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{name}.json"
    for task in tasks:
        row, _ = run_task(task, profile, args.time_limit, measure, args.torchrec_device)
        report["rows"].append(row)
        report["summary"] = summarise(report["rows"])
        out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        cg, tr = row.get("cost_greedy", {}), row.get("torchrec", {})
        print(
            f"{name}/{task.name}: cost_greedy {_f(cg.get('max_ms'))} ms, torchrec {_f(tr.get('max_ms'))} ms, "
            f"ratio {_f(row.get('ratio_ours'))} (TorchRec's estimate: {_f(row.get('ratio_torchrec_estimate'))})"
            + (f"; torchrec: {tr['error']}" if "error" in tr else "")
            + (f"; cost_greedy: {cg['error']}" if "error" in cg else ""),
            flush=True,
        )
    report["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    report["host_load_1min_end"] = os.getloadavg()[0]
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    (args.out / f"{name}.md").write_text(markdown(report))
    return report


def _git_state() -> dict[str, Any]:
    """The commit planned at, and the project's files that differ from it (others' edits included)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout

    changed = git("status", "--porcelain", "--untracked-files=no", "--", "autoshard", "cost_model")
    return {"commit": git("rev-parse", "HEAD").strip(), "modified": [line[3:] for line in changed.splitlines()]}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="*", default=["giants", "hosts"], help="suite files or bundled names")
    parser.add_argument("--tasks", help="only these tasks (comma-separated names)")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="seconds a planner a task")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the profile (default: the shipped one)")
    parser.add_argument("--measure", action="store_true", help="also measure both plans here, interleaved")
    parser.add_argument("--rounds", type=int, default=4, help="with --measure: rounds (even balances the order)")
    parser.add_argument("--row-cap-mb", type=int, default=128, help="with --measure: MiB of rows per table, at most")
    parser.add_argument(
        "--torchrec-device",
        choices=("cuda", "cpu"),
        help="what TorchRec plans for (default: the profile's compute device; cpu: planner torchrec_cpu)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "benchmarks" / "sharding_4d")
    args = parser.parse_args(argv)
    command = "python " + " ".join(["benchmarks/sharding_4d.py", *(argv if argv is not None else sys.argv[1:])])
    if args.measure:
        from cost_model.profile import MALLOC_SETTINGS, malloc_settings_active

        if not malloc_settings_active():  # they must be set before the process starts
            if argv is not None:
                sys.exit("error: --measure needs the allocator settings set before Python starts")
            os.environ.update(MALLOC_SETTINGS)
            os.execv(sys.executable, [sys.executable, *sys.argv])
    one_thread()
    profile = load_profile_or_exit(args.model)
    if args.torchrec_device is None:
        args.torchrec_device = "cuda" if str(profile.device.get("device_type", "cuda")).startswith("cuda") else "cpu"
    reports = [run_suite(suite, args, profile, command) for suite in args.suites]
    for report in reports:
        print(markdown(report))
    return reports


if __name__ == "__main__":
    main()
