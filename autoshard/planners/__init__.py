"""Planners: each table's sharding, the steppable placement state, the heuristics, cost_greedy
with local search and column splits, TorchRec's planner, re-planning, validation and reports.
They take the cost model through ``autoshard.core.costing``'s interfaces, passed in."""
