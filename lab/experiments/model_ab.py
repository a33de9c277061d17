"""Two cost models, measured where it counts: per task of a suite, cost_greedy's plan under each
model and the heuristics' plans (which no model changes), measured interleaved in one
``measure_plans`` (compute only, as ``evaluate --measure --no-communication``).

    python benchmarks/model_ab.py default --candidate runs/model --rounds 6 --out ab_default.json
    python benchmarks/model_ab.py --summarise ab_default.json ab_grid.json   # how right each model was, over both

The shipped profile's model is the baseline (``--baseline`` for another). For each task it
prints both cost_greedy plans' measured max, the candidate's ratio to the baseline's with its
95% interval, and each against the best heuristic (by measured max); the JSON adds every plan's
predicted max under both models. Set the harness's allocator settings in the environment
(docs/traces.md).

    python benchmarks/model_ab.py many_tables --candidate runs/model \
        --anchors data/traces/cpu-amd-epyc-f25m17-fbgemm_tbe-t1.jsonl.gz   # absolute error, host speed taken out

The host's speed moves by tens of percent between runs, so a predicted max's absolute error mixes
the model's with the host's. ``--anchors`` (a trace file of the profile) re-measures
``--anchor-sets`` of its sets of at most 10 tables around each task's plans (before and after)
and scales each model's predictions by the median of measured over predicted on them: the
anchored error of the plans' maxima is then the model's own, where sets as small as the anchors
are right (docs/cost_model.md, "Where the linear rule should start").
"""

from __future__ import annotations

import argparse
import dataclasses
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
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.core.types import ShardingPlan  # noqa: E402
from cost_model.bench.harness import BenchConfig, measure  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402
from autoshard.evaluation.measure_plan import measure_plans  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402

HEURISTICS = ("round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")
MARGIN = 0.05  # plans of one task whose measured max differs by more than this are a pair to name


ANCHOR_TABLES = 10  # anchors: sets this small, where every profile's model was trained most


def how_right(records: list[dict]) -> dict[str, dict[str, float]]:
    """Per model, over every task's measured plans: the share of pairs of plans (measured max more
    than ``MARGIN`` apart) whose faster one it predicts faster, and the MAPE of its predicted max
    (and, where the tasks were anchored, of its predicted max times the task's anchor factor)."""
    out = {}
    for key in ("baseline", "candidate"):
        named = pairs = 0
        errors, anchored = [], []
        for record in records:
            plans = list(record["plans"].values())
            errors += [abs(p[f"predicted_{key}_ms"] / p["measured_max_ms"] - 1) for p in plans]
            factor = record.get("anchor_factor", {}).get(key)
            if factor is not None:
                anchored += [abs(p[f"predicted_{key}_ms"] * factor / p["measured_max_ms"] - 1) for p in plans]
            for a, b in itertools.combinations(plans, 2):
                ma, mb = a["measured_max_ms"], b["measured_max_ms"]
                if abs(ma - mb) > MARGIN * min(ma, mb):
                    pairs += 1
                    named += (a[f"predicted_{key}_ms"] - b[f"predicted_{key}_ms"]) * (ma - mb) > 0
        out[key] = {"pairs": pairs, "named_the_faster": named / pairs if pairs else float("nan"),
                    "plan_max_mape": sum(errors) / len(errors), "plans": len(errors),
                    "plan_max_mape_anchored": sum(anchored) / len(anchored) if anchored else None}
    return out


def anchor_sets(path: Path, count: int) -> list:
    """``count`` seeded sets of at most ``ANCHOR_TABLES`` tables of the trace file ``path``."""
    from cost_model.traces.store import read_traces

    small = [s for s in read_traces(path).sets() if len(s.tables) <= ANCHOR_TABLES]
    return [small[i] for i in np.random.default_rng(0).choice(len(small), min(count, len(small)), replace=False)]


def measure_anchors(anchors: list, config: BenchConfig) -> list[float]:
    """Each anchor set's measured ms now (median of its repeats)."""
    return [measure(a.tables, dataclasses.replace(config, batch_size=a.batch_size)).total.median for a in anchors]


def anchor_factor(anchors: list, measured: list[float], model) -> float:
    """Median of measured over ``model``'s predicted ms on the anchor sets."""
    return float(np.median([m / model.predict(list(a.tables), a.batch_size) for a, m in zip(anchors, measured)]))


def print_how_right(summary: dict[str, dict[str, float]]) -> None:
    for key, s in summary.items():
        anchored = s.get("plan_max_mape_anchored")
        print(f"{key}: names the faster plan in {s['named_the_faster']:.3f} of {s['pairs']} pairs > {MARGIN:.0%} apart; "
              f"predicted max off the measured by {s['plan_max_mape']:.3f} (MAPE over {s['plans']} plans)"
              + (f", {anchored:.3f} with the host's speed taken out (anchors)" if anchored is not None else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", nargs="?", help="a suite file or bundled suite name (default, rl_grid, ...)")
    parser.add_argument("--candidate", type=Path, help="profile folder (or cost_model.pt) to compare")
    parser.add_argument("--summarise", type=Path, nargs="+", help="measure nothing: how right each model was in "
                                                                  "these --out files, together")
    parser.add_argument("--baseline", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--anchors", type=Path, help="a trace file of the profile: re-measure some of its small sets "
                                                     "around each task to take the host's speed out of the error")
    parser.add_argument("--anchor-sets", type=int, default=12)
    args = parser.parse_args()
    if args.summarise:
        print_how_right(how_right([r for f in args.summarise for r in json.loads(f.read_text())["tasks"]]))
        return
    if args.suite is None or args.candidate is None:
        parser.error("a suite and --candidate are needed to measure (or --summarise files)")
    one_thread()
    baseline = load_profile_or_exit(args.baseline)
    path = args.candidate / "cost_model.pt" if args.candidate.is_dir() else args.candidate
    candidate = load_cost_model(path)
    records = []
    bench = BenchConfig(mode=default_mode())
    anchors = anchor_sets(args.anchors, args.anchor_sets) if args.anchors else []
    for task in load_suite(args.suite)[1]:
        w, t = task.workload, task.topology
        old = compare_planners(w, t, ["cost_greedy", *HEURISTICS], PlannerContext(baseline.model)).plans
        new = compare_planners(w, t, ["cost_greedy"], PlannerContext(candidate)).plans[0]
        plans = [old[0], dataclasses.replace(new, planner="cost_greedy (candidate)"), *old[1:]]

        def predicted(model, plan: ShardingPlan) -> float:
            return max(model.predict_many([[s.as_table for s in d.shards] for d in plan.devices if d.shards],
                                          w.batch_size))

        before = measure_anchors(anchors, bench)
        measured = measure_plans(plans, w.batch_size, bench, rounds=args.rounds)
        around = [float(np.median(pair)) for pair in zip(before, measure_anchors(anchors, bench))]
        rows = {m.planner: {"measured_max_ms": m.max_ms, "ratio_to_baseline_cost_greedy": m.ratio_to_reference,
                            "ratio_ci95": m.ratio_ci95, "predicted_baseline_ms": predicted(baseline.model, p),
                            "predicted_candidate_ms": predicted(candidate, p)} for m, p in zip(measured, plans)}
        records.append({"task": task.name, "plans": rows})
        if anchors:
            records[-1]["anchor_factor"] = {"baseline": anchor_factor(anchors, around, baseline.model),
                                            "candidate": anchor_factor(anchors, around, candidate)}
        best = min(HEURISTICS, key=lambda h: rows[h]["measured_max_ms"])
        cand = rows["cost_greedy (candidate)"]
        base_ms, cand_ms, best_ms = (rows["cost_greedy"]["measured_max_ms"], cand["measured_max_ms"],
                                     rows[best]["measured_max_ms"])
        print(f"{task.name:28s} cost_greedy {base_ms:.3f} / candidate {cand_ms:.3f} ms: "
              f"{cand['ratio_to_baseline_cost_greedy']:.3f} [{cand['ratio_ci95'][0]:.3f}, {cand['ratio_ci95'][1]:.3f}]; "
              f"best heuristic {best} {best_ms:.3f}: {base_ms / best_ms:.3f} / {cand_ms / best_ms:.3f}", flush=True)
    summary = how_right(records)
    print_how_right(summary)
    if args.out:
        args.out.write_text(json.dumps({"suite": args.suite, "baseline": str(args.baseline),
                                        "candidate": str(args.candidate), "rounds": args.rounds,
                                        "how_right": summary, "tasks": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
