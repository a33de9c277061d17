"""Would better labels of the device sets plans create make the model right where plans go?
Leave-task-out on measured evaluations: the device sets that every given run measured (the
same plans, ``benchmarks/error_runs.py``), each labelled by its mean error over the runs (each
run's task median taken out: a label of the set's cost *relative to its task*, at the model's
level, about 3x less noisy than one run's); for each task (the four syn80 tasks, which share a
table pool, held out together), the shipped model fine-tuned as ``autoshard cost adapt`` does on
the other tasks' sets, and scored on the held-out task's by the spread of its error within the
task (MAD sigma), before and after.

    python benchmarks/plan_set_finetune.py docs/figures/evaluation_session34_f25m1 docs/figures/evaluation_session36_f25m1 \\
        docs/figures/evaluation_session38_f25m1 --out docs/figures/plan_set_finetune.json

The labels are ``cost_model.relative_labels``'s, what ``autoshard cost adapt --measured`` learns
from. A diagnostic, not a model to ship: the sets are the evaluation suites' own, so a model
trained on them would be scored on its training data by every later ``evaluate``.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from error_runs import errors_in_every_run, mad_sigma, measured_runs  # noqa: E402

from cost_model.fitting import ADAPT_LEARNING_RATE, ADAPT_MAX_EPOCHS, ADAPT_PATIENCE  # noqa: E402
from autoshard.core.types import DeviceSet, MeasuredDeviceSet  # noqa: E402
from cost_model.dataset import Splits  # noqa: E402
from cost_model.relative_labels import relative_labels  # noqa: E402
from cost_model.train import TrainConfig, train_cost_model  # noqa: E402

SHARED_POOL = ("syn80_s1", "syn80_s2", "syn80_s3", "syn80x4")  # held out together


def within_task_spread(model, sets: list[dict]) -> float:
    """MAD sigma over the sets of log(label / prediction), each less its task's median."""
    by_task = defaultdict(list)
    for s in sets:
        predicted = max(model.predict(s["tables"], s["batch"]), float(model.alone_ms(list(s["tables"]), s["batch"]).max()))
        by_task[s["task"]].append(math.log(s["label"] / predicted))
    return mad_sigma(np.array([e - statistics.median(v) for v in by_task.values() for e in v]))


def plan_choices(model, runs: list, held: tuple[str, ...], batch: dict[str, int]) -> tuple[float, int]:
    """Of the pairs of one run's distinct plans of the ``held`` tasks whose measured maxima differ
    by more than 5%, the share whose faster plan ``model`` predicts lower (a tie: a half), and
    how many pairs."""
    right, pairs = 0.0, 0
    for run in runs:
        for task in held:
            plans = {keys: measured for name, keys, measured in run.plans if name == task and keys}
            predicted = {keys: max(max(model.predict(run.sets[k][0], batch[task]),
                                       float(model.alone_ms(list(run.sets[k][0]), batch[task]).max())) for k in keys)
                         for keys in plans}
            for a, b in itertools.combinations(plans, 2):
                if abs(math.log(plans[a] / plans[b])) > math.log(1.05):
                    pairs += 1
                    right += 0.5 if math.isclose(predicted[a], predicted[b], rel_tol=1e-9) else float(
                        (predicted[a] < predicted[b]) == (plans[a] < plans[b]))
    return right / max(pairs, 1), pairs


def main() -> None:
    args, profile, tasks, runs = measured_runs(__doc__)
    base = profile.model
    common, _ = errors_in_every_run(runs)
    measured = [MeasuredDeviceSet(str(k), DeviceSet((key[0], "", 0), run.sets[key][0], tasks[key[0]].workload.batch_size),
                                  run.sets[key][2]) for k, run in enumerate(runs) for key in common]
    sets = [{"task": label.plans[0][0], "tables": label.tables, "batch": label.batch_size, "label": label.total_ms,
             "labelled": label} for label in relative_labels(base, measured)]  # what `cost adapt --measured` learns
    groups = {"syn80 (4 tasks)": SHARED_POOL} | {t: (t,) for t in sorted({s["task"] for s in sets}) if t not in SHARED_POOL}
    rng, config = np.random.default_rng(0), TrainConfig(learning_rate=ADAPT_LEARNING_RATE, max_epochs=ADAPT_MAX_EPOCHS,
                                                        patience=ADAPT_PATIENCE)
    rows = []
    for name, held in groups.items():
        train = [s["labelled"] for s in sets if s["task"] not in held]
        test = [s for s in sets if s["task"] in held]
        order = rng.permutation(len(train))
        validation = len(train) // 6
        split = Splits(tuple(train[i] for i in order[validation:]), tuple(train[i] for i in order[:validation]), (), ())
        tuned = train_cost_model(split, base.profile, base.row_cap_bytes, config, start_from=base).model
        batch = {t: tasks[t].workload.batch_size for t in held}
        (choices_before, pairs), (choices_after, _) = (plan_choices(m, runs, held, batch) for m in (base, tuned))
        rows.append({"held_out": name, "sets": len(test), "before": within_task_spread(base, test),
                     "after": within_task_spread(tuned, test), "plan_pairs": pairs,
                     "plan_choices_before": choices_before, "plan_choices_after": choices_after})
        print(f"{name:30s} {len(test):4d} sets: within-task MAD sigma {rows[-1]['before']:.4f} -> {rows[-1]['after']:.4f}; "
              f"faster of {pairs} pairs named {choices_before:.3f} -> {choices_after:.3f}", flush=True)
    total = sum(r["sets"] for r in rows)
    summary = {key: sum(r[key] * r["sets"] for r in rows) / total for key in ("before", "after")}
    pairs = sum(r["plan_pairs"] for r in rows)
    summary |= {f"plan_choices_{k}": sum(r[f"plan_choices_{k}"] * r["plan_pairs"] for r in rows) / max(pairs, 1)
                for k in ("before", "after")}
    print(f"weighted by sets: {summary['before']:.4f} -> {summary['after']:.4f}; better on "
          f"{sum(r['after'] < r['before'] for r in rows)} of {len(rows)} held-out groups; faster of {pairs} plan pairs "
          f"named {summary['plan_choices_before']:.3f} -> {summary['plan_choices_after']:.3f}")
    if args.out:
        args.out.write_text(json.dumps({"runs": [str(f) for f in args.runs], "sets": len(sets), "held_out": rows,
                                        "weighted": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
