"""A distinct request's planning CPU, in one process on one core: the planner tasks that the
service runs for ``POST /v1/plans`` (every default planner of the default profile, grouped as the
service groups them), on the load test's ``--fresh`` bodies, without HTTP or worker hand-off.

    python benchmarks/request_cpu.py --requests 40                   # median ms per planner and in all
    python benchmarks/request_cpu.py --requests 40 --out runs/request_cpu.json
    python benchmarks/request_cpu.py --requests 200 --base /tmp/base # this checkout against another, interleaved
    python benchmarks/request_cpu.py --requests 400 --same-names      # every request's tables named t0, t1, ...

What the planners of one request cost is what limits the service's throughput on distinct
requests (docs/service.md): two cores at 100 req/s leave 20 ms of CPU per request for the server,
the client and every planner. The first ``--warmup`` bodies are planned and not counted (caches,
lazy imports). Like a planning worker, it freezes the collector's view of what start-up loaded
(``gc.freeze()``, after the planners' imports, torchrec's included), so that its figures are not
full collections walking torch. Each request's time is process CPU time (``time.process_time``),
so that a busy machine slows its wall clock, not its figures; the planners' own ``plan_time_s``
is wall time.

``--base DIR`` (a ``git worktree`` of an earlier commit) compares two checkouts request by
request: each plans in its own process (``--serve``, that checkout's code on this checkout's
models), and every body goes to both, one after the other, the order alternating. The host's
speed, which drifts by tens of percent within minutes on a shared machine, then moves both
sides of every pair alike; the report is the median of the paired ratios (this / base), with
their quartiles.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]

Planning = Callable[[dict, int], dict]
"""(request body, seed) -> {"cpu_ms": the request's planning CPU, "planners": {name: [ms, predicted max]}}"""


def planning(checkout: Path, models: Path) -> Planning:
    """The service's planner tasks of ``checkout``'s code, with the models of ``models`` loaded
    as a planning worker loads them."""
    sys.path.insert(0, str(checkout))
    from cost_model.process import one_thread
    from autoshard.core.workload_file import topology_from_dict, workload_from_dict
    from autoshard.profiles import load_models
    from service.routers.plans import _task_groups
    from service.state import planner_catalog
    from service.tasks import PlannerTask, run_task

    one_thread()
    store = load_models(models)
    loaded = store.resolve(None)
    catalog = planner_catalog(store)  # imports torchrec (its planner's entry), as a worker does at start
    gc.freeze()  # as a planning worker does after start-up: a full collection need not walk torch and the models
    names = [n for n, info in catalog.items() if info.default and info.available]
    groups = _task_groups(SimpleNamespace(planners=catalog), names)

    def plan(body: dict, seed: int) -> dict:
        workload, _ = workload_from_dict(body["workload"])
        topology = topology_from_dict(body["topology"])
        started = time.process_time()
        results = [r for group in groups
                   for r in run_task(PlannerTask(group, workload, topology, loaded.profile, time.monotonic() + 60,
                                                 seed=seed), loaded.model, loaded.communication, loaded.policy)]
        spent = time.process_time() - started
        return {"cpu_ms": spent * 1e3, "profile": loaded.profile,
                "planners": {r.name: [r.seconds * 1e3, max(r.plan.costs) if r.plan else float("nan")]
                             for r in results}}

    return plan


def bodies(args: argparse.Namespace) -> list[tuple[dict, int]]:
    """The load test's ``--fresh`` bodies (warm-up first), each with its seed."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from load_test import Config, request_body

    config = Config(tables=args.tables, devices=args.devices, fresh=True, same_names=args.same_names)
    return [(request_body(config, draw), draw) for draw in range(1, args.warmup + args.requests + 1)]


def spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "mean": statistics.fmean(values),
            "min": min(values), "max": max(values)}


def alone(args: argparse.Namespace) -> dict:
    """This checkout's planners on every body, one after the other."""
    work = bodies(args)
    sys.path.insert(0, str(ROOT))
    plan = planning(ROOT, args.models)
    answers = [plan(body, seed) for body, seed in work][args.warmup:]
    names = list(answers[0]["planners"])
    summary = {
        "profile": answers[0]["profile"], "requests": args.requests, "tables": args.tables, "devices": args.devices,
        "cpu_ms_per_request": spread([a["cpu_ms"] for a in answers]),
        "planner_ms": {n: spread([a["planners"][n][0] for a in answers]) for n in names},
        "predicted_max_ms_mean": {n: statistics.fmean(a["planners"][n][1] for a in answers) for n in names},
    }
    for name, row in summary["planner_ms"].items():
        print(f"{name:>18}: {row['median']:7.2f} ms (mean {row['mean']:6.2f})  [{row['min']:.2f}, {row['max']:.2f}]  "
              f"mean max {summary['predicted_max_ms_mean'][name]:.4f} ms")
    c = summary["cpu_ms_per_request"]
    print(f"{'all (CPU)':>18}: {c['median']:7.2f} ms (mean {c['mean']:6.2f})  [{c['min']:.2f}, {c['max']:.2f}]")
    return summary


def serve(args: argparse.Namespace) -> None:
    """Plan each ``[body, seed]`` line of stdin with ``--checkout``'s code; answer a JSON line each."""
    plan = planning(args.checkout.resolve(), args.models)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        body, seed = json.loads(line)
        print(json.dumps(plan(body, seed)), flush=True)


def interleaved(args: argparse.Namespace) -> dict:
    """Every body planned by this checkout and by ``--base``, in turn (see the module docstring)."""
    work = bodies(args)
    sides = {}
    for side, checkout in (("base", args.base.resolve()), ("this", ROOT)):
        sides[side] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", "--checkout", str(checkout),
             "--models", str(args.models.resolve())], cwd=checkout, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
    for process in sides.values():
        assert json.loads(process.stdout.readline()).get("ready"), "a planning process did not start"

    def ask(side: str, body: dict, seed: int) -> dict:
        sides[side].stdin.write(json.dumps([body, seed]) + "\n")
        sides[side].stdin.flush()
        return json.loads(sides[side].stdout.readline())

    pairs = []
    for k, (body, seed) in enumerate(work):
        order = ("base", "this") if k % 2 == 0 else ("this", "base")
        answer = {side: ask(side, body, seed) for side in order}
        if k >= args.warmup:
            pairs.append(answer)
    for process in sides.values():
        process.stdin.close()
        process.wait()
    names = list(pairs[0]["this"]["planners"])
    summary = {
        "base": str(args.base.resolve()), "requests": args.requests, "tables": args.tables, "devices": args.devices,
        "cpu_ms_per_request": {side: spread([p[side]["cpu_ms"] for p in pairs]) for side in ("base", "this")},
        "ratio_cpu_per_request": spread([p["this"]["cpu_ms"] / p["base"]["cpu_ms"] for p in pairs]),
        "planner_ms": {n: {side: spread([p[side]["planners"][n][0] for p in pairs]) for side in ("base", "this")}
                       for n in names},
        "ratio_planner_ms": {n: spread([p["this"]["planners"][n][0] / p["base"]["planners"][n][0] for p in pairs])
                             for n in names},
        "same_predicted_max": {n: sum(abs(p["this"]["planners"][n][1] / p["base"]["planners"][n][1] - 1) < 1e-6
                                      for p in pairs) for n in names},
        "same_names": args.same_names,
        # a trend over the run (caches that grow with every request served): each quarter's medians
        "by_quarter": [{side: statistics.median(p[side]["cpu_ms"] for p in quarter) for side in ("base", "this")}
                       | {"ratio": statistics.median(p["this"]["cpu_ms"] / p["base"]["cpu_ms"] for p in quarter)}
                       for quarter in (pairs[k * len(pairs) // 4:(k + 1) * len(pairs) // 4] for k in range(4))
                       if quarter],
    }
    for name in names:
        r, b, t = summary["ratio_planner_ms"][name], *(summary["planner_ms"][name][s]["median"] for s in ("base", "this"))
        print(f"{name:>18}: {b:7.2f} -> {t:7.2f} ms   ratio {r['median']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}]   "
              f"same max {summary['same_predicted_max'][name]}/{len(pairs)}")
    r, c = summary["ratio_cpu_per_request"], summary["cpu_ms_per_request"]
    print(f"{'all (CPU)':>18}: {c['base']['median']:7.2f} -> {c['this']['median']:7.2f} ms   "
          f"ratio {r['median']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}]")
    print("by quarter of the run: " + ", ".join(f"{q['base']:.1f} -> {q['this']:.1f} ms ({q['ratio']:.3f})"
                                                for q in summary["by_quarter"]))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--tables", type=int, default=80)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--models", type=Path, default=ROOT / "data" / "models")
    parser.add_argument("--same-names", action="store_true",
                        help="Name every request's tables t0, t1, ... (distinct tables under names seen before).")
    parser.add_argument("--base", type=Path, help="Another checkout to compare with, request by request.")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    summary = interleaved(args) if args.base else alone(args)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
