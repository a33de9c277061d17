"""A planner in two checkouts, timed side by side: this one against ``--base`` (e.g. a ``git
worktree`` of an earlier commit), on the same validation tasks, alternating A B A B ... rounds,
each plan in its own process per round. Reports each task's median time in both and the ratio,
and the ratio of their predicted maxima.

    git worktree add /tmp/base 0163a71~1
    python benchmarks/checkout_ab.py --base /tmp/base --planner rl+refine --rounds 3

Validation tasks: test-split tables of a pool no training or evaluation draws from (seed 99),
80-400 tables on 4-16 devices, memory 1.3x an even share, seeds 0 and 1; both checkouts plan with
this checkout's shipped profile, one core each, after a warm-up plan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = ((80, 8), (80, 4), (200, 8), (200, 16), (400, 8))


def plan_all(planner: str, profile_dir: Path) -> list[tuple[str, int, float, float]]:
    """(task, seed, seconds, predicted max) for every validation task, planned by this process's checkout."""
    import time

    import numpy as np

    from autoshard.profiles import load_profile_or_exit
    from cost_model.process import one_thread
    from autoshard.core.communication import WithCommunication
    from autoshard.core.task import memory_for
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import make_planner
    from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
    from autoshard.core.types import Topology

    one_thread()
    profile = load_profile_or_exit(profile_dir)
    tables = generate_pool(PoolConfig(size=2000, seed=99)).test
    rng = np.random.default_rng(5)
    out = []
    for count, devices in TASKS:
        workload = sample_task(tables, count, rng, 2048, f"val{count}x{devices}")
        topology = Topology(devices, memory_for(workload, devices, 1.3))
        priced = WithCommunication(profile.model, profile.communication, devices)
        for seed in (0, 1):
            chosen = make_planner(planner, PlannerContext(priced, profile.policy, seed=seed))
            chosen.plan(workload, topology)  # warm-up: table codes and single-table costs cached
            started = time.perf_counter()
            plan = chosen.plan(workload, topology)
            out.append((workload.name, seed, time.perf_counter() - started, plan.max_cost_ms))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="The other checkout.")
    parser.add_argument("--planner", default="rl+refine")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # run in that checkout, print JSON
    parser.add_argument("--profile", type=Path, default=ROOT / "data" / "models" / "default",
                        help="The profile both checkouts plan with (default: this checkout's shipped one).")
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(args.child))
        print(json.dumps(plan_all(args.planner, args.profile)))
        return
    if args.base is None:
        parser.error("--base is required")
    times: dict[str, dict[tuple[str, int], list[float]]] = {"base": {}, "this": {}}
    maxima: dict[str, dict[tuple[str, int], float]] = {"base": {}, "this": {}}
    for _ in range(args.rounds):
        for label, checkout in (("base", args.base.resolve()), ("this", ROOT)):
            run = subprocess.run([sys.executable, __file__, "--child", str(checkout), "--planner", args.planner,
                                  "--profile", str(args.profile.resolve())],
                                 capture_output=True, text=True, check=True, cwd=checkout)
            for task, seed, seconds, best in json.loads(run.stdout.splitlines()[-1]):
                times[label].setdefault((task, seed), []).append(seconds)
                maxima[label][(task, seed)] = best
    ratios = []
    for key in times["this"]:
        a, b = statistics.median(times["base"][key]), statistics.median(times["this"][key])
        ratios.append(b / a)
        print(f"{key[0]} seed {key[1]}: base {a:.3f} s, this {b:.3f} s, ratio {b / a:.3f}; "
              f"predicted max ratio {maxima['this'][key] / maxima['base'][key]:.4f}")
    quartiles = statistics.quantiles(ratios, n=4)
    print(f"time ratio (this / base): median {statistics.median(ratios):.3f}, "
          f"IQR {quartiles[0]:.3f}-{quartiles[2]:.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
