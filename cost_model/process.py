"""Settings of the process that measures or plans: the allocator settings CPU timings need, and
one thread for torch and BLAS.

The CLI, the benchmarks and the lab's scripts set a process up here, so that every measurement is
taken one way (docs/profiles.md, "Measurement settings").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

NO_REEXEC = "AUTOSHARD_NO_REEXEC"  # set to 1: never re-execute a command for the allocator settings


def _stderr(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


def ensure_malloc_settings(warn: Callable[[str], None] = _stderr) -> None:
    """Re-exec this command with the allocator settings that make CPU timings stable.

    glibc's default allocator returns freed memory to the OS, so every embedding step pays page
    faults again (costs 2-5x inflated, 20-50% noise); these settings must be set before Python
    starts. AUTOSHARD_NO_REEXEC=1 turns this off. Only the ``autoshard`` command itself is
    re-executed: a process that runs the CLI's app in its own (a test runner, a notebook) is
    warned (``warn``) instead, since re-executing it would start it over (it did: pytest ran the
    suite again from the first test, its output lost to the capture of the test that re-executed it).
    """
    from cost_model import profile  # torch: loaded only by a command that measures

    if os.environ.get(NO_REEXEC) or profile.malloc_settings_active():
        return
    if not is_autoshard_command(sys.argv):
        warn(
            "the allocator settings are off in this process, so CPU timings are noisier; start it with "
            + " ".join(f"{k}={v}" for k, v in profile.MALLOC_SETTINGS.items())
        )
        return
    os.environ.update(profile.MALLOC_SETTINGS)
    os.execv(sys.executable, [sys.executable, *sys.argv])


def is_autoshard_command(argv: Sequence[str]) -> bool:
    """Whether this process is the ``autoshard`` console command or ``python -m autoshard``."""
    if not argv:
        return False
    path = Path(argv[0])
    return path.name == "autoshard" or path.parts[-2:] == ("autoshard", "__main__.py")


def one_thread() -> None:
    """Plan on one core: torch's and BLAS's thread pools would otherwise spin a thread per core
    on tiny matrices (planning is many small calls), several times slower on a shared machine."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
