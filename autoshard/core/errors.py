"""Typed errors: each names what is wrong and how to fix it, so the CLI and the service never
show a traceback for bad input."""

from __future__ import annotations

from enum import Enum


class AutoShardError(Exception):
    """Base of every error the product raises on purpose."""


class InputError(AutoShardError, ValueError):
    """A user-supplied value is invalid.

    ``where`` locates it (e.g. ``tables[3] 'cat_3'``), ``field`` names the field, ``fix`` says
    what would make it valid.
    """

    def __init__(self, field: str, message: str, fix: str = "", where: str = "") -> None:
        self.field, self.message, self.fix, self.where = field, message, fix, where
        super().__init__(str(self))

    def located(self, where: str) -> InputError:
        """The same error, located inside a larger input (a file, a table)."""
        inner = f"{where} {self.where}".strip() if self.where else where
        return InputError(self.field, self.message, self.fix, inner)

    def __str__(self) -> str:
        head = f"{self.where}: " if self.where else ""
        tail = f" (fix: {self.fix})" if self.fix else ""
        field = "" if self.where.startswith(f"{self.field}[") else f"{self.field}: "  # planners[2] names it already
        return f"{head}{field}{self.message}{tail}"


class PlannerErrorKind(str, Enum):
    """Why planning failed."""

    INSUFFICIENT_MEMORY = "insufficient_memory"
    TABLE_DOES_NOT_FIT = "table_does_not_fit"
    UNAVAILABLE = "unavailable"
    TIME_BUDGET = "time_budget"  # a planner without a best-so-far plan (TorchRec's) ran out of it
    CONSTRAINTS_CONFLICT = "constraints_conflict"  # no plan satisfies the workload's constraints


class PlannerError(AutoShardError):
    """Planning failed; ``fixes`` is a numbered list of things that would make it succeed."""

    def __init__(self, kind: PlannerErrorKind, message: str, fixes: tuple[str, ...] = ()) -> None:
        self.kind, self.message, self.fixes = kind, message, fixes
        super().__init__(str(self))

    def __reduce__(self):  # pickled whole across processes (its arguments are not ``args``)
        return (type(self), (self.kind, self.message, self.fixes))

    def __str__(self) -> str:
        lines = [f"{self.kind.value}: {self.message}"]
        lines += [f"  {i}. {fix}" for i, fix in enumerate(self.fixes, 1)]
        return "\n".join(lines)


class ModelError(AutoShardError):
    """A model checkpoint is missing, corrupt, or from another device profile or version."""


class MeasurementError(AutoShardError):
    """A measurement run failed: a rank exited with an error or ran past its time limit. The
    message holds the failed launch's log tail."""
