"""Whether planning through ``autoshard.planning.plan.plan`` (the CLI's, the service's and the
drop-in's path since issue 60) gives the plans ``compare_planners`` gives: the fixed tasks of
``benchmarks/plan_identity.py`` (the held-out grid's 20-400 tables on 4-32 devices, 20 of the load
test's requests; whole, and with column splits up to 200 tables), planned by cost_greedy, rl,
rl+refine and rl+refine_raw side by side, and by the six heuristics side by side, both ways in one
process; seed 3, the shipped profile.

rl+refine draws a sample only within a 1 s search budget (``SAMPLE_BUDGET_S``): on a busy machine
the count of samples, hence its plans, varies from run to run. The budget is lifted here (every
sample drawn), so that a difference is the path's, not the machine's.

    python lab/experiments/plan_path_identity.py [--limit N]

``--run SCRIPT ARGS...`` runs another script in the working directory's checkout with the budget
lifted the same way, e.g. ``benchmarks/plan_identity.py`` in a worktree of each of two commits:

    (cd /tmp/base && python /path/to/lab/experiments/plan_path_identity.py \
        --run /path/to/benchmarks/plan_identity.py --out /tmp/base.json)
"""

from __future__ import annotations

import argparse
import math
import os
import runpy
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SIDE_BY_SIDE = ("cost_greedy", "rl", "rl+refine", "rl+refine_raw")
HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


def every_sample() -> None:
    """Lift rl+refine's wall-clock sample budget (its plans then depend on the inputs alone)."""
    import autoshard.rl.planners as rl_planners

    plan = rl_planners.RLPlanner.plan

    def unbudgeted(self, workload, topology):  # type: ignore[no-untyped-def]
        object.__setattr__(self, "sample_budget_s", math.inf)
        return plan(self, workload, topology)

    rl_planners.RLPlanner.plan = unbudgeted  # type: ignore[method-assign]


def fixed_tasks(limit: int | None) -> list:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from load_test import Config, request_body

    from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
    from autoshard.core.task import Task, memory_for
    from autoshard.core.types import Topology
    from autoshard.core.workload_file import topology_from_dict, workload_from_dict

    tables, rng, tasks = generate_pool(PoolConfig(size=2000, seed=7)).test, np.random.default_rng(0), []
    for count in (20, 80, 200, 400):
        for devices in (4, 8, 16, 32):
            workload = sample_task(tables, count, rng, 2048, f"grid{count}x{devices}")
            tasks.append(Task(workload.name, workload, Topology(devices, memory_for(workload, devices, 1.3))))
    for draw in range(1, 21):
        body = request_body(Config(), draw)
        tasks.append(Task(f"load{draw}", workload_from_dict(body["workload"])[0], topology_from_dict(body["topology"])))
    return tasks[:limit]


def devices(plan) -> list:  # type: ignore[no-untyped-def]
    return [
        [(s.table.name, s.column_offset, s.width, s.row_offset, s.rows, s.sharding) for s in d.shards]
        for d in plan.devices
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, help="Only the first N tasks (a smoke run).")
    parser.add_argument("--run", nargs=argparse.REMAINDER, help="Run this script and its arguments instead.")
    args = parser.parse_args()
    if args.run:
        sys.path.insert(0, os.getcwd())  # the working directory's checkout, as the script plans it
        every_sample()
        sys.argv = list(args.run)
        runpy.run_path(args.run[0], run_name="__main__")
        return
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.compare import compare_planners
    from autoshard.planning.options import Models, PlanOptions
    from autoshard.planning.plan import plan
    from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
    from cost_model.process import one_thread

    one_thread()
    every_sample()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    models, compared, differ = Models.of(profile), 0, []
    for split in (False, True):
        for task in fixed_tasks(args.limit):
            if split and len(task.workload.tables) > 200:
                continue
            for names in (SIDE_BY_SIDE, HEURISTICS):
                context = PlannerContext(profile.model, profile.policy, 3, split)
                before = compare_planners(task.workload, task.topology, names, context, profile.communication).plans
                after = plan(task.workload, task.topology, models, PlanOptions(names, 3, split)).plans
                for old, new in zip(before, after, strict=True):
                    compared += 1
                    if devices(old) != devices(new) or old.max_cost_ms != new.max_cost_ms:
                        differ.append(f"{task.name}/{'split' if split else 'whole'}/{old.planner}")
    print(f"{compared} plans, {len(differ)} differ (devices or predicted max)")
    for key in differ:
        print(f"  {key}")


if __name__ == "__main__":
    main()
