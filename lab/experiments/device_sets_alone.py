"""The device sets of two or more planners' plans for one task, each measured alone, side by side:
predicted against measured per device, in alternating rounds (each set timed for >= 50 ms, as
``evaluate --measure`` times them), then the same plans through ``measure_plans``.

    python benchmarks/device_sets_alone.py docs/figures/evaluation_ruin_recreate/kaggle_b8192_suite.json \
        --planners cost_greedy,rl+refine --rounds 6

Compute only (no all-to-all), with the shipped profile's cost model and policy; one thread, the
allocator settings of the harness (set them in the environment: docs/traces.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.profiles import measuring_profile  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from cost_model.bench.harness import BenchConfig, measure  # noqa: E402
from autoshard.evaluation.measure_plan import MIN_DEVICE_MS, measure_plans  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="a suite JSON; its first task (or --task) is planned")
    parser.add_argument("--task")
    parser.add_argument("--planners", default="cost_greedy,rl+refine")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--profile", type=Path, default=ROOT / "data" / "models" / "default")
    args = parser.parse_args()
    loaded = measuring_profile(args.profile)
    _, tasks = load_suite(args.suite)
    task = next(t for t in tasks if args.task in (None, t.name))
    plans = compare_planners(task.workload, task.topology, args.planners.split(","),
                             PlannerContext(loaded.model, loaded.policy)).plans
    sets = {f"{p.planner}[{k}]": ([s.as_table for s in d.shards], d.cost_ms)
            for p in plans for k, d in enumerate(p.devices) if d.shards}
    config = BenchConfig(mode=default_mode(), row_cap_bytes=128 * 2**20, batch_size=task.workload.batch_size)
    times: dict[str, list[float]] = {k: [] for k in sets}
    for r in range(args.rounds):
        for key in (list(sets) if r % 2 == 0 else list(sets)[::-1]):
            times[key].append(measure(sets[key][0], config, seed=r, min_total_ms=MIN_DEVICE_MS).total.median)
    print(f"{task.name}: each device set alone, {args.rounds} alternating rounds")
    for key, (tables, predicted) in sets.items():
        got = statistics.median(times[key])
        print(f"  {key:18s} {len(tables):3d} tables  predicted {predicted:8.3f} ms  measured {got:8.3f} ms "
              f"(range {min(times[key]):.3f}-{max(times[key]):.3f}, ratio {got / predicted:.2f})")
    print(f"the same plans through measure_plans, {args.rounds} rounds:")
    for m in measure_plans(plans, task.workload.batch_size, config, args.rounds):
        low, high = m.ratio_ci95
        print(f"  {m.planner:18s} max {m.max_ms:.3f} ms, devices {[round(x, 3) for x in m.device_ms]}, "
              f"ratio to {plans[0].planner} {m.ratio_to_reference:.3f} [{low:.3f}, {high:.3f}]")


if __name__ == "__main__":
    main()
