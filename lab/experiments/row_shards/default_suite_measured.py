"""Do the default suite's row-wise plans pay when measured? For each task where cost_greedy now
spreads a table (every sharding type) it measures, interleaved, that plan against cost_greedy's
table- and column-wise plan (the plan before sharding types) and the best heuristic's, with the
microbenchmark (compute, per device; the communication is the model's and is reported apart).

    AUTOSHARD_NO_REEXEC=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 \
        MALLOC_TOP_PAD_=1073741824 python lab/experiments/row_shards/default_suite_measured.py \
        --rounds 6 --out lab/results/row_shards/default_suite_measured.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
from cost_model.process import one_thread
from autoshard.evaluation.measurers import plans_measurer
from autoshard.core.communication import WithCommunication
from autoshard.core.task import load_suite
from autoshard.planning.registry import HEURISTICS, make_planner
from autoshard.planners.context import PlannerContext
from autoshard.planners.sharding_options import PLACED_TYPES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="default")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    measure = plans_measurer(args.rounds, 128, profile)
    rows = []
    for task in load_suite(args.suite)[1]:
        model = WithCommunication(profile.model, profile.communication, task.topology)
        spread = make_planner("cost_greedy", PlannerContext(model)).plan(task.workload, task.topology)
        if all(s.sharding is None for d in spread.devices for s in d.shards):
            continue
        placed = make_planner("cost_greedy", PlannerContext(model, sharding_types=PLACED_TYPES)).plan(
            task.workload, task.topology
        )
        heuristics = [
            make_planner(h, PlannerContext(model, sharding_types=PLACED_TYPES)).plan(task.workload, task.topology)
            for h in HEURISTICS
        ]
        best = min(heuristics, key=lambda p: p.max_cost_ms)
        measured = measure([spread, placed, best], task.workload.batch_size, 1)
        row = {
            "task": task.name,
            "best_heuristic": best.planner,
            "predicted": {
                "spread": spread.max_cost_ms,
                "placed": placed.max_cost_ms,
                "heuristic": best.max_cost_ms,
            },
            "measured_max_ms": {k: m.max_ms for k, m in zip(("spread", "placed", "heuristic"), measured)},
            "measured_ratio_to_placed": {
                k: [m.ratio_to_reference, *m.ratio_ci95] for k, m in zip(("spread", "placed", "heuristic"), measured)
            },
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "default_suite_measured.py", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
