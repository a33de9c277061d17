"""Issue 61: the communication parts of `dmp_mape.py`'s runs, measured over predicted, per part.

    python lab/experiments/dmp_comm_parts.py lab/results/dmp_mape/summary.json

Reads a `dmp_mape.py` result (its per-rank parts) and prints, for each part a DMP step pays in
communication, the median over ranks of measured / predicted, in both batch conventions the result
holds (``predicted``: the product's; ``predicted_dmp_batch``: B x W): the ids' input dist, the
output dist of ranks whose shards are table-/column-wise only (an all-to-all) and of ranks with
row-wise shards (reduce-scatter + all-gather), and the data-parallel all-reduce.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ALL_TO_ALL_TYPES = {"table_wise", "column_wise", "table_column_wise", "data_parallel"}


def _median(pairs: list[tuple[float, float]]) -> dict:
    ratios = [m / p for m, p in pairs if p and p > 0 and m > 0]
    return {"median": round(statistics.median(ratios), 3) if ratios else None, "ranks": len(ratios)}


def parts(result: dict) -> dict:
    """Per part and convention: the median of measured / predicted and how many ranks it spans."""
    out: dict[str, dict] = {}
    for convention in ("predicted", "predicted_dmp_batch"):
        got: dict[str, list[tuple[float, float]]] = {
            "input_dist": [],
            "output_dist_all_to_all": [],
            "output_dist_row_wise": [],
            "allreduce": [],
        }
        for row in result["plans"]:
            kind = "output_dist_all_to_all" if set(row["types"]) <= ALL_TO_ALL_TYPES else "output_dist_row_wise"
            for r in row["ranks"]:
                p, m = r[convention], r["parts_ms"]
                got["input_dist"].append((m["input_dist"], p["input_dist"]))
                got[kind].append((m["output_dist_forward"] + m["output_dist_backward"], p["output_dist"]))
                got["allreduce"].append((m["allreduce"], p["allreduce"]))
        out[convention] = {k: _median(v) for k, v in got.items()}
    return out


if __name__ == "__main__":
    result = json.loads(Path(sys.argv[1]).read_text())
    print(
        json.dumps(
            {
                "source": sys.argv[1],
                "profile": result["profile"],
                "communication": result["communication_model"],
                "load_1min_start_end": result["load_1min_start_end"],
                "parts": parts(result),
            },
            indent=1,
        )
    )
