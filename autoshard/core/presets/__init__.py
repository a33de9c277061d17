"""Bundled public workloads, each citing its source in its file's ``source`` field."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from autoshard.core.errors import InputError
from autoshard.core.types import Topology, Workload
from autoshard.core.workload_file import load_workload

PRESETS = ("criteo_terabyte", "criteo_terabyte_fp16_rowwise", "criteo_terabyte_uncapped", "criteo_kaggle")


def load_preset(name: str) -> tuple[Workload, Topology | None]:
    """A bundled workload by name (see ``PRESETS``)."""
    if name not in PRESETS:
        raise InputError(
            "workload", f"no bundled workload named {name!r}", f"use a file path or one of {', '.join(PRESETS)}"
        )
    with resources.as_file(resources.files(__name__) / f"{name}.json") as path:
        return load_workload(path)


def load_workload_or_preset(ref: str) -> tuple[Workload, Topology | None]:
    """A workload file path, or the name of a bundled workload."""
    if ref in PRESETS:
        return load_preset(ref)
    if not Path(ref).exists():
        raise InputError(
            "workload",
            f"no workload file or bundled workload {ref!r}",
            f"check the path, or use one of {', '.join(PRESETS)}",
        )
    return load_workload(ref)
