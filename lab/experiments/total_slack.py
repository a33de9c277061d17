"""How much lower than cost_greedy's plan's total can another plan's total be? The cost model is
not additive (grouping tables otherwise changes the sum of the devices' predicted costs), and
rl+refine's ``TOTAL_SLACK`` rests on how far: a plan's max is at least its mean device cost, so
where cost_greedy's plan is even, a plan clearing the departure margin would need a much lower
total.

    python benchmarks/total_slack.py --out docs/figures/total_slack.json

Plans every task with every default planner side by side (as the service does; departure margin
off, so that rl+refine searches wherever it can), with and without column splits, and records
the lowest total of any plan found over cost_greedy's: the planners' plans (the heuristics' only
without splits, where their units are cost_greedy's) and every placement of rl+refine's samples,
before and after their local search; and, apart, the lowest of rl+refine's own placements (its
samples, and the local search from them and from its starts), the only plans it can return
beyond cost_greedy's and rl's. The tasks: 40 of the load test's 80 x 8 requests, the held-out
grid (20-400 tables on 4-64 devices), the default suite and, with ``--scale``, synthetic tasks of
1,000 tables on 8, 64 and 128 devices (the planning-speed benchmark's); the profile's model,
policy and all-to-all.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from load_test import Config, request_body  # noqa: E402

import autoshard.rl.planners as rl  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from autoshard.core.task import load_suite, memory_for  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.types import Topology  # noqa: E402
from autoshard.core.workload_file import topology_from_dict, workload_from_dict  # noqa: E402
from autoshard.profiles import load_models  # noqa: E402

PLANNERS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy",
            "cost_greedy", "rl", "rl+refine")
MODEL_PLANNERS = ("cost_greedy", "rl", "rl+refine")


def recording_totals() -> list[float]:
    """Wrap rl+refine's sampling and local search so that every placement they end with adds
    its devices' total to the list returned."""
    totals: list[float] = []
    improve, place_together = rl.improve, rl.place_together

    def improve_and_record(states, *args, **kwargs):
        done = improve(states, *args, **kwargs)
        totals.append(sum(s.load for s in states))
        return done

    def place_and_record(*args, **kwargs):
        placed = place_together(*args, **kwargs)
        totals.extend(float(s.loads.sum()) for s in placed if s is not None)
        return placed

    rl.improve, rl.place_together = improve_and_record, place_and_record
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40, help="load-test requests (80 x 8) among the tasks")
    parser.add_argument("--models", type=Path, default=ROOT / "data" / "models")
    parser.add_argument("--scale", action="store_true", help="add 1,000 tables on 8, 64 and 128 devices")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    loaded = load_models(args.models).resolve(None)
    tasks = []
    for draw in range(1, args.requests + 1):
        body = request_body(Config(tables=80, devices=8, fresh=True), draw)
        tasks.append((f"load{draw}", workload_from_dict(body["workload"])[0], topology_from_dict(body["topology"])))
    tasks += [(t.name, t.workload, t.topology) for t in grid_tasks(GridConfig())]
    tasks += [(t.name, t.workload, t.topology) for t in load_suite("default")[1]]
    if args.scale:
        pool = generate_pool(PoolConfig(size=12_500, seed=7)).all
        workload = sample_task(pool, 1000, np.random.default_rng(1000), name="1000")
        tasks += [(f"1000x{d}", workload, Topology(d, memory_for(workload, d, 1.3))) for d in (8, 64, 128)]
    found = recording_totals()
    rows = []
    for split in (False, True):
        for name, workload, topology in tasks:
            found.clear()
            context = PlannerContext(loaded.model, loaded.policy, seed=3, departure_margin=0.0, allow_column_split=split)
            result = compare_planners(workload, topology, list(PLANNERS), context, loaded.communication)
            plans = {p.planner: p for p in result.plans}
            greedy = plans["cost_greedy"]
            total = sum(d.cost_ms for d in greedy.devices)
            totals = [sum(d.cost_ms for d in p.devices) for p in result.plans
                      if not split or p.planner in MODEL_PLANNERS] + found
            rows.append({"task": name, "column_split": split, "lowest_total_over_cost_greedy": min(totals) / total,
                         "rl_refine_lowest_total_over_cost_greedy": min(found, default=total) / total,
                         "cost_greedy_max_over_mean": greedy.max_cost_ms / (total / topology.num_devices),
                         "rl_refine_max_over_cost_greedy": plans["rl+refine"].max_cost_ms / greedy.max_cost_ms})
    lowest = [r["lowest_total_over_cost_greedy"] for r in rows]
    own = [r["rl_refine_lowest_total_over_cost_greedy"] for r in rows]
    summary = {"tasks": len(rows), "lowest_total_over_cost_greedy": {"min": min(lowest), "median": statistics.median(lowest)},
               "rl_refine_lowest_total_over_cost_greedy": {"min": min(own), "median": statistics.median(own)},
               "rl_refine_best_over_cost_greedy": min(r["rl_refine_max_over_cost_greedy"] for r in rows), "rows": rows}
    print(f"{len(rows)} tasks: the lowest total of a plan over cost_greedy's: min {min(lowest):.4f}, "
          f"median {statistics.median(lowest):.4f}; rl+refine's best max over cost_greedy's "
          f"(margin off): {summary['rl_refine_best_over_cost_greedy']:.4f}; the lowest total of rl+refine's own "
          f"placements over cost_greedy's: min {min(own):.4f}, median {statistics.median(own):.4f}")
    for row in sorted(rows, key=lambda r: r["lowest_total_over_cost_greedy"])[:5]:
        print(f"  {row['task']:>12} split={row['column_split']!s:5}  lowest total {row['lowest_total_over_cost_greedy']:.4f}  "
              f"cost_greedy max / mean {row['cost_greedy_max_over_mean']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
