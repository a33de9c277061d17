"""Sets larger than any the cost model was trained on: how the network's own answer and the linear
rule past the size limit (``SetCostNetwork.predict_pooled``) compare with measured labels.

    python benchmarks/large_sets.py --traces data/traces/cpu-amd-epyc-fbgemm_tbe-t1.large.jsonl.gz

For each rule (the network as it is, and linear beyond each of ``--limits``), per bucket of set
size: MAPE, the median predicted/measured ratio, and ranking accuracy over all the sets. Labels
are medians over the trace's passes. Writes ``--out`` (JSON), if given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.accuracy import mape, noise_floor, predict_labelled, ranking_accuracy  # noqa: E402
from cost_model.dataset import every_set  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from cost_model.traces.store import merge_traces, read_traces  # noqa: E402

NO_LIMIT = 10**9  # a size limit no set reaches: the network's own answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, action="append", required=True)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--limits", default="64,48,32", help="size limits to try, besides the network alone")
    parser.add_argument("--buckets", default="1,65,97,129,1000000", help="set-size bucket edges")
    parser.add_argument("--out", type=Path, help="Also write the report here (JSON).")
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.model)
    model = profile.model
    samples = every_set(merge_traces([read_traces(p) for p in args.traces]))
    true = np.array([s.total_ms for s in samples])
    sizes = np.array([len(s.tables) for s in samples])
    edges = [int(v) for v in args.buckets.split(",")]
    rules = {"network": NO_LIMIT} | {f"linear beyond {v}": int(v) for v in args.limits.split(",")}
    report = {
        "command": "python " + " ".join(sys.argv),
        "trained_max_set_size": model.max_set_size,
        "sets": len(samples),
        "noise_floor": noise_floor(samples).to_dict(),
        "rules": {},
    }
    shipped = model.linear_beyond
    for name, limit in rules.items():
        model.linear_beyond = limit
        predicted = predict_labelled(model, samples)
        ratio = predicted / true
        buckets = {}
        for low, high in zip(edges, edges[1:]):
            inside = (sizes >= low) & (sizes < high)
            if inside.any():
                buckets[f"{low}-{high - 1}"] = {
                    "sets": int(inside.sum()),
                    "mape": round(mape(predicted[inside], true[inside]), 4),
                    "median_ratio": round(float(np.median(ratio[inside])), 3),
                }
        report["rules"][name] = {
            "mape": round(mape(predicted, true), 4),
            "ranking_accuracy": round(ranking_accuracy(predicted, true), 4),
            "median_ratio": round(float(np.median(ratio)), 3),
            "by_size": buckets,
        }
        print(name, json.dumps(report["rules"][name]))
    model.linear_beyond = shipped
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
