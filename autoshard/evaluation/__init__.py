"""Evaluation: comparing planners side by side (the planner registry), measuring plans here and
under TorchRec's DistributedModelParallel, verifying, and the reports and statistics of suites."""
