"""Adapting a profile of other hardware to this machine (``autoshard cost adapt``), against the
alternatives, on traces measured here: the model as it is, the model times one fitted factor,
the model fine-tuned (what ``cost adapt`` does), and the same network trained from scratch on the
same sets; then fine-tuning on fewer sets (how much collection adapting needs).

    python benchmarks/adapt_ablation.py --base data/models/default \\
        --traces data/traces/cpu-amd-epyc-f25m17-fbgemm_tbe-t1.jsonl.gz \\
        --fresh-pool data/traces/cpu-amd-epyc-f25m17-fbgemm_tbe-t1.fresh.jsonl.gz --out runs/adapt_ablation.json

Held out: splits (a) and (b) of ``--traces`` (``cost_model.dataset.make_splits``, seed 0) and
every set of ``--fresh-pool`` (tables of another pool). Figures are MAPE / pairwise ranking
accuracy of the total cost; training is seeded, one thread, seconds each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cost_model.fitting import ADAPT_LEARNING_RATE, ADAPT_MAX_EPOCHS, ADAPT_PATIENCE  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402
from cost_model.dataset import every_set, make_splits  # noqa: E402
from cost_model.accuracy import predict_labelled, scores  # noqa: E402
from cost_model.traces.store import read_traces  # noqa: E402
from cost_model.train import TrainConfig, train_cost_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--traces", type=Path, required=True, help="sets measured on this machine")
    parser.add_argument("--fresh-pool", type=Path, help="sets of another pool, measured on this machine")
    parser.add_argument("--sizes", default="25,50,100,150", help="training-set sizes to fine-tune on (3 seeds each)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    base = load_cost_model(args.base)
    local = read_traces(args.traces)
    splits = make_splits(local, 0)
    row_cap = int(local.header["bench"]["row_cap_bytes"])
    held = {"unseen_sets": splits.unseen_sets, "unseen_tables": splits.unseen_tables}
    if args.fresh_pool:
        held["fresh_pool"] = every_set(read_traces(args.fresh_pool))
    true = {k: np.array([s.total_ms for s in v]) for k, v in held.items()}
    fine_tune = TrainConfig(learning_rate=ADAPT_LEARNING_RATE, max_epochs=ADAPT_MAX_EPOCHS, patience=ADAPT_PATIENCE)
    rows: dict[str, dict] = {}

    def report(label: str, model, factor: float = 1.0, seconds: float = 0.0) -> None:
        rows[label] = {k: scores(predict_labelled(model, v) * factor, true[k]) for k, v in held.items()}
        rows[label]["seconds"] = round(seconds, 1)
        print(f"{label:>34}: " + "  ".join(f"{k} {r['mape']:.3f} / {r['ranking_accuracy']:.3f}"
                                           for k, r in rows[label].items() if k != "seconds"), flush=True)

    report("as is", base)
    factor = float(np.median(np.array([s.total_ms for s in splits.train]) / predict_labelled(base, splits.train)))
    report(f"times one factor ({factor:.3f})", base, factor)
    for label, config, start in (("fine-tuned (cost adapt)", fine_tune, base),
                                 ("from scratch, same sets", TrainConfig(network=base.network.config), None)):
        began = time.perf_counter()
        result = train_cost_model(splits, local.profile, row_cap, config, start_from=start)
        report(label, result.model, seconds=time.perf_counter() - began)
    by_size: dict[int, list[float]] = {}
    last = "fresh_pool" if "fresh_pool" in held else "unseen_tables"
    for size in map(int, args.sizes.split(",")):
        for seed in (0, 1, 2):
            order = np.random.default_rng(seed).permutation(len(splits.train))[:size]
            fewer = dataclasses.replace(splits, train=tuple(splits.train[i] for i in order))
            model = train_cost_model(fewer, local.profile, row_cap, dataclasses.replace(fine_tune, seed=seed),
                                     start_from=base).model
            by_size.setdefault(size, []).append(scores(predict_labelled(model, held[last]), true[last])["mape"])
        print(f"fine-tuned on {size:4d} sets: {last} MAPE {np.median(by_size[size]):.3f} "
              f"(seeds {', '.join(f'{m:.3f}' for m in by_size[size])})", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"base": str(args.base), "traces": str(args.traces), "splits": splits.sizes(),
                                        "models": rows, "fine_tuned_on_fewer_sets": {"split": last, "mape": by_size}},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
