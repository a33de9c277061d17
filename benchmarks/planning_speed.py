"""Planning time at scale: every default planner (and TorchRec's, under a timeout) on synthetic
workloads of T tables x D devices, on one core, interleaved, with medians and spread.

    python benchmarks/planning_speed.py                                   # 1,000 x 128, every default planner + torchrec
    python benchmarks/planning_speed.py --tables 100,1000,5000 --devices 8,64,128,512 --repeats 3
    python benchmarks/planning_speed.py --tables 80,800,1000 --devices 8,64,128 --column-split --no-torchrec \
        --planners cost_greedy,rl,rl+refine                           # with column splits (the split caps searched)

Each round runs every planner once on every task (A B C ... A B C ...), so machine drift hits
all planners alike. A planner past ``--timeout`` seconds (SIGALRM) is recorded as timed out and
not run again on that task. Tables come from a pool no training drew from; memory is binding
(1.3 x an even share, at least 1.25 x the largest table). Device costs include the all-to-all.
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
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import DEFAULT_MODEL, load_profile_or_exit, one_thread  # noqa: E402
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.task import memory_for  # noqa: E402
from autoshard.core.types import Topology  # noqa: E402
from autoshard.evaluation.compare import compare_planners  # noqa: E402
from autoshard.evaluation.registry import available_planners
from autoshard.planners.context import PlannerContext  # noqa: E402


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default="1000")
    parser.add_argument("--devices", default="128")
    parser.add_argument("--planners", default="default", help="'default' (every default planner) or a list")
    parser.add_argument("--torchrec", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--column-split",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Let every planner split tables column-wise (--no-column-split: none; default: the "
        "product's, the cost-model planners).",
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "planning_speed.json")
    args = parser.parse_args()
    one_thread()
    profile = load_profile_or_exit(args.model)
    context = PlannerContext(profile.model, profile.policy, allow_column_split=args.column_split)
    names = available_planners(context)[0] if args.planners == "default" else args.planners.split(",")
    if args.torchrec:
        names.append("torchrec")
    pool = generate_pool(PoolConfig(size=12_500, seed=7)).all
    tasks = []
    for t in (int(v) for v in args.tables.split(",")):
        workload = sample_task(pool, t, np.random.default_rng(t), name=f"{t}")
        for d in (int(v) for v in args.devices.split(",")):
            tasks.append((workload, Topology(d, memory_for(workload, d, 1.3))))
    times: dict[tuple[str, str], list[float]] = {}
    quality: dict[tuple[str, str], float] = {}
    timed_out: set[tuple[str, str]] = set()
    signal.signal(signal.SIGALRM, _alarm)
    for round_ in range(args.repeats):
        for workload, topology in tasks:
            key_task = f"{len(workload.tables)}x{topology.num_devices}"
            for name in names:
                key = (key_task, name)
                if key in timed_out:
                    continue
                signal.setitimer(signal.ITIMER_REAL, args.timeout)
                started = time.perf_counter()
                try:
                    result = compare_planners(workload, topology, [name], context, profile.communication)
                    seconds = time.perf_counter() - started
                except Timeout:
                    timed_out.add(key)
                    print(f"{key_task} {name}: timed out after {args.timeout:g} s", flush=True)
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if not result.plans:
                    timed_out.add(key)
                    print(f"{key_task} {name}: no plan ({result.skipped[0][1] if result.skipped else '?'})")
                    continue
                times.setdefault(key, []).append(seconds)
                quality[key] = result.plans[0].max_cost_ms
                print(f"round {round_} {key_task} {name}: {seconds:.3f} s, max {quality[key]:.3f} ms", flush=True)
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
    rows += [{"task": task, "planner": name, "timed_out_after_s": args.timeout} for task, name in sorted(timed_out)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": "python " + " ".join(sys.argv),
                "policy": profile.policy.name if profile.policy else None,
                "column_split": context.split_setting,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    _chart(rows, args.out.with_suffix(".png"))
    for r in rows:
        print(json.dumps(r))


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
