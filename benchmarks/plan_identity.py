"""Whether a change leaves the plans alone: plan a fixed set of tasks with cost_greedy, rl and
rl+refine, rl+refine_raw (each alone, and the three side by side as the service plans them, sharing their
work; with and without column splits) and the six heuristics (side by side, scored together as
the service scores them) in this checkout, write every plan, and compare two such files.

    python benchmarks/plan_identity.py --out /tmp/new.json
    (cd /tmp/base && python /path/to/benchmarks/plan_identity.py --out /tmp/base.json)  # the commit before
    python benchmarks/plan_identity.py --compare /tmp/base.json /tmp/new.json

The tasks: the held-out grid's 20-400 tables on 4-32 devices (400 tables without splits only)
and 20 of the load test's 80-table, 8-device requests; the profile's model and policy, seed 3.
The planners come from the checkout the script is run in (its working directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

PLANNERS = ("cost_greedy", "rl", "rl+refine", "rl+refine_raw")
HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


def plan_all(out: Path, limit: int | None = None) -> dict:
    root = os.getcwd()
    sys.path[:0] = [root, os.path.join(root, "benchmarks")]
    from load_test import Config, request_body

    from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_exit, one_thread
    from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
    from autoshard.core.task import Task, memory_for
    from autoshard.core.types import Topology
    from autoshard.core.workload_file import topology_from_dict, workload_from_dict
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.compare import compare_planners

    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    tables, rng, tasks = generate_pool(PoolConfig(size=2000, seed=7)).test, np.random.default_rng(0), []
    for count in (20, 80, 200, 400):  # fixed here, whatever the held-out grid's defaults become
        for devices in (4, 8, 16, 32):
            workload = sample_task(tables, count, rng, 2048, f"grid{count}x{devices}")
            tasks.append(Task(workload.name, workload, Topology(devices, memory_for(workload, devices, 1.3))))
    for draw in range(1, 21):
        body = request_body(Config(), draw)
        tasks.append(Task(f"load{draw}", workload_from_dict(body["workload"])[0], topology_from_dict(body["topology"])))
    tasks = tasks[:limit]
    plans, started = {}, time.perf_counter()
    for split in (False, True):
        for task in tasks:
            if split and len(task.workload.tables) > 200:
                continue
            context = PlannerContext(profile.model, profile.policy, 3, split)
            alone = [
                compare_planners(task.workload, task.topology, [name], context, profile.communication).plans[0]
                for name in PLANNERS
            ]
            together = compare_planners(task.workload, task.topology, PLANNERS, context, profile.communication).plans
            heuristics = compare_planners(
                task.workload, task.topology, HEURISTICS, context, profile.communication
            ).plans
            for how, found in (("", alone), ("together/", together), ("heuristics/", heuristics)):
                for plan in found:
                    plans[f"{task.name}/{'split' if split else 'whole'}/{how}{plan.planner}"] = {
                        "max_ms": plan.max_cost_ms,
                        "devices": [[[s.table.name, s.column_offset, s.width] for s in d.shards] for d in plan.devices],
                    }
    result = {"checkout": root, "seconds": time.perf_counter() - started, "plans": plans}
    out.write_text(json.dumps(result))
    print(f"{len(plans)} plans in {time.perf_counter() - started:.0f} s -> {out}")
    return result


def compare(a: Path, b: Path) -> int:
    left, right = (json.loads(p.read_text())["plans"] for p in (a, b))
    differ = [k for k in left if k not in right or left[k]["devices"] != right[k]["devices"]]
    print(f"{len(left)} plans, {len(differ)} differ")
    for key in differ:
        after = right[key]["max_ms"] if key in right else float("nan")
        print(f"  {key}: max {left[key]['max_ms']:.4f} -> {after:.4f} ({after / left[key]['max_ms']:.4f}x)")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="Plan every task and write the plans here.")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--limit", type=int, help="Plan only the first N tasks (a smoke run).")
    args = parser.parse_args(argv)
    if args.compare:
        sys.exit(compare(*args.compare))
    if not args.out:
        parser.error("give --out FILE or --compare BEFORE AFTER")
    plan_all(args.out, args.limit)


if __name__ == "__main__":
    main()
