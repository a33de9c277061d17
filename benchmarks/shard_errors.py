"""Does the cost model price column shards as well as whole tables? From measured ``autoshard
evaluate --measure --json`` reports: every measured device of every plan, its measured cost over
its predicted one, grouped per task by whether the device holds a column shard (a table named
``name[a:b]``); geometric means.

    python benchmarks/shard_errors.py docs/figures/evaluation_session44/*/report.json \
        docs/figures/evaluation_session43_split_default/*/report.json --out runs/shard_errors.json

A task's devices share its host's speed at the time (``bench drift``), so compare the two groups
within a task, not tasks with each other.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def device_ratios(paths: list[Path]) -> dict[str, dict[str, list[float]]]:
    """task -> {"whole": [...], "shards": [...]}: log(measured / predicted) of each measured device."""
    out: dict[str, dict[str, list[float]]] = {}
    for path in paths:
        for task in json.loads(path.read_text()).get("tasks", []):
            for plan in task.get("planners", []):
                rows = zip(plan.get("measured_device_ms") or [], plan.get("predicted_device_ms") or [],
                           plan.get("devices") or [])
                for measured, predicted, tables in rows:
                    if measured > 0 and predicted > 0 and tables:
                        kind = "shards" if any("[" in name for name in tables) else "whole"
                        out.setdefault(task["task"], {}).setdefault(kind, []).append(math.log(measured / predicted))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for task, kinds in sorted(device_ratios(args.reports).items()):
        if not {"whole", "shards"} <= kinds.keys():
            continue
        whole, shards = (math.exp(statistics.mean(kinds[k])) for k in ("whole", "shards"))
        rows.append({"task": task, "whole": whole, "shards": shards, "shards_over_whole": shards / whole,
                     "devices": {k: len(v) for k, v in kinds.items()}})
        print(f"{task:30s} measured / predicted: whole tables {whole:.3f} ({len(kinds['whole'])} devices), "
              f"with shards {shards:.3f} ({len(kinds['shards'])}): {shards / whole:.3f}x")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"reports": [str(p) for p in args.reports], "tasks": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
