"""Shared CLI plumbing: clean errors instead of tracebacks, JSON output, allocator settings."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import typer
from rich.console import Console

from autoshard.errors import AutoShardError

if TYPE_CHECKING:
    from service.models import LoadedModel

console = Console(stderr=True)
# The shipped cost model: data/models/default points at the folder of the default device profile.
DEFAULT_MODEL = Path(os.environ.get("AUTOSHARD_MODEL", Path(__file__).resolve().parents[2] / "data" / "models" / "default"))
F = TypeVar("F", bound=Callable[..., Any])
SEARCH_ITERATIONS_HELP = ("rl+refine: iterations of ruin and recreate after its rollouts (0: off; measured, its "
                          "predicted gains did not hold: docs/rl.md).")



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


def load_profile_or_none(path: Path | None) -> tuple[LoadedModel | None, str | None]:
    """(the profile's artifacts, None), or (None, why there are none) when no model is there.
    ``path``: a profile folder (or its cost_model.pt), default the shipped profile. Artifacts
    load through the store the service uses (``service.models.load_profile``).

    A model that is there but unreadable raises ``ModelError``: that is an error, not an absence.
    """
    from autoshard.errors import ModelError

    path = path if path is not None else DEFAULT_MODEL
    if not path.exists():
        return None, f"no cost model at {path}"
    try:
        from service.models import load_profile
    except ImportError as error:
        return None, f"cannot load cost models ({error})"
    problems: list[str] = []
    loaded = load_profile(path if path.is_dir() else path.parent, problems)
    if loaded is None:
        raise ModelError("; ".join(problems))
    return loaded, None


def one_thread() -> None:
    """Plan on one core: torch's and BLAS's thread pools would otherwise spin a thread per core
    on tiny matrices (planning is many small calls), several times slower on a shared machine."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
