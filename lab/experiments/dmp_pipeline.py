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

The noise floor within one run: ``--twins`` runs hand-made plans (table-, row-, column-wise,
replicas beside whole tables; table-row-wise on one host) each twice, interleaved in one DMP
world with the pipeline, on both topologies, and writes ``twins.json`` beside the summary: per
plan and rank the two copies' parts and pipelined steps, and the medians of the twins' relative
differences and of parts / pipeline.

    nice -n 19 python lab/experiments/dmp_pipeline.py --twins
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results" / "dmp_pipeline"
OUT = RESULTS / "summary.json"


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
    rows: list[dict[str, Any]] = []
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


def hand_plans(workload: Any, hosts: int) -> list[Any]:
    """Plans of several sharding types on 2 ranks (``hosts`` x ``2 // hosts``)."""
    from autoshard.core.sharding import ShardingType
    from autoshard.core.types import DevicePlan, ShardingPlan, TableShard, replica, row_shards

    t = list(workload.tables)

    def plan(name: str, devices: list[list[Any]]) -> Any:
        return ShardingPlan(name, tuple(DevicePlan(tuple(d), 0.0) for d in devices))

    def rows(kind: ShardingType) -> list[list[Any]]:
        devices: list[list[Any]] = [[], []]
        for table in t:
            for j, shard in enumerate(row_shards(table, 2, kind)):
                devices[j].append(shard)
        return devices

    wide = {t[2].name, t[5].name}  # 64 and 128 wide: split in two column blocks
    cw: list[list[Any]] = [[], []]
    for k, table in enumerate(t):
        if table.name in wide:
            half = table.embedding_dim // 2
            cw[0].append(TableShard(table, 0, half))
            cw[1].append(TableShard(table, half, half))
        else:
            cw[k % 2].append(TableShard(table))
    small = {t[3].name, t[5].name}
    dp: list[list[Any]] = [[replica(x, 2) for x in t if x.name in small] for _ in range(2)]
    for k, table in enumerate(x for x in t if x.name not in small):
        dp[k % 2].append(TableShard(table))
    plans = [
        plan("table_wise", [[x for k, x in enumerate(map(TableShard, t)) if k % 2 == d] for d in range(2)]),
        plan("row_wise", rows(ShardingType.ROW_WISE)),
        plan("column_wise", cw),
        plan("replicas_and_table_wise", dp),
    ]
    if hosts == 1:
        plans.append(plan("table_row_wise", rows(ShardingType.TABLE_ROW_WISE)))
    return plans


def twins() -> dict:
    """Each hand-made plan twice in one DMP world with the pipeline, on 2 x 1 and 1 x 2."""
    from dataclasses import replace

    from autoshard.core.workload_file import load_workload
    from autoshard.torchrec.dmp_run import DistributedConfig
    from autoshard.torchrec.dmp_verify import DmpVerifyConfig, measure_plans_dmp
    from cost_model.bench.netns import missing_privilege

    workload, _ = load_workload(RESULTS / "workload.json")
    rows: list[dict[str, Any]] = []
    for hosts in (2, 1):
        plans = hand_plans(workload, hosts)
        twice = plans + [replace(p, planner=p.planner + "#2") for p in plans]
        run = DistributedConfig(world_size=2, local_world_size=2 // hosts, steps=5, warmups=2, batch_size=1024)
        namespaces = hosts == 2 and missing_privilege() is None
        config = DmpVerifyConfig(run, rounds=3, namespaces=namespaces, pipeline=True)
        measured = measure_plans_dmp(twice, workload, config)
        for a, b in zip(measured[: len(plans)], measured[len(plans) :]):
            for ra, rb in zip(a.ranks, b.ranks):
                rows.append(
                    {
                        "topology": f"{hosts}x{2 // hosts}",
                        "network": a.network,
                        "plan": a.plan_name,
                        "rank": ra.rank,
                        "outputs_match": bool(a.outputs_match and b.outputs_match),
                        "parts_ms": [round(ra.busy_ms, 3), round(rb.busy_ms, 3)],
                        "step_wall_ms": [round(ra.wall_ms, 3), round(rb.wall_ms, 3)],
                        "pipeline_ms": [round(ra.pipeline_ms or 0, 3), round(rb.pipeline_ms or 0, 3)],
                    }
                )

    def gap(key: str) -> float:
        return round(statistics.median(abs(a - b) * 2 / (a + b) for a, b in (r[key] for r in rows)), 3)

    def ratio(top: str, bottom: str, topology: str | None = None) -> float:
        chosen = [r for r in rows if topology is None or r["topology"] == topology]
        return round(statistics.median(x / y for r in chosen for x, y in zip(r[top], r[bottom])), 3)

    return {
        "all_outputs_match": all(r["outputs_match"] for r in rows),
        "twin_gap": {key: gap(key) for key in ("parts_ms", "step_wall_ms", "pipeline_ms")},
        "parts_over_pipeline": {t: ratio("parts_ms", "pipeline_ms", t) for t in ("2x1", "1x2")},
        "step_wall_over_pipeline": {t: ratio("step_wall_ms", "pipeline_ms", t) for t in ("2x1", "1x2")},
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="`autoshard plan ... --verify dmp --json` outputs")
    parser.add_argument("--twins", action="store_true", help="the noise floor: hand-made plans, each twice")
    args = parser.parse_args()
    if args.twins:
        result = twins()
        (RESULTS / "twins.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
        for r in result["rows"]:
            print(r["topology"], f"{r['plan']:24}", r["rank"], r["parts_ms"], r["step_wall_ms"], r["pipeline_ms"])
        return
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
