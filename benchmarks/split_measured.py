"""Does column-wise splitting pay, measured? Per task of a suite, cost_greedy's plan without
splits and with them (``--column-split``), and the best-predicted heuristic's of each, measured
interleaved in one ``measure_plans`` (compute only, as ``evaluate --measure --no-communication``).

    python benchmarks/split_measured.py default --tasks criteo_terabyte,criteo_terabyte_fp16_rowwise \
        --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 --rounds 6 --out runs/split_measured.json

Per task it prints each plan's predicted and measured max and its ratio to cost_greedy's unsplit
plan, per round with the 95% interval. Set the harness's allocator settings in the environment
(docs/traces.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import DEFAULT_MODEL, measuring_profile  # noqa: E402
from autoshard.evaluation import load_suite  # noqa: E402
from autoshard.planners import HEURISTICS, PlannerContext  # noqa: E402
from autoshard.planners.compare import compare_planners  # noqa: E402
from cost_model.bench import BenchConfig  # noqa: E402
from cost_model.measure_plan import measure_plans  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("--tasks", help="comma-separated task names (default: every task)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    loaded = measuring_profile(args.model)
    _, tasks = load_suite(args.suite)
    wanted = set(args.tasks.split(",")) if args.tasks else None
    config = BenchConfig(mode=default_mode(), row_cap_bytes=128 * 2**20)
    results = []
    for task in tasks:
        if wanted is not None and task.name not in wanted:
            continue
        plans = []
        for split in (False, True):
            context = PlannerContext(loaded.model, loaded.policy, allow_column_split=split)
            found = compare_planners(task.workload, task.topology, ["cost_greedy", *HEURISTICS], context).plans
            greedy = next(p for p in found if p.planner == "cost_greedy")
            heuristic = min((p for p in found if p.planner != "cost_greedy"), key=lambda p: p.max_cost_ms)
            suffix = " split" if split else ""
            plans += [dataclasses.replace(greedy, planner=f"cost_greedy{suffix}"),
                      dataclasses.replace(heuristic, planner=f"{heuristic.planner}{suffix}")]
        measured = measure_plans(plans, task.workload.batch_size, config, args.rounds, reference=0)
        print(f"{task.name}: {len(task.workload.tables)} tables on {task.topology.num_devices} devices, "
              f"{args.rounds} rounds, against cost_greedy's unsplit plan")
        rows = []
        for plan, m in zip(plans, measured):
            low, high = m.ratio_ci95
            print(f"  {plan.planner:28s} predicted {plan.max_cost_ms:8.3f}  measured {m.max_ms:8.3f} ms  "
                  f"ratio {m.ratio_to_reference:.3f} [{low:.3f}, {high:.3f}]")
            rows.append({"plan": plan.planner, "predicted_max_ms": plan.max_cost_ms, "measured_max_ms": m.max_ms,
                         "ratio": m.ratio_to_reference, "ci95": list(m.ratio_ci95),
                         "measured_device_ms": list(m.device_ms)})
        results.append({"task": task.name, "plans": rows})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": str(args.model), "rounds": args.rounds, "tasks": results}, indent=1)
                            + "\n")


if __name__ == "__main__":
    main()
