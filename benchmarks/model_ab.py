"""Two cost models, measured where it counts: per task of a suite, cost_greedy's plan under each
model and the heuristics' plans (which no model changes), measured interleaved in one
``measure_plans`` (compute only, as ``evaluate --measure --no-communication``).

    python benchmarks/model_ab.py default --candidate runs/model --rounds 6 --out ab_default.json

The shipped profile's model is the baseline (``--baseline`` for another). For each task it
prints both cost_greedy plans' measured max, the candidate's ratio to the baseline's with its
95% interval, and each against the best heuristic (by measured max); the JSON adds every plan's
predicted max under both models. Set the harness's allocator settings in the environment
(docs/traces.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_exit, one_thread  # noqa: E402
from autoshard.evaluation import load_suite  # noqa: E402
from autoshard.planners import PlannerContext  # noqa: E402
from autoshard.planners.compare import compare_planners  # noqa: E402
from autoshard.types import ShardingPlan  # noqa: E402
from cost_model.bench import BenchConfig  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402
from cost_model.measure_plan import measure_plans  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402

HEURISTICS = ("round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", help="a suite file or bundled suite name (default, rl_grid, ...)")
    parser.add_argument("--candidate", type=Path, required=True, help="profile folder (or cost_model.pt) to compare")
    parser.add_argument("--baseline", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    baseline = load_profile_or_exit(args.baseline)
    path = args.candidate / "cost_model.pt" if args.candidate.is_dir() else args.candidate
    candidate = load_cost_model(path)
    records = []
    for task in load_suite(args.suite)[1]:
        w, t = task.workload, task.topology
        old = compare_planners(w, t, ["cost_greedy", *HEURISTICS], PlannerContext(baseline.model)).plans
        new = compare_planners(w, t, ["cost_greedy"], PlannerContext(candidate)).plans[0]
        plans = [old[0], dataclasses.replace(new, planner="cost_greedy (candidate)"), *old[1:]]

        def predicted(model, plan: ShardingPlan) -> float:
            return max(model.predict_many([[s.as_table for s in d.shards] for d in plan.devices if d.shards],
                                          w.batch_size))

        measured = measure_plans(plans, w.batch_size, BenchConfig(mode=default_mode()), rounds=args.rounds)
        rows = {m.planner: {"measured_max_ms": m.max_ms, "ratio_to_baseline_cost_greedy": m.ratio_to_reference,
                            "ratio_ci95": m.ratio_ci95, "predicted_baseline_ms": predicted(baseline.model, p),
                            "predicted_candidate_ms": predicted(candidate, p)} for m, p in zip(measured, plans)}
        records.append({"task": task.name, "plans": rows})
        best = min(HEURISTICS, key=lambda h: rows[h]["measured_max_ms"])
        cand = rows["cost_greedy (candidate)"]
        base_ms, cand_ms, best_ms = (rows["cost_greedy"]["measured_max_ms"], cand["measured_max_ms"],
                                     rows[best]["measured_max_ms"])
        print(f"{task.name:28s} cost_greedy {base_ms:.3f} / candidate {cand_ms:.3f} ms: "
              f"{cand['ratio_to_baseline_cost_greedy']:.3f} [{cand['ratio_ci95'][0]:.3f}, {cand['ratio_ci95'][1]:.3f}]; "
              f"best heuristic {best} {best_ms:.3f}: {base_ms / best_ms:.3f} / {cand_ms / best_ms:.3f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"suite": args.suite, "baseline": str(args.baseline),
                                        "candidate": str(args.candidate), "rounds": args.rounds,
                                        "tasks": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
