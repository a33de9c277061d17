"""Why predicted gains measure smaller: the optimizer's curse, on reports measured before
``autoshard evaluate --measure`` reported it (``expected_ratio``, ``geomean_expected``).

A planner balances the predicted costs of its devices, so the slowest device of its plan is one
of many near the max, and the model's error on each of them lifts the measured max above the
predicted one; a heuristic's plan has one device well above the others, and the error moves its
max less (``autoshard.core.model_error``). This script asks whether that error, and nothing else,
explains the gap between the predicted and the measured ratios of cost_greedy to the best
heuristic in earlier reports:

    python benchmarks/optimizers_curse.py docs/figures/evaluation_session34_f25m1/*/report.json \\
        docs/figures/evaluation_session36_f25m1/*/report.json --out docs/figures/optimizers_curse.json

Reports before 2026-12-04 hold each plan's measured devices but not its predicted ones: the
script plans each report's tasks again with this checkout and the shipped model (the tasks of
the ``default`` and ``rl_grid`` suites, by name; the report's seed and column splits, compute
only as the measured runs were, ``--no-communication``), and keeps the plans whose predicted max
is the report's (the same plans; the others are counted as skipped). Then, per report, what
``evaluate`` now computes (``expected_against_best_heuristic``: each task under the model's
errors on the other tasks' devices of the same run), beside the report's measured ratio; and
whether the expected max would choose plans better than the predicted one (``plan_choices``: of
the pairs of a task's distinct plans whose measured maxima differ, how often each names the
faster).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def replanned(report: dict, profile) -> tuple[list, list[str]]:
    """The report's measured tasks as ``TaskResult``s of this checkout's plans (those alike the
    report's), and what was skipped."""
    from autoshard.core.task import Task, load_suite
    from autoshard.evaluation.suite import TaskResult
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.compare import compare_planners
    from autoshard.evaluation.measure_plan import MeasuredPlan

    settings = report.get("settings", {})
    if settings.get("communication", True):
        return [], ["a report with the all-to-all in its predictions (measured: compute only)"]
    tasks = {t.name: t for suite in ("default", ROOT / "autoshard" / "core" / "suites" / "rl_grid.json")
             for t in load_suite(suite)[1]}
    context = PlannerContext(profile.model, profile.policy, settings.get("seed", 0), settings.get("column_split", False))
    results, skipped = [], []
    for row in report["tasks"]:
        task: Task | None = tasks.get(row["task"])
        measured_rows = [p for p in row["planners"] if p.get("measured_device_ms")]
        if task is None or not measured_rows:
            skipped.append(f"{row['task']}: not a bundled task, or not measured")
            continue
        comparison = compare_planners(task.workload, task.topology, [p["planner"] for p in measured_rows], context)
        ours = dict(zip(comparison.planned, comparison.plans))
        alike = [p for p in measured_rows if p["planner"] in ours
                 and math.isclose(ours[p["planner"]].max_cost_ms, p["predicted_max_ms"], rel_tol=1e-3)]
        skipped += [f"{row['task']} {p['planner']}: planned otherwise now" for p in measured_rows if p not in alike]
        measured = tuple(MeasuredPlan(p["planner"], tuple(p["measured_device_ms"]), p["measured_max_ms"], 0.0, 1.0,
                                      (1.0, 1.0), ()) for p in alike)
        results.append(TaskResult(task, comparison, measured, "cost_greedy"))
    return results, skipped


def plan_pairs(results: list) -> list[tuple[float, float, float]]:
    """Per task, every pair of its distinct measured plans: the ratios of their predicted maxima,
    of their expected maxima (under the other tasks' device errors, as ``evaluate`` expects) and
    of their measured maxima."""
    from autoshard.evaluation.suite import task_device_errors
    from autoshard.core.model_error import expected_max

    errors = [task_device_errors(r) for r in results]
    pairs = []
    for i, result in enumerate(results):
        others = [e for j, e in enumerate(errors) if j != i and len(e)]
        if not others:
            continue
        pool, plans = np.concatenate(others), {p.planner: p for p in result.comparison.plans}
        distinct = {}
        for m in result.measured:
            plan = plans[m.planner]
            distinct.setdefault(tuple(d.set_key for d in plan.devices), (plan, m.max_ms))
        scored = [(plan.max_cost_ms, expected_max([d.cost_ms for d in plan.devices], pool), measured)
                  for plan, measured in distinct.values()]
        pairs += [(a[0] / b[0], a[1] / b[1], a[2] / b[2]) for a, b in itertools.combinations(scored, 2)]
    return pairs


def choices(pairs: list[tuple[float, float, float]], measured_apart: float, predicted_within: float | None = None,
            ) -> dict[str, float]:
    """How often the predicted and the expected maxima name the faster plan of a pair whose measured
    maxima differ by more than ``measured_apart`` (and, if given, whose predicted ones by less than
    ``predicted_within``); a tie counts a half."""
    kept = [p for p in pairs if abs(math.log(p[2])) > math.log(1 + measured_apart)
            and (predicted_within is None or abs(math.log(p[0])) < math.log(1 + predicted_within))]

    def right(ratio: float, measured: float) -> float:
        return 0.5 if math.isclose(ratio, 1.0, rel_tol=1e-9) else float((ratio < 1) == (measured < 1))

    return {"pairs": len(kept), **{name: sum(right(p[k], p[2]) for p in kept) / max(len(kept), 1)
                                   for k, name in ((0, "predicted"), (1, "expected"))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--planner", default="cost_greedy")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit
    from cost_model.process import one_thread
    from scipy.stats import theilslopes

    from autoshard.evaluation.suite import expected_against_best_heuristic, task_device_costs, task_device_errors
    from autoshard.core.stats import geomean

    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    rows, skipped, errors, spread = [], [], [], []  # spread: per task, log predicted and log measured, centred
    pairs: list[tuple[float, float, float]] = []
    for path in args.reports:
        report = json.loads(path.read_text())
        results, missed = replanned(report, profile)
        skipped += [f"{path}: {m}" for m in missed]
        errors += [task_device_errors(r) for r in results]
        pairs += plan_pairs(results)
        for predicted, measured in map(task_device_costs, results):
            held = (predicted > 0) & (measured > 0)
            logs = np.log(predicted[held]), np.log(measured[held])
            spread.append(tuple(v - v.mean() for v in logs))
        measured = {t["task"]: {a["planner"]: a for a in t.get("against_best_heuristic", [])} for t in report["tasks"]}
        for result, expected in zip(results, expected_against_best_heuristic(results)):
            for e in expected:
                found = measured.get(result.task.name, {}).get(e.planner)
                if e.planner == args.planner and found is not None and found["heuristic"] == e.heuristic:
                    rows.append({"run": f"{path.parent.parent.name}/{path.parent.name}", "task": result.task.name,
                                 "heuristic": e.heuristic, "predicted": e.predicted, "expected": e.expected,
                                 "measured": found["ratio"], "measured_ci95": found["ci95"]})
    pooled = np.concatenate(errors) if errors else np.zeros(0)
    geo = {k: geomean([r[k] for r in rows]) for k in ("predicted", "expected", "measured")}
    miss = {k: float(np.mean([abs(math.log(r[k] / r["measured"])) for r in rows])) for k in ("predicted", "expected")}
    for r in rows:
        print(f"{r['run']:45s} {r['task']:28s} predicted {r['predicted']:.3f}  expected {r['expected']:.3f}  "
              f"measured {r['measured']:.3f} [{r['measured_ci95'][0]:.3f}, {r['measured_ci95'][1]:.3f}]")
    sigma = 1.4826 * float(np.median(np.abs(pooled))) if len(pooled) else float("nan")
    print(f"{len(pooled)} measured device sets; the model's error on them (each task's median taken out): "
          f"MAD sigma {sigma:.3f}, std {pooled.std():.3f}")
    print(f"{args.planner} over {len(rows)} tasks, geometric mean against the best heuristic: predicted "
          f"{geo['predicted']:.3f}, expected {geo['expected']:.3f}, measured {geo['measured']:.3f}; mean "
          f"|log(x / measured)|: predicted {miss['predicted']:.3f}, expected {miss['expected']:.3f}")
    x, y = (np.concatenate([s[k] for s in spread]) for k in (0, 1))
    slope = {"least_squares": float((x * y).sum() / (x * x).sum()),
             "theil_sen": [float(v) for v in np.array(theilslopes(y, x))[[0, 2, 3]]]}
    print(f"within a task, log measured on log predicted: slope {slope['least_squares']:.3f} (least squares), "
          f"{slope['theil_sen'][0]:.3f} [{slope['theil_sen'][1]:.3f}, {slope['theil_sen'][2]:.3f}] (Theil-Sen)")
    named = {"measured_more_than_5pct_apart": choices(pairs, 0.05),
             "predicted_within_6pct_measured_more_than_2pct_apart": choices(pairs, 0.02, 0.06)}
    for name, c in named.items():
        print(f"plan choices, {name.replace('_', ' ')}: {c['pairs']} pairs, the faster named by the predicted max "
              f"{c['predicted']:.3f}, by the expected max {c['expected']:.3f}")
    if skipped:
        print(f"skipped {len(skipped)} (reports, tasks or plans not reproduced by this checkout)")
    if args.out:
        args.out.write_text(json.dumps({
            "reports": [str(p) for p in args.reports], "planner": args.planner, "device_sets": len(pooled),
            "error_mad_sigma": sigma, "error_std": float(pooled.std()), "within_task_slope": slope, "tasks": rows, "geometric_mean": geo,
            "mean_abs_log_error": miss, "plan_choices": named, "skipped": skipped}, indent=1) + "\n")


if __name__ == "__main__":
    main()
