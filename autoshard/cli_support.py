"""Shared CLI plumbing: clean errors instead of tracebacks, JSON output, allocator settings."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console

from autoshard.errors import AutoShardError
from autoshard.communication import CommunicationModel
from autoshard.types import CostModel

console = Console(stderr=True)
# The shipped cost model: data/models/default points at the folder of the default device profile.
DEFAULT_MODEL = Path(os.environ.get("AUTOSHARD_MODEL", Path(__file__).resolve().parents[1] / "data" / "models" / "default"))
F = TypeVar("F", bound=Callable[..., Any])



def friendly_errors(fn: F) -> F:
    """Turn the product's own errors (and OS errors) into a red message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (AutoShardError, OSError) as error:
            console.print(f"[red]error:[/red] {error}", markup=True, highlight=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/yellow]: progress so far is saved; rerun the same "
                          "command to resume")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=1) + "\n")


def ensure_malloc_settings() -> None:
    """Re-exec this command with the allocator settings that make CPU timings stable.

    glibc's default allocator returns freed memory to the OS, so every embedding step pays page
    faults again (costs 2-5x inflated, 20-50% noise); these settings must be set before Python
    starts. AUTOSHARD_NO_REEXEC=1 turns this off.
    """
    from cost_model.profile import MALLOC_SETTINGS, malloc_settings_active

    if os.environ.get("AUTOSHARD_NO_REEXEC") or malloc_settings_active():
        return
    os.environ.update(MALLOC_SETTINGS)
    os.execv(sys.executable, [sys.executable, *sys.argv])


def load_cost_model_or_none(path: Path | None) -> tuple[CostModel | None, str | None]:
    """(the cost model, None), or (None, why there is none) when no model is there.

    A model that is there but unreadable raises ``ModelError``: that is an error, not an absence.
    """
    path = path if path is not None else DEFAULT_MODEL
    if not path.exists():
        return None, f"no cost model at {path}"
    try:
        from cost_model.checkpoint import load_cost_model
    except ImportError as error:
        return None, f"cannot load cost models ({error})"
    return load_cost_model(path), None


def load_communication(model_dir: Path | None) -> CommunicationModel | None:
    """The all-to-all model measured next to a cost model (``communication.json``), if any."""
    from autoshard.communication import COMMUNICATION_FILE

    folder = model_dir if model_dir is not None else DEFAULT_MODEL
    path = (folder if folder.is_dir() else folder.parent) / COMMUNICATION_FILE
    return CommunicationModel.load(path) if path.exists() else None
