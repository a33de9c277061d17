"""Planners: heuristics, cost-model greedy with local search, plan validation and reports."""

from autoshard.planners.context import PlannerContext, PlannerKind
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.planners.heuristics import GreedyProxyPlanner, RandomPlanner, RoundRobinPlanner
from autoshard.planners.local_search import improve
from autoshard.planners.proxies import PROXIES, ProxyCostModel
from autoshard.planners.registry import (HEURISTICS, PLANNERS, PlannerSpec, available_planners, make_planner,
                                         planner_names, planner_spec, register_planner)
from autoshard.planners.report import plan_to_dict, plans_report, shard_label
from autoshard.planners.validate import validate_plan

__all__ = ["CostGreedyPlanner", "GreedyProxyPlanner", "HEURISTICS", "PLANNERS", "PROXIES", "PlannerContext",
           "PlannerKind", "PlannerSpec", "ProxyCostModel", "planner_spec", "RandomPlanner", "RoundRobinPlanner", "available_planners", "improve",
           "make_planner", "plan_to_dict", "planner_names", "plans_report", "register_planner",
           "shard_label", "validate_plan"]
