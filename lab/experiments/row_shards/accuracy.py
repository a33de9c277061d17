"""MAPE of cost models and simpler estimators on held-out row-shard / replica device sets and on
ordinary control sets measured beside them on this host (runs/row-shards/collect.sh).

Held out for every model: the sets of the pool's test tables (split (b), unseen tables; the same
samples whatever the split seed), and (a) the train-pool sets that `cost adapt --seed 0` on
control + shards holds out. A model of another host is scored as is and after one scale factor
(the median of label / prediction over the control file's train-pool sets): what it says about
relative costs, apart from the host's speed.

  .venv/bin/python runs/row-shards/accuracy.py [--json OUT]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from cost_model.accuracy import noise_floor, predict_labelled, scores
from cost_model.checkpoint import load_cost_model
from cost_model.dataset import Labelled, make_splits
from cost_model.estimators import BandwidthEstimator, LinearAggregate
from cost_model.traces.store import merge_traces, read_traces

T = "data/traces/cpu-intel-r-xeon-r-processor-f6m207-fbgemm_tbe-t1"
TAG = os.environ.get("ROW_SHARDS_TAG", "row-shards")  # row-shards-quiet: the quiet-host collection
SHARDS, CONTROL = read_traces(f"{T}.{TAG}.jsonl.gz"), read_traces(f"{T}.{TAG}-control.jsonl.gz")
MODELS = {
    "default (shipped, AMD EPYC profile)": "data/models/default",
    "Intel Xeon profile (shipped)": "data/models/cpu-intel-r-xeon-r-processor-fbgemm_tbe-t1",
    "default adapted on control sets": f"runs/{TAG}/adapt-control",
    "default adapted on control + shard sets": f"runs/{TAG}/adapt-shards",
}


def is_shard_set(s: Labelled) -> bool:
    return any("[" in t.name for t in s.tables)


merged = merge_traces([CONTROL, SHARDS])  # the order `cost adapt --traces C --traces S` merges them in
splits = make_splits(merged, 0)
held = {
    "shard sets, unseen tables (b)": [s for s in splits.unseen_tables if is_shard_set(s)],
    "shard sets, unseen sets (a)": [s for s in splits.unseen_sets if is_shard_set(s)],
    "control sets, unseen tables (b)": [s for s in splits.unseen_tables if not is_shard_set(s)],
}
sub = {
    "shard sets (b) with a table under 0.1 lookups a bag": [
        s for s in held["shard sets, unseen tables (b)"] if min(t.pooling_factor for t in s.tables) < 0.1
    ],
    "shard sets (b) with a replica": [
        s for s in held["shard sets, unseen tables (b)"] if any("[dp/" in t.name for t in s.tables)
    ],
}
held.update(sub)
control_train = [Labelled.of(s) for s in CONTROL.samples if s.split == "train" and s.kind == "set"]

rows: dict[str, dict[str, dict]] = {}


def score_all(name: str, predict) -> None:
    rows[name] = {}
    for split, samples in held.items():
        if samples:
            true = np.array([s.total_ms for s in samples])
            rows[name][split] = scores(predict(samples), true).to_dict()


for name, path in MODELS.items():
    if not (Path(path) / "cost_model.pt").exists():
        print(f"skip {name}: no {path}", file=sys.stderr)
        continue
    model = load_cost_model(path)
    foreign = model.profile.id != SHARDS.profile.id
    score_all(name, lambda samples, m=model: predict_labelled(m, samples))
    if name.startswith("default (shipped"):
        ranges = model.ranges
        model.ranges = None  # as before this change: pooling factors below the trained minimum extrapolated
        score_all(name + ", unclamped", lambda samples, m=model: predict_labelled(m, samples))
        model.ranges = ranges
    if foreign:
        pred = predict_labelled(model, control_train)
        factor = float(np.median(np.array([s.total_ms for s in control_train]) / pred))
        score_all(f"{name} x {factor:.3f} (host factor)", lambda samples, m=model, f=factor: f * predict_labelled(m, samples))

for label, train in (("control", [s for s in splits.train if not is_shard_set(s)]), ("control + shards", splits.train)):
    for est in (LinearAggregate(SHARDS.header["bench"]["row_cap_bytes"]), BandwidthEstimator(SHARDS.header["bench"]["row_cap_bytes"])):
        est.fit(train)
        score_all(f"{est.name} (fit on {label} train)", lambda samples, e=est: e.predict([s.tables for s in samples], [s.batch_size for s in samples]))

floors = {split: noise_floor(samples).to_dict() | {"n": len(samples)} for split, samples in held.items()}
out = {"noise_floor": floors, "estimators": rows}
if "--json" in sys.argv:
    Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(out, indent=1) + "\n")
splits_shown = list(held)
print("| estimator | " + " | ".join(splits_shown) + " |")
print("| --- |" + " --- |" * len(splits_shown))
print("| samples (pass-to-pass MAPE) | " + " | ".join(f"{floors[s]['n']} ({floors[s]['pass_to_pass_mape']})" for s in splits_shown) + " |")
for name, body in rows.items():
    cells = [
        f"{body[s]['mape'] * 100:.1f}% (rank {body[s]['ranking_accuracy'] * 100:.1f}%)" if s in body else "-"
        for s in splits_shown
    ]
    print(f"| {name} | " + " | ".join(cells) + " |")
