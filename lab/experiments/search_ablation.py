"""rl+refine's ruin-and-recreate settings on the held-out grid of ``autoshard policy eval``:
per setting, the geometric mean of rl+refine's predicted max over cost_greedy's, on how many
tasks it is lower, and its plan times (one thread, this process).

    python benchmarks/search_ablation.py --iterations 0,16,32 --rounds 4
    python benchmarks/search_ablation.py --iterations 32 --rounds 10 --min-share 1.0   # whole devices

Device costs are compute + all-to-all, as ``policy eval`` prices them; the shipped profile's
cost model and policy.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import load_profile_or_none, one_thread  # noqa: E402
from autoshard.core.communication import WithCommunication  # noqa: E402
from autoshard.planners.cost_greedy import CostGreedyPlanner  # noqa: E402
from autoshard.planning.registry import REFINE_SAMPLES, REFINE_SEARCH  # noqa: E402
from autoshard.rl.planners import RLPlanner  # noqa: E402
from autoshard.evaluation.grid import GridConfig, grid_tasks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", default="0,16,32", help="comma-separated iteration counts")
    parser.add_argument("--rounds", type=int, default=REFINE_SEARCH.rounds)
    parser.add_argument("--min-share", type=float, default=REFINE_SEARCH.min_share)
    parser.add_argument("--order-noise", type=float, default=REFINE_SEARCH.order_noise)
    parser.add_argument("--max-units", type=int, default=REFINE_SEARCH.max_units, help="0: no cap")
    parser.add_argument("--profile", type=Path, default=ROOT / "data" / "models" / "default")
    args = parser.parse_args()
    one_thread()
    loaded, why = load_profile_or_none(args.profile)
    if loaded is None or loaded.policy is None or loaded.communication is None:
        sys.exit(f"error: {why or 'the profile has no policy or no communication model'}")
    settings = [replace(REFINE_SEARCH, iterations=int(i), rounds=args.rounds, min_share=args.min_share,
                        order_noise=args.order_noise, max_units=args.max_units or None)
                for i in args.iterations.split(",")]
    ratios: dict[int, list[float]] = {s.iterations: [] for s in settings}
    times: dict[int, list[float]] = {s.iterations: [] for s in settings}
    for task in grid_tasks(GridConfig()):
        model = WithCommunication(loaded.model, loaded.communication, task.topology.num_devices)
        base = CostGreedyPlanner(model).plan(task.workload, task.topology).max_cost_ms
        row = []
        for search in settings:
            planner = RLPlanner(model, loaded.policy, samples=REFINE_SAMPLES, search=search)
            plan = planner.plan(task.workload, task.topology)
            ratios[search.iterations].append(plan.max_cost_ms / base)
            times[search.iterations].append(plan.plan_time_s)
            row.append(f"{search.iterations}: {plan.max_cost_ms / base:.4f} in {plan.plan_time_s:.2f} s")
        print(f"{task.name:12s}", " | ".join(row), flush=True)
    print(f"rounds {args.rounds}, min share {args.min_share}, order noise {args.order_noise}, "
          f"max units {args.max_units or None}")
    for search in settings:
        r, t = np.array(ratios[search.iterations]), times[search.iterations]
        print(f"iterations {search.iterations:3d}: geomean vs cost_greedy {np.exp(np.log(r).mean()):.4f}, "
              f"lower on {(r < 1 - 1e-5).sum()} of {len(r)}, plan time median {np.median(t):.3f} s, max {max(t):.2f} s")


if __name__ == "__main__":
    main()
