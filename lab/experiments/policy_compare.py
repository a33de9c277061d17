"""``rl`` (the policy's argmax alone) of several policies side by side, predicted (compute +
communication): per task of the default suite and the held-out 4D grid, rl / cost_greedy and rl /
the best heuristic; then each policy's geometric means and its tasks above the best heuristic.

    python lab/experiments/policy_compare.py data/models/default/policy.pt runs/P/policy.pt \
        --out lab/results/rl_policies/compare.json

Asked: does a policy trained otherwise (other training tasks, another teacher or feature) plan
better than the shipped one where it matters, the tasks that a bar names?
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEURISTICS = ("size_lookup_greedy", "lookup_greedy", "size_greedy", "dim_greedy", "round_robin")


def best_of(names, context, task) -> float:
    from autoshard.planning.registry import make_planner

    found = []
    for name in names:
        try:
            found.append(make_planner(name, context).plan(task.workload, task.topology).max_cost_ms)
        except Exception:  # no plan (a dead end, or the planner cannot run the task): skipped
            continue
    return min(found, default=math.nan)


def main() -> None:
    from autoshard.profiles import load_profile_or_exit
    from cost_model.process import one_thread
    from autoshard.core.communication import WithCommunication
    from autoshard.core.task import load_suite
    from autoshard.evaluation.grid import GridConfig, grid_tasks
    from autoshard.planners.context import PlannerContext
    from autoshard.rl.policy import OptionPolicy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+", type=Path)
    parser.add_argument("--profile", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.profile)
    policies = {str(p): OptionPolicy.load(p) for p in args.policies}
    tasks = load_suite("default")[1] + grid_tasks(GridConfig())
    rows = []
    for task in tasks:
        model = WithCommunication(profile.model, profile.communication, task.topology)
        context = PlannerContext(cost_model=model).for_task(task.workload, task.topology)
        row = {"task": task.name, "cost_greedy": best_of(("cost_greedy",), context, task)}
        row["best_heuristic"] = best_of(HEURISTICS, context, task)
        for name, policy in policies.items():
            rl = best_of(
                ("rl",), PlannerContext(cost_model=model, policy=policy).for_task(task.workload, task.topology), task
            )
            row[name] = {
                "rl": rl,
                "over_cost_greedy": rl / row["cost_greedy"],
                "over_heuristic": rl / row["best_heuristic"],
            }
        rows.append(row)
        print(
            task.name,
            *(f"| {n}: cg {row[n]['over_cost_greedy']:.3f} h {row[n]['over_heuristic']:.3f}" for n in policies),
            flush=True,
        )
    summary = {}
    for name in policies:

        def geomean(key: str) -> float:
            logs = [math.log(r[name][key]) for r in rows if not math.isnan(r[name][key])]
            return math.exp(sum(logs) / len(logs))

        above = [r["task"] for r in rows if r[name]["over_heuristic"] > 1.0]
        summary[name] = {
            "over_cost_greedy": geomean("over_cost_greedy"),
            "over_heuristic": geomean("over_heuristic"),
            "above_heuristic": above,
        }
        print(
            f"{name}: rl / cost_greedy {summary[name]['over_cost_greedy']:.4f}, rl / best heuristic "
            f"{summary[name]['over_heuristic']:.4f}, above the best heuristic on {above}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
