"""Measure a preset's heaviest tables alone, whole and as column shards, at fp16 and fp32, beside
each model's prediction: where a model prices precision and width wrong, it shows here first.

    python benchmarks/heavy_table_probe.py --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 \
        --model runs/candidate --tables cat_20,cat_21 --out F.json

The host's speed moves between hours (``bench drift``), so read each model's measured / predicted
across the rows (one level for all is right), not its value. Set the harness's allocator settings
in the environment (docs/traces.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.core.presets import load_preset  # noqa: E402
from autoshard.core.types import TableShard  # noqa: E402
from cost_model.bench.harness import BenchConfig, measure  # noqa: E402
from cost_model.checkpoint import load_cost_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--preset", default="criteo_terabyte_fp16_rowwise")
    parser.add_argument("--tables", default="cat_20,cat_21")
    parser.add_argument("--widths", default="128,64,32")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    models = {str(m): load_cost_model(m) for m in args.model}
    workload, _ = load_preset(args.preset)
    by_name = {t.name: t for t in workload.tables}
    config = BenchConfig(batch_size=workload.batch_size, warmups=1, repeats=5)
    rows = []
    for name in args.tables.split(","):
        for width in (int(w) for w in args.widths.split(",")):
            for bytes_per_element in (2, 4):
                table = replace(TableShard(by_name[name], 0, width).as_table, bytes_per_element=bytes_per_element)
                measured = measure([table], config).total.median
                predicted = {m: model.predict([table], workload.batch_size) for m, model in models.items()}
                rows.append({"table": table.name, "bytes_per_element": bytes_per_element, "optimizer":
                             table.optimizer.value, "measured_ms": measured, "predicted_ms": predicted})
                print(f"{table.name:16s} {'fp16' if bytes_per_element == 2 else 'fp32'} measured {measured:7.2f} ms  " +
                      "  ".join(f"{Path(m).name} {p:7.2f} ({measured / p:4.2f})" for m, p in predicted.items()),
                      flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"preset": args.preset, "batch_size": workload.batch_size, "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
