"""rl+refine's promise, kept where memory fitting plans each planner apart.

``RLPlanner`` (``rl+refine``) returns cost_greedy's plan where its own is not lower, but it
compares the two on one topology. Where a cost model counts its own memory (TorchRec's
estimator: ``planning.memory_fit``, ``planning.kernels``), each planner is planned again on
shrunk memory or other kernels, each pass after its own last plan, so the two end on different
passes and rl+refine's fitted plan can come out above cost_greedy's (grid80x2x8-giant: 1.001x).
``NoWorseThan`` compares the fitted plans themselves, so rl+refine's search is fitted alone, raw:
its own comparison on each pass would plan cost_greedy again for nothing (criteo_tb_2x8: 7
cost_greedy plans for the two planners, now 4).
"""

from __future__ import annotations

import time
from dataclasses import replace

from autoshard.core.errors import PlannerError
from autoshard.core.types import Planner, ShardingPlan, Topology, Workload


class NoWorseThan:
    """``planner``'s plan where it is more than ``margin`` below ``reference``'s (or the
    reference finds none), else the reference's plan under ``planner``'s name; both fitted."""

    def __init__(self, planner: Planner, reference: Planner, margin: float) -> None:
        self.planner, self.reference, self.margin = planner, reference, margin

    @property
    def name(self) -> str:
        return self.planner.name

    def __getattr__(self, name: str) -> object:  # the planner's own settings (time_budget_s, ...)
        if name in ("planner", "reference", "margin"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.planner, name)

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        own = self.planner.plan(workload, topology)
        try:
            reference = self.reference.plan(workload, topology)
        except PlannerError:
            return own
        took = time.perf_counter() - started
        if own.max_cost_ms < (1 - self.margin) * reference.max_cost_ms:
            return replace(own, plan_time_s=took)
        return replace(reference, planner=self.name, plan_time_s=took)
