"""Planning: the planner registry, planners compared side by side, and the one function that plans."""
