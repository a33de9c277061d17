"""Does a seed ensemble know where the cost model is wrong? Several models trained by one command
with different ``--seed``s score the held-out splits; per set: each member's error, the
ensemble's (geometric) mean, and its spread (the standard deviation of the members' log
predictions). If the spread flagged the sets a model under-prices, a planner could score
pessimistically (mean + k x spread) and a search would stop finding the model's errors first
(docs/rl.md, "Measured").

    python benchmarks/ensemble_spread.py data/models/cpu-amd-epyc-fbgemm_tbe-t1 runs/seed1 runs/seed2 \\
        --out docs/figures/ensemble_spread.json

Splits: (b) unseen tables and (c) plan sets with the documented ``cost eval`` traces
(docs/cost_model.md, "Results"), held-out Criteo-like plans (``plans-one-hot-test``) and the
second fresh pool (the headline). For the plan splits, also how often ``mean x exp(k x spread)``
names the faster of two plans (``cost_model.accuracy.plan_choices``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cost_model.fitting import read_all  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402
from cost_model.dataset import Labelled, every_set, make_splits  # noqa: E402
from cost_model.accuracy import mape, plan_choices, predict_labelled  # noqa: E402

T = ROOT / "data" / "traces" / "cpu-amd-epyc-fbgemm_tbe-t1"
SIZE_BUCKETS = ((1, 4), (5, 10), (11, 20), (21, 40), (41, 200))
EVAL_TRACES = ("", ".large", ".plans", ".fp32-sgd", ".fp16-rowwise", ".small-rows-2", ".plans-r3", ".plans-test")


def _traces(*suffixes: str):
    return read_all([Path(f"{T}{s}.jsonl.gz") for s in suffixes])


def held_out() -> dict[str, tuple[Labelled, ...]]:
    documented = make_splits(_traces(*EVAL_TRACES))
    return {"unseen_tables (b)": documented.unseen_tables, "plan_sets (c)": documented.plan_sets,
            "criteo_like_plan_sets": make_splits(_traces("", ".plans-one-hot-test")).plan_sets,
            "second_fresh_pool": every_set(_traces(".fresh-2"))}


def report(predictions: np.ndarray, samples: tuple[Labelled, ...]) -> dict:
    """``predictions``: ``[members, sets]`` milliseconds."""
    true = np.array([s.total_ms for s in samples])
    logs = np.log(predictions)
    mean, spread = np.exp(logs.mean(0)), logs.std(0)
    under = np.log(true / mean)  # > 0: the ensemble under-prices the set
    out = {"sets": len(samples), "member_mape": [round(mape(p, true), 4) for p in predictions],
           "mean_mape": round(mape(mean, true), 4), "spread_median": round(float(np.median(spread)), 4),
           "abs_error_median": round(float(np.median(np.abs(under))), 4),
           "spearman_spread_abs_error": round(float(spearmanr(spread, np.abs(under)).statistic), 3),
           "spearman_spread_under_pricing": round(float(spearmanr(spread, under).statistic), 3)}
    sizes, first = np.array([len(s.tables) for s in samples]), np.log(predictions[0] / true)
    out["member_0_median_log_error_by_set_size"] = {  # < 0: under-priced
        f"{lo}-{hi}": round(float(np.median(first[(sizes >= lo) & (sizes <= hi)])), 3)
        for lo, hi in SIZE_BUCKETS if ((sizes >= lo) & (sizes <= hi)).sum() >= 5}
    if samples[0].plans:
        out["plan_choices"] = {"member_0": plan_choices(samples, predictions[0])["named_the_faster"]}
        for k in (0.0, 1.0, 2.0):
            out["plan_choices"][f"mean_x_exp({k}_spread)"] = plan_choices(samples, mean * np.exp(k * spread))[
                "named_the_faster"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path, help="model folders (or cost_model.pt), one per seed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    models = [load_cost_model(m) for m in args.models]
    result = {"models": [str(m) for m in args.models], "splits": {}}
    for name, samples in held_out().items():
        body = report(np.stack([predict_labelled(m, samples) for m in models]), samples)
        result["splits"][name] = body
        print(f"{name:24s} {body['sets']:4d} sets: members {body['member_mape']}, mean {body['mean_mape']}; "
              f"spread median {body['spread_median']} against a median error of {body['abs_error_median']}; "
              f"Spearman spread~|error| {body['spearman_spread_abs_error']}, "
              f"spread~under-pricing {body['spearman_spread_under_pricing']}"
              + (f"; plan choices {body['plan_choices']}" if "plan_choices" in body else "")
              + f"; seed 0's median log error by set size {body['member_0_median_log_error_by_set_size']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
