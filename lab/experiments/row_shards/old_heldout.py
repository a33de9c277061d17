"""The adapted models on the default profile's own held-out splits (measured on its AMD EPYC host):
MAPE as is, MAPE after one host factor (median label / prediction over that split's training sets),
and ranking accuracy (scale-free). `cost eval` refuses another profile's traces, hence this script.

  .venv/bin/python runs/row-shards/old_heldout.py
"""

import shlex

import numpy as np

from cost_model.accuracy import predict_labelled, scores
from cost_model.checkpoint import load_cost_model
from cost_model.dataset import every_set, make_splits
from cost_model.traces.store import merge_traces, read_traces

args = shlex.split(open("runs/row-shards/default_eval_cmd.txt").read())
traces = [args[i + 1] for i, a in enumerate(args) if a == "--traces"]
fresh = args[args.index("--fresh-pool") + 1]
data = merge_traces([read_traces(p) for p in traces])
splits = make_splits(data, 0)
held = {
    "(a) unseen sets": splits.unseen_sets,
    "(b) unseen tables": splits.unseen_tables,
    "(c) plan sets": splits.plan_sets,
    "fresh pool": every_set(read_traces(fresh)),
}
train = [s for s in splits.train if s.tables and len(s.tables) > 0][::5]  # a fifth of training, for the factor
print("| model | " + " | ".join(held) + " |")
print("| --- |" + " --- |" * len(held))
for name, path in (
    ("default (shipped)", "data/models/default"),
    ("adapted on control sets", "runs/row-shards/adapt-control"),
    ("adapted on control + shard sets", "runs/row-shards/adapt-shards"),
):
    model = load_cost_model(path)
    factor = float(np.median([s.total_ms for s in train] / predict_labelled(model, train)))
    cells = []
    for samples in held.values():
        true = np.array([s.total_ms for s in samples])
        pred = predict_labelled(model, samples)
        raw, scaled = scores(pred, true), scores(factor * pred, true)
        cells.append(f"{raw.mape * 100:.1f}% / x{factor:.2f}: {scaled.mape * 100:.1f}% (rank {raw.ranking_accuracy * 100:.1f}%)")
    print(f"| {name} | " + " | ".join(cells) + " |")
