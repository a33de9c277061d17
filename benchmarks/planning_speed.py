"""Planning time at scale: every default planner (and TorchRec's, under a timeout) on synthetic
workloads of T tables x D devices, on one core, interleaved, with medians and spread (after an
untimed warm-up of each planner on 10 tables).

    python benchmarks/planning_speed.py               # 1,000 x 128 (16 hosts x 8), every default planner + torchrec
    python benchmarks/planning_speed.py --tables 100,1000,5000 --devices 8,64,128,512 --repeats 3
    python benchmarks/planning_speed.py --tasks 50x16,1000x16,200x4,200x64 --repeats 1   # chosen T x D pairs
    python benchmarks/planning_speed.py --quick                  # the report's quick sweep (a minute or two)
    python benchmarks/planning_speed.py --tables 80,800,1000 --devices 8,64,128 --column-split --no-torchrec \
        --planners cost_greedy,rl,rl+refine                           # with column splits (the split caps searched)

Each round runs every planner once on every task (A B C ... A B C ...), so machine drift hits
all planners alike. A planner past ``--timeout`` seconds (SIGALRM) is recorded as timed out and
not run again on that task, nor on a task with as many tables and devices or more (recorded as
timed out there too: it would take longer). Tables come from a pool no training drew from; memory is binding
(1.3 x an even share, at least 1.25 x the largest table). Devices sit on hosts of ``--devices-per-host``
(default 8; a device count it does not divide is one host), and every sharding type is allowed. Device
costs include the communication, per link tier.
Writes ``--out`` (JSON) and a log-log PNG next to it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.task import memory_for  # noqa: E402
from autoshard.core.types import Topology  # noqa: E402
from autoshard.planners.context import PlannerContext  # noqa: E402
from autoshard.planning.compare import compare_planners  # noqa: E402
from autoshard.planning.registry import available_planners  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.process import one_thread  # noqa: E402

QUICK_TASKS = "50x128,200x128,1000x128,200x8,200x32"
"""The quick sweep: tables at 128 devices (up to the 1 s target's 1,000 x 128), devices at 200 tables."""

TARGET = {"tables": 1000, "devices": 128, "devices_per_host": 8, "seconds": 2.0}
"""Every default planner plans 1,000 tables on 16 x 8 devices, every sharding type allowed, in at
most 2 s on one core."""


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def cluster(devices: int, per_host: int, memory_gb: float) -> Topology:
    """``devices`` on hosts of ``per_host`` (one host where it does not divide them)."""
    if per_host < devices and devices % per_host == 0:
        return Topology.cluster(devices // per_host, per_host, memory_gb)
    return Topology(devices, memory_gb)


def parse_tasks(tables: str, devices: str, pairs: str | None) -> list[tuple[int, int]]:
    """``TxD`` pairs (``pairs``, comma-separated) or else every table count with every device
    count; in order of size (tables x devices), each once."""
    if pairs:
        found = []
        for item in pairs.split(","):
            t, _, d = item.strip().partition("x")
            if not (t.isdigit() and d.isdigit()):
                raise ValueError(f"--tasks wants TABLESxDEVICES pairs, got {item!r}")
            found.append((int(t), int(d)))
    else:
        found = [(int(t), int(d)) for t in tables.split(",") for d in devices.split(",")]
    return sorted(set(found), key=lambda td: (td[0] * td[1], td))


def summarise(times: dict, quality: dict, timed_out: dict) -> list[dict]:
    """Rows: each (task, planner) timed, its median and quartiles; then those timed out."""
    rows = []
    for (task, name), values in sorted(times.items()):
        q = np.percentile(values, [25, 50, 75])
        rows.append(
            {
                "task": task,
                "planner": name,
                "median_s": float(q[1]),
                "iqr_s": [float(q[0]), float(q[2])],
                "runs": len(values),
                "max_cost_ms": quality[(task, name)],
            }
        )
    rows += [
        {"task": task, "planner": name, "timed_out_after_s": seconds, "why": why}
        for (task, name), (seconds, why) in sorted(timed_out.items())
    ]
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default="1000")
    parser.add_argument("--devices", default="128")
    parser.add_argument("--tasks", help="TxD pairs, comma-separated (instead of --tables x --devices)")
    parser.add_argument("--quick", action="store_true", help=f"--tasks {QUICK_TASKS} --repeats 1 --timeout 20")
    parser.add_argument("--planners", default="default", help="'default' (every default planner) or a list")
    parser.add_argument("--torchrec", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 3; --quick: 1)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds (default 120; --quick: 20)")
    parser.add_argument(
        "--column-split",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Let every planner split tables column-wise (--no-column-split: none; default: the "
        "product's, the cost-model planners).",
    )
    parser.add_argument("--devices-per-host", type=int, default=8, help="devices per host (default 8)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "benchmarks" / "planning_speed.json")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    timeout = args.timeout if args.timeout is not None else (20.0 if args.quick else 120.0)
    pairs = args.tasks or (QUICK_TASKS if args.quick else None)
    one_thread()
    profile = load_profile_or_exit(args.model)
    context = PlannerContext(profile.model, profile.policy, allow_column_split=args.column_split)
    names = available_planners(context)[0] if args.planners == "default" else args.planners.split(",")
    if args.torchrec and "torchrec" not in names:
        names.append("torchrec")
    pool = generate_pool(PoolConfig(size=12_500, seed=7)).all
    tasks = []
    for t, d in parse_tasks(args.tables, args.devices, pairs):
        workload = sample_task(pool, t, np.random.default_rng(t), name=f"{t}")
        tasks.append((workload, cluster(d, args.devices_per_host, memory_for(workload, d, 1.3))))
    # a warm-up, untimed: each planner's first call pays its imports (TorchRec's take seconds)
    warm = sample_task(pool, 10, np.random.default_rng(0), name="warm-up")
    for name in names:
        compare_planners(warm, Topology(2, memory_for(warm, 2, 1.3)), [name], context, profile.communication)
    times: dict[tuple[str, str], list[float]] = {}
    quality: dict[tuple[str, str], float] = {}
    timed_out: dict[tuple[str, str], tuple[float, str]] = {}  # (task, planner) -> (seconds, why)
    signal.signal(signal.SIGALRM, _alarm)
    for round_ in range(repeats):
        for workload, topology in tasks:
            t, d = len(workload.tables), topology.num_devices
            key_task = f"{t}x{d}"
            for name in names:
                key = (key_task, name)
                if key in timed_out:
                    continue
                smaller = [
                    task
                    for (task, planner), (_, why) in timed_out.items()
                    if planner == name and why == "timed out" and _at_most(task, t, d)
                ]
                if smaller:
                    timed_out[key] = (timeout, f"not run: timed out on {smaller[0]}")
                    print(f"{key_task} {name}: not run (timed out on {smaller[0]})", flush=True)
                    continue
                signal.setitimer(signal.ITIMER_REAL, timeout)
                started = time.perf_counter()
                try:
                    result = compare_planners(workload, topology, [name], context, profile.communication)
                    seconds = time.perf_counter() - started
                except Timeout:
                    timed_out[key] = (timeout, "timed out")
                    print(f"{key_task} {name}: timed out after {timeout:g} s", flush=True)
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if not result.plans:
                    why = result.skipped[0][1] if result.skipped else "?"
                    timed_out[key] = (timeout, f"no plan: {why}")
                    print(f"{key_task} {name}: no plan ({why})")
                    continue
                times.setdefault(key, []).append(seconds)
                quality[key] = result.plans[0].max_cost_ms
                print(f"round {round_} {key_task} {name}: {seconds:.3f} s, max {quality[key]:.3f} ms", flush=True)
    rows = summarise(times, quality, timed_out)
    report = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "policy": profile.policy.name if profile.policy else None,
        "model": str(args.model),
        "column_split": context.split_setting,
        "planners": names,
        "repeats": repeats,
        "timeout_s": timeout,
        "target": TARGET,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    _chart(rows, args.out.with_suffix(".png"))
    for r in rows:
        print(json.dumps(r))
    return report


def _at_most(task: str, tables: int, devices: int) -> bool:
    """Whether ``task`` (``TxD``) has at most ``tables`` tables and ``devices`` devices."""
    t, d = (int(v) for v in task.split("x"))
    return t <= tables and d <= devices


def _chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in sorted({r["planner"] for r in rows if "median_s" in r}):
        points = sorted(
            (int(r["task"].split("x")[0]) * int(r["task"].split("x")[1]), r["median_s"])
            for r in rows
            if r["planner"] == name and "median_s" in r
        )
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("tables x devices"), ax.set_ylabel("plan time (s), median")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
