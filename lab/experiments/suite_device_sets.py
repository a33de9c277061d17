"""How well cost models predict the device sets of measured plans: re-plan every task of measured
`autoshard evaluate` reports with the model and policy that made them (``--plan-model``; plans are deterministic), and
score each model's prediction of every device against the device's measured median.

    python benchmarks/suite_device_sets.py --model runs/final2 --model runs/final3 \\
        --report docs/figures/evaluation_before_refine/default_report.json:default \\
        --report docs/figures/evaluation_before_refine/rl_grid_report.json:rl_grid

Reports per model: MAPE and median predicted / measured over the non-empty device sets, their
spread within a task (``relative_mad_sigma``: what the planners rank by, a run's speed taken out),
the same for each plan's slowest device, and **plan choices**: over the pairs of plans of one task
whose measured slowest devices differ by more than 5%, the share the model orders the same way
(a tie in prediction counts a half). These sets are where plans go, and no model trained on them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from autoshard.core.task import load_suite  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.registry import make_planner
from autoshard.core.stats import mad_sigma  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402

PLANNERS = ("cost_greedy", "rl+refine", "rl", "size_lookup_greedy", "lookup_greedy", "dim_greedy", "round_robin")


def relative_spread(log_errors: np.ndarray, plans: list[tuple[int, int, float, str]]) -> float:
    """MAD sigma of the devices' log(measured / predicted), each less its task's median (a run's
    speed that hour is common to a task's devices; the plans choose by the rest)."""
    by_task: dict[str, list[int]] = {}
    for start, n, _, task in plans:
        by_task.setdefault(task, []).extend(range(start, start + n))
    centred = np.concatenate([log_errors[i] - np.median(log_errors[i]) for i in map(np.array, by_task.values())])
    return mad_sigma(centred)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, action="append", default=[], help="model folders to score (besides the shipped one)")
    parser.add_argument("--report", action="append", required=True, help="REPORT.json:SUITE of a measured evaluate run")
    parser.add_argument("--plan-model", type=Path, default=DEFAULT_MODEL,
                        help="the model folder (cost model + policy) that made the reports' plans")
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.plan_model)
    models = {str(args.plan_model): profile.model} | {str(m): load_cost_model(m) for m in args.model}
    sets, measured, plans = [], [], []  # (sets, batch), per-device ms, (first set index, count, measured max)
    for ref in args.report:
        path, suite = ref.rsplit(":", 1)
        report = {t["task"]: {p["planner"]: p for p in t["planners"]} for t in json.loads(Path(path).read_text())["tasks"]}
        for task in load_suite(suite)[1]:
            for name in PLANNERS:
                plan = make_planner(name, PlannerContext(profile.model, profile.policy)).plan(task.workload, task.topology)
                row = report[task.name][name]
                devices = [([s.as_table for s in d.shards], ms) for d, ms in zip(plan.devices, row["measured_device_ms"])]
                devices = [(tables, ms) for tables, ms in devices if tables]
                label = f"{suite}/{task.name}" if len(args.report) == 1 else f"{ref}/{task.name}"  # one run's task
                plans.append((len(sets), len(devices), row["measured_max_ms"], label))
                sets += [(tables, task.workload.batch_size) for tables, _ in devices]
                measured += [ms for _, ms in devices]
    true = np.array(measured)
    for name, model in models.items():
        pred = np.array([model.predict(tables, batch) for tables, batch in sets])
        worst = np.array([pred[start:start + n].max() for start, n, _, _ in plans])
        truth = np.array([m for _, _, m, _ in plans])
        right = pairs = 0.0
        by_task: dict[str, list[float]] = {}  # task -> [right, pairs]
        for (i, a), (j, b) in itertools.combinations(enumerate(plans), 2):
            if a[3] == b[3] and abs(truth[i] - truth[j]) > 0.05 * min(truth[i], truth[j]):
                pairs += 1
                ok = 0.5 if np.isclose(worst[i], worst[j], rtol=1e-9) else float((worst[i] < worst[j]) == (truth[i] < truth[j]))
                right += ok
                task = by_task.setdefault(a[3], [0.0, 0.0])
                task[0], task[1] = task[0] + ok, task[1] + 1
        print(json.dumps({"model": name, "device_sets": len(true), "mape": round(float(np.mean(abs(pred - true) / true)), 4),
                          "median_ratio": round(float(np.median(pred / true)), 3),
                          "relative_mad_sigma": round(relative_spread(np.log(true / pred), plans), 4), "plans": len(plans),
                          "max_mape": round(float(np.mean(abs(worst - truth) / truth)), 4),
                          "max_median_ratio": round(float(np.median(worst / truth)), 3),
                          "plan_choices": round(right / pairs, 3) if pairs else None, "plan_pairs": int(pairs),
                          "plan_choices_by_task": {t: f"{r:g}/{n:g}" for t, (r, n) in sorted(by_task.items())}}))


if __name__ == "__main__":
    main()
