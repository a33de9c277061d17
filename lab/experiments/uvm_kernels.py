"""Kernels under TorchRec's model: the giants suite with each device's memory scaled down
(``--memory-scale``, default 0.5: all devices together hold 0.65-0.7 x the tables, so the tables
exceed HBM), planned by cost_greedy under ``--model torchrec`` (cuda), which moves the least-hot
tables to ``fused_uvm_caching`` (``autoshard.torchrec.kernel_choice``), beside:

- the fused-only plan of the same task (every table constrained to ``fused``): none fits;
- the plan at the suite's own memory (every table fits fused), for the price of UVM caching;
- TorchRec's own ``EmbeddingShardingPlanner`` as the product runs it (``torchrec`` at full search),
  offered the same kernels (fused, fused_uvm_caching, fused_uvm; dense for data parallel), same
  topology and storage reservation, its plan priced by the same model and exported as DMP gets
  it (``--torchrec``: it is slow on the larger tasks).

Each plan's max (TorchRec's estimate of its max rank, ms), whether it fits TorchRec's storage on
every rank (HBM: ``fits``; host memory within TorchRec's default ``ddr_cap``: ``fits_ddr``), its
tables per kernel and its planning time (2 shared cores: under load, see ``load``).
Each kernel plan is exported (``to_torchrec_plan``: ``ParameterSharding`` with ``compute_kernel``
and ``cache_params``) to show DMP receives it; ``--dmp`` also loads and runs the 1 x 8 plans under
DMP on this CPU (8 gloo ranks, rows capped), which maps every kernel to FBGEMM's host path.

    python lab/experiments/uvm_kernels.py --out lab/results/uvm_kernels/giants_half.json [--torchrec] [--dmp]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any


def plan_kernels(workload: Any, topology: Any, fused_only: bool = False) -> dict[str, Any]:
    """cost_greedy under --model torchrec (kernels chosen), or with every table kept fused."""
    from autoshard.core.constraints import Constraints, TableConstraints
    from autoshard.core.errors import PlannerError
    from autoshard.planning.options import Models, PlanOptions
    from autoshard.planning.plan import plan
    from autoshard.torchrec.cost_model import TorchRecCostModel

    if fused_only:
        fused = TableConstraints(compute_kernels=("fused", "dense"))
        workload = replace(workload, constraints=Constraints(tuple((t.name, fused) for t in workload.tables)))
    started = time.perf_counter()
    try:
        report = plan(workload, topology, Models(TorchRecCostModel()), PlanOptions(planners=("cost_greedy",)))
    except PlannerError as error:
        return {"planned": False, "error": f"{error.kind.value}: {error.message}"}
    best = report.best_plan
    model = TorchRecCostModel().for_task(report.workload, topology)
    return {
        "planned": True,
        "max_ms": round(best.max_cost_ms, 4),
        "fits": model.overflow_bytes(best) <= 0,
        "fits_ddr": model.host_overflow_bytes(best) <= 0,
        "kernels": dict(
            Counter(t.compute_kernel for t in {s.table.name: s.table for d in best.devices for s in d.shards}.values())
        ),
        "uvm": sorted(
            {f"{s.table.name} {s.table.compute_kernel} {s.sharding_type.value}" for d in best.devices for s in d.shards}
            - {f"{s.table.name} fused {s.sharding_type.value}" for d in best.devices for s in d.shards}
        ),
        "plan_s": round(time.perf_counter() - started, 2),
        "plan": best,
        "workload": report.workload,
    }


def torchrec_uvm(workload: Any, topology: Any) -> dict[str, Any]:
    """The product's TorchRec planner (``torchrec``) at full search beside ``--model torchrec``:
    offered the kernels our planners may choose under it (``TorchRecPlanner.offered_kernels``:
    fused, fused_uvm_caching with its CacheParams, fused_uvm; dense for data parallel), every
    sharding type, its storage reservation (0.15, no dense part); priced by the same model."""
    from autoshard.core.errors import PlannerError
    from autoshard.torchrec import bridge
    from autoshard.torchrec.cost_model import TorchRecCostModel
    from autoshard.torchrec.planner import FULL_SEARCH, TorchRecPlanner

    model = TorchRecCostModel().for_task(workload, topology)
    started = time.perf_counter()
    try:
        ours = TorchRecPlanner(cost_model=model, sharding_types=FULL_SEARCH).plan(workload, topology)
    except PlannerError as error:
        return {
            "planned": False,
            "error": f"{error.kind.value}: {error.message}"[:300],
            "plan_s": round(time.perf_counter() - started, 2),
        }
    export = bridge.to_torchrec_plan(ours, workload, topology.num_devices, "cuda", topology.local_world_size)
    shardings = export.plan[bridge.MODULE_PATH]  # type: ignore[index]
    return {
        "planned": True,
        "max_ms": round(ours.max_cost_ms, 4),
        "fits": model.overflow_bytes(ours) <= 0,
        "fits_ddr": model.host_overflow_bytes(ours) <= 0,
        "kernels": dict(Counter(s.compute_kernel for s in shardings.values())),  # type: ignore[attr-defined]
        "uvm": sorted(
            f"{n} {s.compute_kernel} {s.sharding_type}"
            for n, s in shardings.items()  # type: ignore[attr-defined]
            if "uvm" in s.compute_kernel
        ),
        "cache_params": sorted(
            {repr(s.cache_params) for s in shardings.values() if s.compute_kernel == "fused_uvm_caching"}  # type: ignore[attr-defined]
        ),
        "plan_s": round(ours.plan_time_s, 2),
    }


def exported(entry: dict[str, Any], topology: Any) -> dict[str, Any]:
    """The plan as TorchRec's ShardingPlan: each UVM-caching table's ParameterSharding."""
    from autoshard.torchrec import bridge

    plan = bridge.to_torchrec_plan(
        entry["plan"], entry["workload"], topology.num_devices, "cuda", topology.local_world_size
    )
    shardings = plan.plan[bridge.MODULE_PATH]  # type: ignore[index]
    cached = {n: s for n, s in shardings.items() if s.compute_kernel == "fused_uvm_caching"}  # type: ignore[attr-defined]
    name, first = next(iter(cached.items()), (None, None))
    return {
        "uvm_caching_tables": len(cached),
        "example": None
        if first is None
        else {
            "table": name,
            "sharding_type": first.sharding_type,
            "compute_kernel": first.compute_kernel,
            "cache_params": repr(first.cache_params),
            "ranks": first.ranks,
        },
    }


def dmp_run(entry: dict[str, Any], topology: Any) -> dict[str, Any]:
    """The plan loaded and run under DMP on this CPU (gloo, one rank a device, rows capped)."""
    from autoshard.torchrec.dmp_run import DistributedConfig
    from autoshard.torchrec.dmp_verify import DmpVerifyConfig, measure_plans_dmp

    run = DistributedConfig(
        world_size=topology.num_devices, steps=2, warmups=1, batch_size=256, row_cap_bytes=2 * 2**20
    )
    started = time.perf_counter()
    try:
        [measured] = measure_plans_dmp([entry["plan"]], entry["workload"], DmpVerifyConfig(run, rounds=1))
    except Exception as error:  # noqa: BLE001  # the experiment reports why DMP did not run it
        return {"ran": False, "error": f"{type(error).__name__}: {error}"[:400]}
    return {
        "ran": True,
        "max_abs_error": measured.max_abs_error,
        "max_rank_ms": round(max(r.busy_ms for r in measured.ranks), 2),
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="giants")
    parser.add_argument("--memory-scale", type=float, default=0.5)
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    parser.add_argument("--torchrec", action="store_true", help="also TorchRec's planner offered the UVM kernels")
    parser.add_argument("--dmp", action="store_true", help="also run the 1 x 8 kernel plans under DMP on this CPU")
    parser.add_argument("--fill", type=float, default=None, help="kernel_choice.FILL in its place")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.fill is not None:
        from autoshard.torchrec import kernel_choice

        kernel_choice.FILL = args.fill

    import warnings

    warnings.filterwarnings("ignore")
    from autoshard.core.task import load_suite
    from autoshard.core.types import Topology

    _, tasks = load_suite(args.suite)
    wanted = set(filter(None, args.tasks.split(",")))
    rows = []
    for task in tasks:
        if wanted and task.name not in wanted:
            continue
        own = task.topology
        small = Topology.cluster(own.num_hosts, own.devices_per_host, own.device_memory_gb * args.memory_scale)
        row: dict[str, Any] = {
            "task": task.name,
            "tables": len(task.workload.tables),
            "tables_gib": round(task.workload.memory_bytes / 2**30, 1),
            "hbm_gib": round(small.total_memory_bytes / 2**30, 1),
            "suite_hbm_gib": round(own.total_memory_bytes / 2**30, 1),
        }
        chosen = plan_kernels(task.workload, small)
        row["kernels"] = {k: v for k, v in chosen.items() if k not in ("plan", "workload")}
        row["fused_only"] = {
            k: v
            for k, v in plan_kernels(task.workload, small, fused_only=True).items()
            if k not in ("plan", "workload")
        }
        row["suite_memory"] = {
            k: v for k, v in plan_kernels(task.workload, own).items() if k not in ("plan", "workload")
        }
        if chosen["planned"]:
            row["export"] = exported(chosen, small)
            if args.dmp and small.num_devices == 8:
                row["dmp_cpu"] = dmp_run(chosen, small)
        if args.torchrec:
            row["torchrec_uvm"] = torchrec_uvm(task.workload, small)
        print(json.dumps(row), flush=True)
        rows.append(row)
    load = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"suite": args.suite, "memory_scale": args.memory_scale, "load": load, "tasks": rows}, indent=1)
        + "\n"
    )


if __name__ == "__main__":
    main()
