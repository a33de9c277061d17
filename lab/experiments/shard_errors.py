"""Does the cost model price column shards as well as whole tables? From measured ``autoshard
evaluate --measure --json`` reports: every measured device of every plan, its measured cost over
its predicted one, grouped per task by whether the device holds a column shard (a table named
``name[a:b]``); geometric means.

    python benchmarks/shard_errors.py docs/figures/evaluation_session44/*/report.json \
        docs/figures/evaluation_session43_split_default/*/report.json --out runs/shard_errors.json

Without ``--model`` the predictions are the reports' own (the model that planned them), every
plan's device counted. Each ``--model`` folder predicts every distinct set of a task and run
again, as `autoshard cost errors` does, so models compare on the same sets: the groups' figures
are then relative to the task's median set, and ``spread`` is the MAD sigma of those errors.

A task's devices share its host's speed at the time (``bench drift``), so compare the two groups
within a task, not tasks with each other.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.evaluation.measured_reports import measured_device_sets  # noqa: E402
from autoshard.core.stats import mad_sigma  # noqa: E402

Errors = dict[str, dict[str, list[float]]]  # task -> {"whole" | "shards": [log(measured / predicted), ...]}


def reported_errors(paths: list[Path]) -> tuple[Errors, list[float]]:
    """The reports' own predictions: per task and kind, and every device centred on its task and run."""
    out: Errors = {}
    centred: list[float] = []
    for path in paths:
        for task in json.loads(path.read_text()).get("tasks", []):
            logs = []
            for plan in task.get("planners", []):
                rows = zip(plan.get("measured_device_ms") or [], plan.get("predicted_device_ms") or [],
                           plan.get("devices") or [])
                for measured, predicted, tables in rows:
                    if measured > 0 and predicted > 0 and tables:
                        logs.append(math.log(measured / predicted))
                        out.setdefault(task["task"], {}).setdefault(_kind(tables), []).append(logs[-1])
            centred += [v - statistics.median(logs) for v in logs] if logs else []
    return out, centred


def model_errors(paths: list[Path], model_dir: Path) -> tuple[Errors, list[float]]:
    """The same, each distinct measured set of a task and run predicted again by the model in
    ``model_dir`` and centred on its task and run (``centred_set_errors``, as `cost errors`)."""
    from cost_model.checkpoint import load_cost_model
    from cost_model.relative_labels import centred_set_errors

    out: Errors = {}
    centred: list[float] = []
    for (_, task), errors in centred_set_errors(load_cost_model(model_dir), measured_device_sets(paths)).items():
        for (_, names, _), value in errors.items():
            out.setdefault(task, {}).setdefault(_kind(names), []).append(value)
            centred.append(value)
    return out, centred


def _kind(names) -> str:
    return "shards" if any("[" in name for name in names) else "whole"


def summarise(errors: Errors, centred: list[float], label: str) -> dict:
    rows = []
    for task, kinds in sorted(errors.items()):
        if not {"whole", "shards"} <= kinds.keys():
            continue
        whole, shards = (math.exp(statistics.mean(kinds[k])) for k in ("whole", "shards"))
        rows.append({"task": task, "whole": whole, "shards": shards, "shards_over_whole": shards / whole,
                     "devices": {k: len(v) for k, v in kinds.items()}})
        print(f"{label}: {task:30s} measured / predicted: whole tables {whole:.3f} ({len(kinds['whole'])} devices), "
              f"with shards {shards:.3f} ({len(kinds['shards'])}): {shards / whole:.3f}x")
    overall = math.exp(statistics.mean(math.log(r["shards_over_whole"]) for r in rows)) if rows else None
    spread = mad_sigma(centred) if centred else None
    print(f"{label}: shards / whole over {len(rows)} tasks {overall:.3f}; spread within a task {spread:.4f} "
          f"({len(centred)} devices)")
    return {"model": label, "tasks": rows, "shards_over_whole": overall, "spread": spread, "devices": len(centred)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--model", type=Path, action="append", default=[],
                        help="a profile folder whose cost model predicts every device again (repeatable)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = [summarise(*model_errors(args.reports, m), str(m)) for m in args.model] or \
        [summarise(*reported_errors(args.reports), "reported")]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        body = {"reports": [str(p) for p in args.reports], **(results[0] if not args.model else {"models": results})}
        args.out.write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
