"""Re-planning a deployed plan, measured: for workloads that change (tables added and removed), the
plan kept as it is, ``autoshard replan`` with a budget of moves, and cost_greedy from scratch,
each predicted and measured on this machine (interleaved rounds), with the shards each moves.

    python benchmarks/replan_measured.py --model data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 \\
        --rounds 6 --max-moves 2,4,8 --out runs/benchmarks/replan/
    python benchmarks/replan_measured.py --rounds 0 --out runs/benchmarks/replan/   # predicted only (seconds)

Each scenario plans the workload as it was with ``autoshard plan --planner cost_greedy
--sharding-types table_wise,column_wise --format torchrec`` (the plan deployed today, of the shards
a re-plan keeps), changes it, then runs ``autoshard replan --measure`` on the
changed one (``--rounds 0``: predicted only, no measurement). The scenarios: Criteo Terabyte
losing two tables and gaining six; 80 tables of the synthetic pool gaining 20 more; and losing 20
(``--scenarios`` picks some). Measuring needs the allocator settings of docs/traces.md (``autoshard``
re-executes itself with them). Writes ``--out``/summary.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.presets import load_workload_or_preset  # noqa: E402
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.types import Table, Workload  # noqa: E402
from autoshard.core.workload_file import save_workload  # noqa: E402
from autoshard.profiles import DEFAULT_MODEL  # noqa: E402

NEW_TERABYTE = ((2_000_000, 5.0), (500_000, 20.0), (8_000_000, 1.0), (100_000, 40.0), (3_000_000, 10.0), (40_000, 3.0))
"""Six new dim-128 tables for Criteo Terabyte: (rows, lookups a sample)."""


def scenarios() -> dict[str, tuple[Workload, Workload, int, float]]:
    """name -> (the workload as planned, as it is now, devices, GiB a device)."""
    terabyte, _ = load_workload_or_preset("criteo_terabyte")
    grown = tuple(t for t in terabyte.tables if t.name not in ("cat_20", "cat_21")) + tuple(
        Table(f"new_{i}", rows, 128, pooling) for i, (rows, pooling) in enumerate(NEW_TERABYTE)
    )
    pool = generate_pool(PoolConfig(size=500, seed=0, max_log10_rows=7.0)).train
    hundred = sample_task(pool, 100, np.random.default_rng(20261205), name="pool100")
    first80 = replace(hundred, tables=hundred.tables[:80], name="pool80")
    return {
        "terabyte_minus2_plus6": (terabyte, replace(terabyte, tables=grown, name="terabyte_v2"), 8, 24.0),
        "pool80_plus20": (first80, replace(hundred, name="pool80_plus20"), 8, 16.0),
        "pool100_minus20": (hundred, replace(hundred, tables=hundred.tables[20:], name="pool100_minus20"), 8, 16.0),
    }


def autoshard(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "autoshard", *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"autoshard {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def summary_row(row: dict) -> dict:
    """One plan of a ``replan --json`` report: predicted max and what it moves, and, measured,
    its max, its ratio to the kept plan's with the 95% interval and the verdict (else None)."""
    measured = row.get("measured") or {}
    return {k: row.get(k) for k in ("plan", "max_cost_ms", "expected_max_ms", "shards_moved", "bytes_moved")} | {
        "measured_max_ms": measured.get("max_ms"),
        "measured_vs_keep": measured.get("vs_keep"),
        "ci95": measured.get("ci95"),
        "verdict": measured.get("verdict"),
    }


def describe(name: str, row: dict) -> str:
    text = f"{name:>22} {row['plan']:>22}: predicted {row['max_cost_ms']:7.3f} ms"
    if row["measured_max_ms"] is not None:
        text += (
            f", measured {row['measured_max_ms']:7.3f} ms ({row['measured_vs_keep']:.3f} [{row['ci95'][0]:.3f}, "
            f"{row['ci95'][1]:.3f}] of keep, {row['verdict']})"
        )
    return text + f", moved {row['shards_moved']} shards, {row['bytes_moved'] / 2**30:.3g} GiB"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=6, help="measurement rounds (0: predicted only)")
    parser.add_argument("--max-moves", default="2,4,8", help="budgets, comma-separated")
    parser.add_argument("--scenarios", help=f"comma-separated, of: {', '.join(scenarios())} (default: all)")
    parser.add_argument("--out", type=Path, required=True, help="a folder: workloads, exports and reports")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    every = scenarios()
    chosen = args.scenarios.split(",") if args.scenarios else list(every)
    unknown = [c for c in chosen if c not in every]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {list(every)}")
    summary = {}
    for name in chosen:
        before, after, devices, memory_gb = every[name]
        was, now, current = (args.out / f"{name}_{part}.json" for part in ("before", "after", "current_plan"))
        save_workload(was, before)
        save_workload(now, after)
        autoshard(
            "plan",
            str(was),
            "--devices",
            str(devices),
            "--memory-gb",
            str(memory_gb),
            "--planner",
            "cost_greedy",
            "--sharding-types",
            "table_wise,column_wise",  # the shards a re-plan keeps (it refuses row-wise and replicated tables)
            "--model",
            str(args.model.resolve()),
            "--format",
            "torchrec",
            "--out",
            str(current),
        )
        report = json.loads(
            autoshard(
                "replan",
                str(now),
                "--from",
                str(current),
                "--memory-gb",
                str(memory_gb),
                "--max-moves",
                args.max_moves,
                *(("--measure", str(args.rounds)) if args.rounds else ()),
                "--model",
                str(args.model.resolve()),
                "--json",
            )
        )
        (args.out / f"{name}_replan.json").write_text(json.dumps(report, indent=1) + "\n")
        summary[name] = {
            "tables_before": len(before.tables),
            "tables_after": len(after.tables),
            "devices": devices,
            "device_memory_gb": memory_gb,
            "plans": [summary_row(row) for row in report["plans"]],
        }
        for row in summary[name]["plans"]:
            print(describe(name, row), flush=True)
    result = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "model": str(args.model),
        "rounds": args.rounds,
        "max_moves": [int(v) for v in args.max_moves.split(",")],
        "scenarios": summary,
    }
    (args.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
