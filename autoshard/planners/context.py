"""What a planner may need, passed in as one typed object instead of loose arguments."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from autoshard.core.costing import bound_to_task, is_exact
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, Topology, Workload
from autoshard.planners.heuristics import SpreadRule
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planners.task_cache import TaskCache

DEPARTURE_MARGIN = 0.10
"""rl+refine returns a plan other than cost_greedy's only when it is predicted this much lower
(relative): a search that keeps the lowest of many predictions finds where the model under-prices
first, so smaller predicted gains are within the model's error. With column splits, the same
margin decides whether a plan with split tables replaces the plan without
(``split_cap_choice.chosen_over_split``). Chosen by measurement: docs/decisions.md, 16 and 20."""


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
    proxy sums, and the planners that need one are unavailable. ``time_budget_s``: searching
    planners return their best plan so far once it is spent (``None``: no budget).
    ``departure_margin``: how much lower than cost_greedy's plan rl+refine's must be predicted to
    be returned instead, and a plan with column splits than the plan without (``None``:
    ``DEPARTURE_MARGIN``; 0: the lowest prediction wins).
    ``allow_column_split``: which planners may split tables column-wise (``splits``).
    ``cache``: what the planners of one task compute alike, done once (``TaskCache``): the
    caller that plans a task owns it (``for_task``; ``compare_planners`` and the service make one
    per task); without one, each planner makes its own.
    ``sharding_types``: the sharding types planners may choose (TorchRec's names; default all
    of them). Column-wise splits also need ``splits``. ``replicate_tiny``: the heuristics place
    tiny tables data parallel (the planners that price options decide that by the cost model)."""

    cost_model: CostModel | None = None
    policy: object | None = None  # an ``autoshard.rl.policy.OptionPolicy``: planners do not look inside
    seed: int = 0
    allow_column_split: bool | None = None
    time_budget_s: float | None = None
    departure_margin: float | None = None
    cache: TaskCache | None = field(default=None, compare=False, repr=False)
    sharding_types: frozenset[ShardingType] = ALL_TYPES
    replicate_tiny: bool = False

    @property
    def spread_rule(self) -> SpreadRule:
        """The heuristics' rule for tables they do not place whole."""
        return SpreadRule(self.sharding_types, self.replicate_tiny)

    def for_task(self, workload: Workload, topology: Topology) -> PlannerContext:
        """This context with the cache of ``workload`` on ``topology``: its own, if it is that
        task's; else a new one, which the planners it makes for the task then share. A cost
        model that prices per task (TorchRec's estimator) is bound to it (``bound_to_task``)."""
        cache = TaskCache.for_task(self.cache, workload, topology)
        model = bound_to_task(self.cost_model, workload, topology)
        if cache is self.cache and model is self.cost_model:
            return self
        return replace(self, cache=cache, cost_model=model)

    def splits(self, kind: PlannerKind) -> bool:
        """Whether a planner of ``kind`` may split tables column-wise. ``allow_column_split``
        True: every planner (the heuristics split a table whose proxy exceeds the average device
        load); False: none; ``None``, the default: the planners that choose with a cost model
        (cost_greedy, rl and rl+refine, which keep a split plan only where it is predicted more
        than the departure margin below the plan without; TorchRec's planner, by its own), while
        the heuristics place whole tables, as the classic baselines do: they have no model to keep
        them from splitting badly (docs/decisions.md, 20 and 21)."""
        if ShardingType.COLUMN_WISE not in self.sharding_types:
            return False
        if self.allow_column_split is None:
            return kind is not PlannerKind.HEURISTIC
        return self.allow_column_split

    @property
    def split_setting(self) -> bool | str:
        """``allow_column_split`` as reports record it: True, False, or "auto" (``None``'s rule)."""
        return "auto" if self.allow_column_split is None else self.allow_column_split

    @property
    def any_splits(self) -> bool:
        """Whether some planner may split tables (``splits``)."""
        return self.allow_column_split is not False

    @property
    def margin(self) -> float:
        """The departure margin: the one asked for, else ``DEPARTURE_MARGIN`` (0 for an exact
        cost model, ``is_exact``: no model error to guard against)."""
        if self.departure_margin is None:
            return 0.0 if is_exact(self.cost_model) else DEPARTURE_MARGIN
        return self.departure_margin
