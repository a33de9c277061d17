"""The command line: run the chosen stages (or none), record the run in ``meta.json``, render the page."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import benchmarks.report
from benchmarks.report.cost_accuracy import stage_cost_accuracy
from benchmarks.report.judges import stage_judges
from benchmarks.report.machine import environment
from benchmarks.report.plan_devices import stage_plan_devices
from benchmarks.report.plan_quality import stage_plan_quality
from benchmarks.report.planning_time import stage_planning_time
from benchmarks.report.render import render
from benchmarks.report.replan import stage_replan
from benchmarks.report.running import Run, load
from benchmarks.report.service import stage_service
from benchmarks.report.settings import FULL, QUICK, ROOT, Settings

STAGES: dict[str, Callable[[Run], None]] = {
    "plan_quality": stage_plan_quality,
    "judges": stage_judges,
    "planning_time": stage_planning_time,
    "cost_accuracy": stage_cost_accuracy,
    "service": stage_service,
    "replan": stage_replan,
    "plan_devices": stage_plan_devices,
}
"""Each stage by name, in the order they run; each writes its outputs to the work folder."""


def parser() -> argparse.ArgumentParser:
    """The report's flags."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
        description=benchmarks.report.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="The quick mode: <= 15 minutes on 2 cores.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--images", type=Path, help="Folder of the PNGs (default: images/ beside --out).")
    parser.add_argument("--work", type=Path, help="Folder of the outputs (default: runs/benchmarks/<mode>).")
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--stages", help=f"Run only these (comma-separated, of {', '.join(STAGES)}).")
    parser.add_argument(
        "--render-only", action="store_true", help="Run nothing: render the page from the work folder's outputs."
    )
    return parser


def main(argv: list[str] | None = None, settings: Settings | None = None) -> int:
    """Run the report; 1 when any stage failed (its section then says so), else 0."""
    cli = parser()
    args = cli.parse_args(argv)
    settings = settings or (QUICK if args.quick else FULL)
    shown = ["python -m benchmarks.report", *(argv if argv is not None else sys.argv[1:])]
    work = args.work or ROOT / "runs" / "benchmarks" / settings.mode
    out = args.out.resolve()
    run = Run(
        settings,
        work.resolve(),
        out,
        (args.images or out.parent / "images").resolve(),
        args.model if args.model.is_absolute() else (Path.cwd() / args.model),
        " ".join(a for a in shown if a != "--render-only"),
    )
    run.work.mkdir(parents=True, exist_ok=True)
    chosen = list(STAGES) if not args.stages else args.stages.split(",")
    unknown = [c for c in chosen if c not in STAGES]
    if unknown:
        cli.error(f"unknown stages {unknown}: choose from {', '.join(STAGES)}")
    if args.render_only:
        meta = load(run.work / "meta.json")
        if meta is None:
            cli.error(f"--render-only: no earlier run in {run.work}")
        run.stages.update(meta["stages"])
    else:
        meta = run_stages(run, chosen, bool(args.stages))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(run, meta))
    print(f"wrote {out} and its figures in {run.images} ({meta['seconds'] / 60:.1f} min)", flush=True)
    return 1 if any(entry["rc"] for entry in run.stages.values()) else 0


def run_stages(run: Run, chosen: list[str], some: bool) -> dict:
    """Run the ``chosen`` stages and write the run's record (``meta.json``); with ``some``, the
    other stages' records come from the earlier run in the work folder."""
    meta_file = run.work / "meta.json"
    started = time.perf_counter()
    earlier = load(meta_file) if some else None
    meta: dict[str, Any] = {
        "command": run.command,
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "settings": asdict(run.settings),
        "environment": environment(),
        "reused": sorted(set(earlier["stages"]) - set(chosen)) if earlier else [],
    }
    if earlier:
        run.stages.update({k: v for k, v in earlier["stages"].items() if k not in chosen})
    for name in chosen:
        run.stages.pop(name, None)
        STAGES[name](run)
    meta["seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = os.getloadavg()
    meta["stages"] = {name: run.stages[name] for name in STAGES if name in run.stages}
    meta_file.write_text(json.dumps(meta, indent=1) + "\n")
    return meta
