"""A searching planner's time budget."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(slots=True)
class Deadline:
    """A searching planner's time budget: ``expired`` once ``budget_s`` has passed since
    ``started`` (never, without a budget); ``hit`` records that the search was cut short."""

    started: float
    budget_s: float | None = None
    hit: bool = False

    @property
    def expired(self) -> bool:
        if self.budget_s is not None and time.perf_counter() - self.started > self.budget_s:
            self.hit = True
        return self.hit
