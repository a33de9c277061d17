"""Planning where memory binds: many large tables on many devices, where the packing lookahead
(first-fit decreasing of the units left, docs/planners.md) does the most work, with and without
a time budget. Each planner alone, on one core, in the checkout the script is run in (its
working directory), so that two checkouts compare by running it in each:

    python benchmarks/tight_memory.py --out /tmp/new.json
    (cd /tmp/base && python /path/to/benchmarks/tight_memory.py --out /tmp/base.json)

The workload is drawn from ``--seed``: rows log-uniform in 10^2-10^8.5, widths 8-256, pooling
1-100, Zipf exponents 0-1.5, batch 4,096 (3,000 tables: about 25 TiB, 60% of 512 devices of
80 GiB). It writes each planner's plan time, predicted max and whether it came back partial.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def workload(tables: int, seed: int):
    from autoshard.core.types import Table, Workload

    rng = np.random.default_rng(seed)
    return Workload(tuple(Table(f"t{i}", int(10 ** rng.uniform(2, 8.5)), int(rng.choice([8, 16, 64, 128, 256])),
                                float(rng.uniform(1, 100)), float(rng.uniform(0, 1.5))) for i in range(tables)),
                    batch_size=4096, name=f"tight{tables}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=3000)
    parser.add_argument("--devices", type=int, default=512)
    parser.add_argument("--memory-gb", type=float, default=80.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--planners", default="cost_greedy")
    parser.add_argument("--budgets", default="none,5", help="seconds, or 'none' for no budget; each a run")
    parser.add_argument("--column-split", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())
    from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
    from cost_model.process import one_thread
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import make_planner
    from autoshard.core.types import GIB, Topology

    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    task = workload(args.tables, args.seed)
    topology = Topology(args.devices, args.memory_gb)
    fill = sum(t.memory_bytes for t in task.tables) / (args.devices * args.memory_gb * GIB)
    print(f"{args.tables} tables, {fill:.0%} of {args.devices} x {args.memory_gb:g} GiB", flush=True)
    rows = []
    for budget in args.budgets.split(","):
        budget_s = None if budget == "none" else float(budget)
        for name in args.planners.split(","):
            context = PlannerContext(profile.model, profile.policy, 0, args.column_split, budget_s)
            started = time.perf_counter()
            plan = make_planner(name, context).plan(task, topology)
            seconds = time.perf_counter() - started
            rows.append({"planner": name, "budget_s": budget_s, "seconds": seconds, "max_cost_ms": plan.max_cost_ms,
                         "partial": plan.partial})
            print(f"{name} budget {budget}: {seconds:.2f} s, max {plan.max_cost_ms:.3f} ms"
                  f"{' partial' if plan.partial else ''}", flush=True)
    args.out.write_text(json.dumps({"command": sys.argv, "fill": fill, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
