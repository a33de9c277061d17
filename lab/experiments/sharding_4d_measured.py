"""The measured judge on a few tasks of ``giants`` / ``hosts`` (issue 61): cost_greedy against
every heuristic and TorchRec's planner for the profile's device, all measured here in interleaved
rounds, each device as DMP runs a rank (its sharded shards at B x W bags, its replicas at B:
``measure_plans(world_size=...)``), plus each device's modelled collectives (as
``benchmarks/sharding_4d.py --measure``).

    nice -n 19 python lab/experiments/sharding_4d_measured.py hosts --tasks syn80_2x4 \\
        --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 --rounds 2 --out OUT

Writes ``OUT/<suite>_measured.json``: per task, each planner's predicted max, its measured max
(median over rounds) and its measured max over cost_greedy's per round (geometric mean, 95% CI),
and cost_greedy's over the best heuristic (by measured median) and over TorchRec's plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.stats import ratio_ci95  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.core.types import ShardingPlan  # noqa: E402
from autoshard.evaluation.measurers import plans_measurer  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from benchmarks.sharding_4d import _git_state, measured_maxima  # noqa: E402
from cost_model.process import one_thread  # noqa: E402

HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


def critical_devices(plan: ShardingPlan, share: float) -> ShardingPlan:
    """``plan`` with only the devices whose predicted cost is at least ``share`` of its predicted
    max: the ranks that can be its slowest within the model's per-rank error (DMP MAPE 15%), so
    that plans of 16-128 ranks can be measured on one core in minutes, not hours."""
    top = plan.max_cost_ms
    return replace(plan, devices=tuple(d for d in plan.devices if d.cost_ms >= share * top))


def measure_task(
    task: Any, profile: Any, rounds: int, row_cap_mb: int, time_limit_s: float, share: float
) -> dict[str, Any]:
    """Every planner's plan of ``task``, measured in interleaved rounds (cost_greedy's first).
    Where TorchRec's CPU sharder cannot plan the task, TorchRec's cuda planner is the reference,
    as in ``benchmarks/sharding_4d.py``."""
    workload, topology = task.workload, task.topology
    torchrec = "torchrec" if str(profile.device.get("device_type", "cuda")).startswith("cuda") else "torchrec_cpu"
    context = PlannerContext(profile.model, profile.policy, time_budget_s=time_limit_s)
    names = ["cost_greedy", *HEURISTICS, torchrec]
    comparison = compare_planners(workload, topology, names, context, profile.communication)
    if torchrec == "torchrec_cpu" and not any(p.planner == torchrec for p in comparison.plans):
        torchrec = "torchrec"
        fallback = compare_planners(workload, topology, [torchrec], context, profile.communication)
        comparison = replace(comparison, plans=(*comparison.plans, *fallback.plans))
    plans = [critical_devices(p, share) for p in comparison.plans]
    measured = plans_measurer(rounds, row_cap_mb, profile)(plans, workload.batch_size, 0, topology.num_devices)
    maxima = {
        p.planner: measured_maxima(p, m.round_device_ms, workload.batch_size, topology, profile.communication)
        for p, m in zip(plans, measured)
    }
    reference = maxima["cost_greedy"]
    planners: dict[str, dict[str, Any]] = {}
    for plan, alone in zip(plans, measured):
        ratio, low, high = ratio_ci95(maxima[plan.planner], reference)
        planners[plan.planner] = {
            "predicted_max_ms": round(plan.max_cost_ms, 4),
            "devices_measured": len(plan.devices),
            "measured_max_ms": round(sorted(maxima[plan.planner])[len(reference) // 2], 4),
            "over_cost_greedy": [round(ratio, 4), round(low, 4), round(high, 4)],
            "compute_only_over_cost_greedy": [round(alone.ratio_to_reference, 4), *map(float, alone.ratio_ci95)],
        }
    heuristics = [h for h in HEURISTICS if h in planners]
    best = min(heuristics, key=lambda h: planners[h]["measured_max_ms"]) if heuristics else None
    row: dict[str, Any] = {
        "task": task.name,
        "devices": topology.num_devices,
        "torchrec_planner": torchrec,
        "planners": planners,
        "skipped": dict(comparison.skipped),
    }
    for name, other in (("best_heuristic", best), ("torchrec", torchrec if torchrec in maxima else None)):
        if other is not None:
            ratio, low, high = ratio_ci95(reference, maxima[other])
            row[f"cost_greedy_over_{name}"] = {"planner": other, "measured": [ratio, low, high]}
            row[f"cost_greedy_over_{name}"]["predicted"] = (
                planners["cost_greedy"]["predicted_max_ms"] / planners[other]["predicted_max_ms"]
            )
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite")
    parser.add_argument("--tasks", required=True, help="comma-separated task names")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--row-cap-mb", type=int, default=128)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--critical-share", type=float, default=0.8, help="measure devices predicted >= this share of the max"
    )
    args = parser.parse_args(argv)
    from cost_model.profile import MALLOC_SETTINGS, malloc_settings_active

    if not malloc_settings_active():  # they must be set before the process starts
        os.environ.update(MALLOC_SETTINGS)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    one_thread()
    profile = load_profile_or_exit(args.model)
    name, tasks = load_suite(args.suite)
    wanted = args.tasks.split(",")
    out = args.out / f"{name}_measured.json"
    report: dict[str, Any] = (
        json.loads(out.read_text())
        if out.exists()
        else {  # resume: tasks done stay
            "command": "python lab/experiments/sharding_4d_measured.py " + " ".join(sys.argv[1:]),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "load_1min_start": os.getloadavg()[0],
            "git": _git_state(),
            "profile": profile.profile,
            "critical_share": args.critical_share,
            "rows": [],
        }
    )
    done = {r["task"] for r in report["rows"]}
    args.out.mkdir(parents=True, exist_ok=True)
    for task in (t for t in tasks if t.name in wanted and t.name not in done):
        started = time.perf_counter()
        row = measure_task(task, profile, args.rounds, args.row_cap_mb, args.time_limit, args.critical_share)
        row["wall_s"] = round(time.perf_counter() - started, 1)
        row["load_1min_end"] = os.getloadavg()[0]
        report["rows"].append(row)
        out.write_text(json.dumps(report, indent=1) + "\n")  # a checkpoint after every task
    return report


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
