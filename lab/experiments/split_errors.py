"""Each model's error on the held-out splits of trace files that were trained on together, told
apart by the file a set came from and by whether it holds a column shard (``name[a:b]``).

    python benchmarks/split_errors.py --traces $T.jsonl.gz --traces $T.heavy-shards.jsonl.gz \
        --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 --model runs/f25m17_heavy --out F.json

The splits are those `autoshard cost train` / `cost adapt` make of the merged files (``--seed``,
default 0): unseen sets (a) and unseen tables (b). MAPE of the total cost, and the median of
predicted / measured (the level).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cost_model.checkpoint import load_cost_model  # noqa: E402
from cost_model.dataset import make_splits  # noqa: E402
from cost_model.traces.store import merge_traces, read_traces  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, action="append", required=True)
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    files = [read_traces(p) for p in args.traces]
    origin: dict[str, str] = {}  # a table's first file: a set is told by the file of its first table
    for path, traces in zip(args.traces, files):
        for sample in traces.samples:
            for table in sample.tables:
                origin.setdefault(table.name, str(path))
    splits = make_splits(merge_traces(files), args.seed)
    groups: dict[str, list] = {}
    for split in ("unseen_sets", "unseen_tables"):
        for s in getattr(splits, split):
            source = Path(origin[s.tables[0].name]).name
            kind = "with shards" if any("[" in t.name for t in s.tables) else "whole tables"
            groups.setdefault(f"{split} | {source} | {kind}", []).append(s)
    rows = []
    for model_dir in args.model:
        model = load_cost_model(model_dir)
        for name, sets in sorted(groups.items()):
            ratios = [model.predict(s.tables, s.batch_size) / s.total_ms for s in sets]
            row = {"model": str(model_dir), "group": name, "sets": len(sets),
                   "mape": statistics.mean(abs(r - 1) for r in ratios), "median_predicted_over_measured":
                   statistics.median(ratios)}
            rows.append(row)
            print(f"{str(model_dir):45s} {name:75s} {len(sets):4d} MAPE {row['mape']:.3f} "
                  f"pred/meas {row['median_predicted_over_measured']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"traces": [str(p) for p in args.traces], "seed": args.seed, "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
