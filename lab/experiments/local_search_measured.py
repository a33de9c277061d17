"""Does cost_greedy's local search pay off when measured? Per task, cost_greedy's plan beside the
same greedy placement without local search (``max_rounds=0``) and, with ``--tolerances``, with a
local search that takes only changes lowering the predicted max by more than that share (instead
of 0.1%), and with ``--even-out``, with one that goes on where another device is as loaded
(``improve(even_out=True)``), measured interleaved in one ``measure_plans`` (compute only, as
``evaluate --measure --no-communication``), ratios to cost_greedy per round with 95% intervals.

    python benchmarks/local_search_measured.py --rounds 6 --extra 8 --out docs/figures/local_search_measured.json
    python benchmarks/local_search_measured.py --rounds 6 --extra 8 --even-out --no-plain --grid grid80x8,grid200x4,grid200x8

Tasks: the default suite's tasks where the searches can differ (the 80-table ones and both
Criteo Kaggle batch sizes), the rl_grid suite's grid80x4, only where the variants' plans differ, and ``--extra`` more of syn80x4's kind
(80 test-pool tables on 4 devices, memory 1.3 x an even share, seeds 5, 6, ...). Set the
harness's allocator settings in the environment (docs/traces.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import autoshard.planners.local_search as local_search  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from autoshard.core.task import Task, load_suite, memory_for  # noqa: E402
from autoshard.planners.cost_greedy import CostGreedyPlanner  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.types import ShardingPlan, Topology  # noqa: E402
from cost_model.bench.harness import BenchConfig  # noqa: E402
from autoshard.evaluation.measure_plan import measure_plans  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402

SUITE_TASKS = ("syn80_s1", "syn80_s2", "syn80_s3", "criteo_kaggle", "criteo_kaggle_b8192", "syn80x4")


def tasks(extra: int, grid: Sequence[str] = ()) -> list[Task]:
    chosen = [t for t in load_suite("default")[1] if t.name in SUITE_TASKS]
    chosen += [t for t in load_suite("rl_grid")[1] if t.name == "grid80x4"]
    chosen += [t for t in grid_tasks(GridConfig()) if t.name in grid]  # policy eval's held-out grid
    pool = generate_pool(PoolConfig(size=500, seed=0)).test
    for seed in range(5, 5 + extra):
        workload = sample_task(pool, 80, np.random.default_rng(seed), 2048, f"syn80x4_s{seed}")
        chosen.append(Task(workload.name, workload, Topology(4, memory_for(workload, 4, 1.3))))
    return chosen


def plan_with(model, task: Task, max_rounds: int, tolerance: float, name: str, even_out: bool = False) -> ShardingPlan:
    saved, local_search.REL_TOL = local_search.REL_TOL, tolerance
    try:
        plan = CostGreedyPlanner(model, max_rounds=max_rounds, even_out=even_out).plan(task.workload, task.topology)
    finally:
        local_search.REL_TOL = saved
    return dataclasses.replace(plan, planner=name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--extra", type=int, default=6, help="more 80-table 4-device tasks")
    parser.add_argument("--tolerances", default="", help="comma-separated local-search tolerances to try too "
                                                         "(e.g. 0.005; from 2%% on, no change of cost_greedy's passes)")
    parser.add_argument("--even-out", action="store_true", help="also local search that evens the top out")
    parser.add_argument("--no-plain", action="store_true", help="leave out the placement without local search")
    parser.add_argument("--grid", default="", help="comma-separated tasks of policy eval's grid to add (grid80x8, ...)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.model)
    model = profile.model
    variants = [("cost_greedy", 50, local_search.REL_TOL, False)]
    variants += [] if args.no_plain else [("no local search", 0, local_search.REL_TOL, False)]
    variants += [(f"local search at {float(t):.1%}", 50, float(t), False) for t in args.tolerances.split(",") if t]
    variants += [("evened out", 50, local_search.REL_TOL, True)] if args.even_out else []
    records, logs = [], {name: [] for name, *_ in variants[1:]}
    for task in tasks(args.extra, [g for g in args.grid.split(",") if g]):
        plans = [plan_with(model, task, rounds, tol, name, even) for name, rounds, tol, even in variants]
        if all(p.devices == plans[0].devices for p in plans):
            print(f"{task.name:22s} every variant is cost_greedy's plan: not measured", flush=True)
            continue
        measured = measure_plans(plans, task.workload.batch_size, BenchConfig(mode=default_mode()), rounds=args.rounds)
        rows = {m.planner: {"predicted_max_ms": round(p.max_cost_ms, 4), "measured_max_ms": round(m.max_ms, 4),
                            "ratio_to_cost_greedy": round(m.ratio_to_reference, 4),
                            "ratio_ci95": [round(v, 4) for v in m.ratio_ci95],
                            "same_plan_as_cost_greedy": p.devices == plans[0].devices}
                for p, m in zip(plans, measured)}
        records.append({"task": task.name, "plans": rows})
        for name in logs:
            logs[name].append((math.log(rows[name]["predicted_max_ms"] / rows["cost_greedy"]["predicted_max_ms"]),
                               math.log(rows[name]["ratio_to_cost_greedy"])))
        print(f"{task.name:22s} " + "; ".join(
            f"{n}: pred {r['predicted_max_ms'] / rows['cost_greedy']['predicted_max_ms']:.3f} "
            f"meas {r['ratio_to_cost_greedy']:.3f} [{r['ratio_ci95'][0]:.3f}, {r['ratio_ci95'][1]:.3f}]"
            for n, r in rows.items() if n != "cost_greedy"), flush=True)
    summary = {name: {"predicted_geomean_vs_cost_greedy": round(math.exp(np.mean([p for p, _ in v])), 4),
                      "measured_geomean_vs_cost_greedy": round(math.exp(np.mean([m for _, m in v])), 4)}
               for name, v in logs.items()}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"rounds": args.rounds, "tasks": records, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
