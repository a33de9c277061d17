"""Running one benchmark as a subprocess and recording it; reading what it wrote."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.report.settings import MALLOC, ROOT, Settings


@dataclass(frozen=True)
class Run:
    """Where a run writes, and what it records of itself."""

    settings: Settings
    work: Path
    out: Path
    images: Path
    model: Path
    command: str
    stages: dict[str, dict] = field(default_factory=dict)  # name -> {command, seconds, rc, log}

    def stage_file(self, name: str) -> Path:
        """The JSON a stage writes (or its command prints) in the work folder."""
        return self.work / f"{name}.json"


def run_command(run: Run, name: str, argv: Sequence[str], stdout_file: Path | None = None) -> bool:
    """``argv`` in the repository's root with the allocator settings, its output to the work
    folder's ``name.log`` (stdout to ``stdout_file`` if given); records the command, its wall
    time and exit code under ``name``. True when it exited 0."""
    log = run.work / f"{name}.log"
    env = {**os.environ, **MALLOC, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    print(f"[{name}] {shlex.join(argv)}", flush=True)
    started = time.perf_counter()
    with open(log, "w") as err:
        out = open(stdout_file, "w") if stdout_file else err
        try:
            done = subprocess.run(list(argv), cwd=ROOT, env=env, stdout=out, stderr=err)
        finally:
            if stdout_file:
                out.close()
    seconds = time.perf_counter() - started
    shown = ["python" if a == sys.executable else a.replace(f"{ROOT}{os.sep}", "") for a in argv]
    entry = run.stages.setdefault(name, {"commands": [], "seconds": 0.0, "rc": 0})
    entry["commands"].append(shlex.join(shown))
    entry["seconds"] += seconds
    entry["rc"] = entry["rc"] or done.returncode
    entry["log"] = str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log)
    print(f"[{name}] exit {done.returncode} after {seconds:.0f} s", flush=True)
    if done.returncode != 0:
        entry["error"] = log.read_text()[-1500:]
    return done.returncode == 0


def autoshard_argv(*args: str) -> list[str]:
    """The CLI in this interpreter: ``python -m autoshard ARGS``."""
    return [sys.executable, "-m", "autoshard", *args]


def load(path: Path) -> dict | None:
    """A stage's JSON, or None where it is missing or unreadable (the section then says so)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
