"""A distinct request's planning CPU, in one process on one core: the planner tasks that the
service runs for ``POST /v1/plans`` (every default planner of the default profile, grouped as the
service groups them), on the load test's ``--fresh`` bodies, without HTTP or worker hand-off.

    python benchmarks/request_cpu.py --requests 40                   # median ms per planner and in all
    python benchmarks/request_cpu.py --requests 40 --out runs/request_cpu.json

What the planners of one request cost is what limits the service's throughput on distinct
requests (docs/service.md): two cores at 100 req/s leave 20 ms of CPU per request for the server,
the client and every planner. The first ``--warmup`` bodies are planned and not counted (caches,
lazy imports). Like a planning worker, it freezes the collector's view of what start-up
loaded (``gc.freeze()``), so that its figures are not full collections walking torch. Each request's time is process CPU time (``time.process_time``), so that a busy
machine slows its wall clock, not its figures; the planners' own ``plan_time_s`` is wall time.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from load_test import Config, request_body  # noqa: E402

from autoshard.cli.support import one_thread  # noqa: E402
from autoshard.workload_file import topology_from_dict, workload_from_dict  # noqa: E402
from service.models import load_models  # noqa: E402
from service.routers.plans import _task_groups  # noqa: E402
from service.state import planner_catalog  # noqa: E402
from service.tasks import PlannerTask, run_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--tables", type=int, default=80)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--models", type=Path, default=ROOT / "data" / "models")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    one_thread()
    store = load_models(args.models)
    gc.freeze()  # as a planning worker does after start-up: a full collection need not walk torch and the models
    loaded = store.resolve(None)
    catalog = planner_catalog(store)
    names = [n for n, info in catalog.items() if info.default and info.available]
    groups = _task_groups(SimpleNamespace(planners=catalog), names)
    config = Config(tables=args.tables, devices=args.devices, fresh=True)
    per_planner: dict[str, list[float]] = {n: [] for n in names}
    totals, maxima = [], {n: [] for n in names}
    for draw in range(1, args.warmup + args.requests + 1):
        body = request_body(config, draw)
        workload, _ = workload_from_dict(body["workload"])
        topology = topology_from_dict(body["topology"])
        started = time.process_time()
        results = [r for group in groups
                   for r in run_task(PlannerTask(group, workload, topology, loaded.profile, time.monotonic() + 60,
                                                 seed=draw), loaded.model, loaded.communication, loaded.policy)]
        spent = time.process_time() - started
        if draw <= args.warmup:
            continue
        totals.append(spent * 1e3)
        for r in results:
            per_planner[r.name].append(r.seconds * 1e3)
            maxima[r.name].append(max(r.plan.costs) if r.plan else float("nan"))
    summary = {
        "profile": loaded.profile, "requests": args.requests, "tables": args.tables, "devices": args.devices,
        "cpu_ms_per_request": {"median": statistics.median(totals), "mean": statistics.fmean(totals), "min": min(totals), "max": max(totals)},
        "planner_ms": {n: {"median": statistics.median(v), "mean": statistics.fmean(v), "min": min(v), "max": max(v)} for n, v in per_planner.items()},
        "predicted_max_ms_mean": {n: statistics.fmean(v) for n, v in maxima.items()},
    }
    for name, row in summary["planner_ms"].items():
        print(f"{name:>16}: {row['median']:7.2f} ms (mean {row['mean']:6.2f})  [{row['min']:.2f}, {row['max']:.2f}]  "
              f"mean max {summary['predicted_max_ms_mean'][name]:.4f} ms")
    c = summary["cpu_ms_per_request"]
    print(f"{'all (CPU)':>16}: {c['median']:7.2f} ms (mean {c['mean']:6.2f})  [{c['min']:.2f}, {c['max']:.2f}]")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
