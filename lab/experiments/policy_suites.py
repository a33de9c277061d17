"""rl against cost_greedy under TorchRec's cuda estimator on the bundled giants and hosts suites
and the held-out 4D grid (issue 62): each task's cost_greedy max, the policy's (argmax alone),
rl+refine's and the best heuristic's, each over cost_greedy's; whether rl is at most the best
heuristic; and, with a second policy, its rl beside.

    python lab/experiments/policy_suites.py data/models/torchrec/cuda/policy.pt --other OLD_POLICY \
        --out lab/results/policy_per_model/torchrec_cuda_suites.json

A task no planner plans (every plan past TorchRec's storage count) is listed as such; one where
some plan but rl does not counts against rl. ``--reference FILE`` takes cost_greedy's and the
heuristics' maxima from an earlier run's file, for a change that moves the policy's plans alone.
Prints a line per task as it goes and the geometric means per suite and over all tasks.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEURISTICS = ("round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")
GRID = "grid"


def tasks_of(suite: str) -> list:
    from autoshard.core.task import load_suite
    from autoshard.evaluation.grid import GridConfig, grid_tasks

    return grid_tasks(GridConfig()) if suite == GRID else load_suite(suite)[1]


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def main() -> None:
    from autoshard.core.errors import PlannerError
    from autoshard.planning.options import Models, PlanOptions
    from autoshard.planning.plan import plan
    from autoshard.rl.policy import OptionPolicy
    from autoshard.torchrec.cost_model import TorchRecCostModel
    from cost_model.process import one_thread

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("--other", type=Path, default=None, help="a second policy, its rl beside")
    parser.add_argument("--suites", default=f"giants,hosts,{GRID}")
    parser.add_argument("--tasks", default=None, help="only these task names, comma-separated")
    parser.add_argument("--no-refine", action="store_true", help="leave rl+refine out")
    parser.add_argument(
        "--rule", action="store_true", help="rl takes the greedy rule's option (the policy's teacher), not the argmax"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--reference",
        type=Path,
        action="append",
        default=[],
        help="an earlier --out file: its tasks' cost_greedy and heuristic maxima are taken from it "
        "(planned again only for tasks it lacks), for a change that moves the policy's plans alone",
    )
    args = parser.parse_args()
    recorded = {r["task"]: r for f in args.reference for r in json.loads(f.read_text())["rows"]}
    one_thread()
    warnings.simplefilter("ignore")  # TorchRec's reservation warning; a policy of another model
    policy = OptionPolicy.load(args.policy)
    if args.rule:  # the teacher's ceiling: the planner's steps, the greedy rule's choices
        from autoshard.rl import planners
        from autoshard.rl.options import expert_choice

        planners.argmax_choice = lambda _policy: expert_choice  # type: ignore[assignment]
    other = OptionPolicy.load(args.other) if args.other else None
    only = set(args.tasks.split(",")) if args.tasks else None
    print("command: python lab/experiments/policy_suites.py " + " ".join(sys.argv[1:]), flush=True)
    rows: list[dict] = []
    for suite in args.suites.split(","):
        for task in tasks_of(suite):
            if only is not None and task.name not in only:
                continue
            started = time.perf_counter()
            kept = recorded.get(task.name)
            names = ("rl", *(() if args.no_refine else ("rl+refine",)))
            if kept is None:
                names = ("cost_greedy", *names, *HEURISTICS)
            maxima: dict[str, float] = {}
            if kept is not None:
                maxima = {k: v for k, v in kept["maxima"].items() if k == "cost_greedy" or k in HEURISTICS}
            try:
                report = plan(
                    task.workload,
                    task.topology,
                    Models(TorchRecCostModel(), policy=policy),
                    PlanOptions(planners=names),
                )
                maxima.update({p.planner: p.max_cost_ms for p in report.plans})
            except PlannerError:
                pass  # no planner plans it
            if other is not None and maxima:
                try:
                    found = plan(
                        task.workload,
                        task.topology,
                        Models(TorchRecCostModel(), policy=other),
                        PlanOptions(planners=("rl",)),
                    )
                    maxima["rl@other"] = found.plans[0].max_cost_ms
                except PlannerError:
                    pass
            best = min(
                (maxima[k] for k in HEURISTICS if k in maxima), default=(kept or {}).get("best_heuristic", math.inf)
            )
            cg = maxima.get("cost_greedy")
            row = {"suite": suite, "task": task.name, "maxima": maxima, "best_heuristic": best}
            if cg:
                row.update(
                    {
                        f"{k}/cg": (maxima[k] / cg if k in maxima else math.inf)
                        for k in ("rl", "rl+refine", "rl@other")
                        if k != "rl+refine" or not args.no_refine
                        if k != "rl@other" or other is not None
                    }
                )
                row["best_heuristic/cg"] = best / cg
            row["rl<=best_heuristic"] = bool(maxima) and maxima.get("rl", math.inf) <= best
            rows.append(row)
            shown = " ".join(f"{k} {v:.3f}" for k, v in row.items() if k.endswith("/cg"))
            planned = "no planner plans it" if not maxima else f"rl<=best heuristic {row['rl<=best_heuristic']}"
            print(f"{suite} {task.name}: {shown} {planned} ({time.perf_counter() - started:.0f} s)", flush=True)
    summary: dict[str, dict[str, float]] = {}
    for suite in [*args.suites.split(","), "all"]:
        kept = [r for r in rows if (suite == "all" or r["suite"] == suite) and "rl/cg" in r]
        summary[suite] = {
            "tasks": len(kept),
            **{
                f"geomean {k}": geomean([r[k] for r in kept])
                for k in ("rl/cg", "rl+refine/cg", "rl@other/cg")
                if kept and k in kept[0]
            },
            "rl above best heuristic": sum(not r["rl<=best_heuristic"] for r in kept),
            "rl+refine above cost_greedy": sum(r.get("rl+refine/cg", 0) > 1 + 1e-9 for r in kept),
        }
        print(
            suite, " ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in summary[suite].items())
        )
    unplanned = [r["task"] for r in rows if not r["maxima"]]
    print(f"no planner plans: {', '.join(unplanned) or 'none'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": sys.argv, "rows": rows, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
