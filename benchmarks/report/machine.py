"""The machine, the versions and the checkout the page records."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from benchmarks.report.settings import ROOT


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo, else lscpu, else the platform module."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` that is installed (packages go by several names)."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def git(*args: str) -> str:
    """``git ARGS`` in the repository, its output stripped; empty where git is missing."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def environment() -> dict:
    """The machine, the versions and the checkout, as the page records them."""
    changed = [line for line in git("status", "--porcelain", "--untracked-files=no").splitlines() if line]
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "loadavg_start": os.getloadavg(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "torchrec": package_version("torchrec"),
        "fbgemm_gpu": package_version("fbgemm-gpu-cpu", "fbgemm_gpu_cpu", "fbgemm-gpu", "fbgemm_gpu"),
        "commit": git("rev-parse", "--short=12", "HEAD") or "unknown",
        "commit_subject": git("log", "-1", "--format=%s"),
        "uncommitted_files": len(changed),
        "platform": platform.platform(),
    }
