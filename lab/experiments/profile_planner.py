"""Where a planner spends its time: plan one synthetic task (warm-up, then the profiled plan),
under py-spy, and summarise the samples by the parts of the planning loop.

    py-spy record -r 200 --format raw -o cg.txt -- python benchmarks/profile_planner.py 1000 128 cost_greedy
    python benchmarks/profile_planner.py --summary cg.txt

The task is the planning-speed benchmark's (test-pool tables, memory 1.3x an even share, device
costs with the all-to-all). A summary line: the share of samples whose stack passes through each
part, of the samples inside a planner's ``plan`` (a sample can count for several parts: the
head runs inside the candidates' scoring).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PARTS = {  # part: substrings of a py-spy frame ("function (file:line)")
    "greedy placement (place)": ["place (autoshard/planners/placing.py"],
    "  scoring candidates (costs_if_added)": ["costs_if_added ("],
    "  packing lookahead (_first_fit_after)": ["_first_fit_after ("],
    "  policy (observe + scores)": ["observe (autoshard/rl/observation.py", "observe_many (", "DevicePolicy.scores"],
    "local search (improve)": ["improve (autoshard/planners/local_search.py"],
    "  neighbourhood scoring (predict_edits, edit scorers)": ["predict_edits (", "EditedSets.predict ("],
    "the cost model's head (all callers)": ["SplitHead.ms", "SplitHead.log_total", "predict_pooled ("],
}
PLANNING = ".plan (autoshard/planners/"  # samples inside a planner's plan(): the denominator


def summarise(path: Path) -> list[tuple[str, float]]:
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        if PLANNING not in stack:
            continue  # imports, the task's generation
        total += int(n)
        for part, needles in PARTS.items():
            if any(needle in stack for needle in needles):
                counts[part] += int(n)
    return [(part, counts[part] / max(total, 1)) for part in PARTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", type=int, nargs="?", default=1000)
    parser.add_argument("devices", type=int, nargs="?", default=128)
    parser.add_argument("planner", nargs="?", default="cost_greedy")
    parser.add_argument("--summary", type=Path, help="Summarise a py-spy raw file instead of planning.")
    args = parser.parse_args()
    if args.summary:
        for part, share in summarise(args.summary):
            print(f"{part:45s} {share:6.1%}")
        return
    import numpy as np

    from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
    from cost_model.process import one_thread
    from autoshard.core.communication import WithCommunication
    from autoshard.core.task import memory_for
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import make_planner
    from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
    from autoshard.core.types import Topology

    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    pool = generate_pool(PoolConfig(size=12_500, seed=7)).all
    workload = sample_task(pool, args.tables, np.random.default_rng(args.tables), name=str(args.tables))
    topology = Topology(args.devices, memory_for(workload, args.devices, 1.3))
    priced = WithCommunication(profile.model, profile.communication, args.devices)
    planner = make_planner(args.planner, PlannerContext(priced, profile.policy))
    planner.plan(workload, topology)  # warm-up: table codes and single-table costs cached
    started = time.perf_counter()
    plan = planner.plan(workload, topology)
    print(f"{args.planner} {args.tables}x{args.devices}: {time.perf_counter() - started:.3f} s, "
          f"max {plan.max_cost_ms:.3f} ms")


if __name__ == "__main__":
    main()
