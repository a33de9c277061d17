"""Issue 61 part 4: each plan's whole step in TorchRec's ``TrainPipelineSparseDist`` beside the
sum of its decomposed parts and the model's prediction, per rank, on 2 gloo CPU ranks.

The runs are the product's own command, on the synthetic workload of this folder's results
(``lab/results/dmp_pipeline/workload.json``), on 2 emulated hosts x 1 (network namespaces, a
10 Gbit/s veth; needs root) and on 1 host x 2 (loopback), under several sharding-type limits:

    nice -n 19 autoshard plan lab/results/dmp_pipeline/workload.json --memory-gb 1 \\
        --verify dmp --verify-top 4 --verify-rounds 2 --json --hosts H --devices-per-host D \\
        --planner P [--sharding-types T] > RUN.json

This script reads those JSON files and writes ``lab/results/dmp_pipeline/summary.json``: per
candidate and rank, the sum of the parts (``measured_ms``: the rank's own time, barrier waits
left out), the decomposed step's wall time (``step_wall_ms``: with the barriers), the pipelined
step's wall time (``pipeline_ms``) and the prediction; the medians of their ratios; and, where
the same command ran twice (two folders of runs), the noise floor of each figure.

    python lab/experiments/dmp_pipeline.py RUN.json ...
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "dmp_pipeline" / "summary.json"


def _kinds(plan: dict) -> list[str]:
    """The shard forms a plan's devices name (``t5[dp]`` a replica, ``t0[r0:10]`` a row block:
    row-, table-row-wise or grid; ``t1[c0:8]`` a column block: column- or table-column-wise;
    untagged: a whole table, table-wise). The report does not name the sharding type itself."""
    return sorted({_kind(name) for d in plan["devices"] for name in d["tables"]})


def _kind(name: str) -> str:
    tag = re.search(r"\[([^\]]+)\]", name)
    if tag is None:
        return "whole"
    if tag.group(1) == "dp":
        return "replica"
    parts = tag.group(1).split(",")
    return "rows+columns" if len(parts) == 2 else "rows" if parts[0].startswith("r") else "columns"


def summarize(paths: list[Path]) -> dict:
    rows = []
    for path in paths:
        text = path.read_text()
        report = json.loads(text[text.index("{") :])
        plans = {p["planner"]: p for p in report["plans"]}
        for candidate in report["verification"]["candidates"]:
            v = candidate["verify"]
            for rank in v["ranks"]:
                rows.append(
                    {
                        "run": f"{path.parent.name}/{path.stem}",
                        "plan": candidate["planners"][0],
                        "kinds": _kinds(plans[candidate["planners"][0]]),
                        "network": v["network"],
                        "outputs_match": v["outputs_match"],
                        "rank": rank["rank"],
                        "parts_ms": rank["measured_ms"],
                        "step_wall_ms": rank["step_wall_ms"],
                        "pipeline_ms": rank["pipeline_ms"],
                        "predicted_ms": rank["predicted_ms"],
                    }
                )

    def median(key: str, over: str, where: str | None = None) -> float | None:
        chosen = [r[key] / r[over] for r in rows if where is None or where in r["network"]]
        return round(statistics.median(chosen), 3) if chosen else None

    ratios = {
        scope: {
            "parts_over_pipeline": median("parts_ms", "pipeline_ms", where),
            "step_wall_over_pipeline": median("step_wall_ms", "pipeline_ms", where),
            "predicted_over_pipeline": median("predicted_ms", "pipeline_ms", where),
            "predicted_over_parts": median("predicted_ms", "parts_ms", where),
        }
        for scope, where in (("all", None), ("emulated_hosts", "namespaces"), ("one_host", "loopback"))
    }
    return {
        "repeats": _repeats(rows),
        "ranks": len(rows),
        "plans": len({(r["run"], r["plan"]) for r in rows}),
        "all_outputs_match": all(r["outputs_match"] for r in rows),
        "median_ratios": ratios,
        "rows": rows,
    }


def _repeats(rows: list[dict]) -> dict:
    """The noise floor: where the same plan's rank was measured in two runs of the same command
    (two folders of runs), the median relative difference |a - b| / mean of each figure."""
    seen: dict[tuple, list[dict]] = {}
    for r in rows:
        seen.setdefault((r["run"].split("/")[-1], r["plan"], r["rank"]), []).append(r)
    pairs = [same[:2] for same in seen.values() if len(same) >= 2]

    def spread(key: str) -> float | None:
        gaps = [abs(a[key] - b[key]) * 2 / (a[key] + b[key]) for a, b in pairs]
        return round(statistics.median(gaps), 3) if gaps else None

    return {"pairs": len(pairs), "parts_ms": spread("parts_ms"), "pipeline_ms": spread("pipeline_ms")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="`autoshard plan ... --verify dmp --json` outputs")
    args = parser.parse_args()
    summary = summarize(args.runs)
    OUT.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    for r in summary["rows"]:
        head = f"{r['run']:17} {r['plan']:14} {','.join(r['kinds']):20} rank {r['rank']}:"
        print(
            f"{head} parts {r['parts_ms']:7.2f}  step wall {r['step_wall_ms']:7.2f}"
            f"  pipeline {r['pipeline_ms']:7.2f}  predicted {r['predicted_ms']:6.2f}"
        )


if __name__ == "__main__":
    main()
