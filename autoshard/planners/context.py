"""What a planner may need, passed in as one typed object instead of loose arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from autoshard.types import CostModel

if TYPE_CHECKING:
    from autoshard.planners.shared import SharedWork
    from autoshard.rl.policy import DevicePolicy


class PlannerKind(str, Enum):
    """What a planner stands on; it decides what it needs and where it is listed."""

    HEURISTIC = "heuristic"  # proxies only
    COST_MODEL = "cost_model"  # the trained cost model
    POLICY = "policy"  # the trained policy, scored by the cost model
    REFERENCE = "reference"  # TorchRec's planner: runs when asked, as a point of comparison


@dataclass(frozen=True)
class PlannerContext:
    """Everything planners may use. ``cost_model`` scores every plan (with the all-to-all when
    the caller wrapped it so); ``None`` means no trained model: heuristics then report their own
    proxy sums, and the planners that need one are unavailable. ``time_budget_s``: searching planners return
    their best plan so far once it is spent (``None``: no budget). ``search_iterations``: rl+refine's
    ruin-and-recreate iterations (0, the default: off; measured, its plans were no better,
    docs/rl.md). ``shared``: placements the planners of one task compute alike, done once
    (``autoshard.planners.shared``; ``compare_planners`` makes one per task)."""

    cost_model: CostModel | None = None
    policy: DevicePolicy | None = None
    seed: int = 0
    allow_column_split: bool = False
    time_budget_s: float | None = None
    search_iterations: int = 0
    shared: SharedWork | None = field(default=None, compare=False, repr=False)
