"""The device sets that planners create: tasks to plan, and each plan's device sets.

A cost model must be right where plans go. ``plan_tasks`` draws tasks (tables x devices, memory
binding) from a table pool; ``plan_memberships`` plans each with every planner and returns, for
each device of each plan, its tables: the sets to measure (``cost_model.plan_traces``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from autoshard.communication import CommunicationModel
from autoshard.evaluation import Task, memory_for
from autoshard.planners.compare import compare_planners
from autoshard.planners.context import PlannerContext
from autoshard.synthetic import sample_task
from autoshard.types import Table, Topology


@dataclass(frozen=True, slots=True)
class PlanTaskConfig:
    """How tasks are drawn: table counts and device counts (uniform over the choices), memory
    ``slack`` x an even share (binding), seeded."""

    tasks: int = 12
    tables: tuple[int, ...] = (20, 40, 80, 160)
    devices: tuple[int, ...] = (4, 8, 16)
    slack: float = 1.3
    seed: int = 0


def plan_tasks(pool: Sequence[Table], config: PlanTaskConfig, batch_size: int, prefix: str) -> list[Task]:
    """``config.tasks`` tasks of distinct pool tables, named ``{prefix}{i}``."""
    rng = np.random.default_rng(config.seed)
    tasks = []
    for i in range(config.tasks):
        count = min(int(rng.choice(config.tables)), len(pool))
        devices = int(rng.choice(config.devices))
        workload = sample_task(tuple(pool), count, rng, batch_size, f"{prefix}{i}")
        tasks.append(Task(workload.name, workload, Topology(devices, memory_for(workload, devices, config.slack))))
    return tasks


def plan_memberships(tasks: Sequence[Task], planners: Sequence[str], context: PlannerContext,
                     communication: CommunicationModel | None) -> list[tuple[tuple[str, str, int], tuple[Table, ...]]]:
    """((task, planner, device), the device's tables) for every non-empty device of every plan;
    planners that cannot plan a task are left out of it."""
    out = []
    for task in tasks:
        result = compare_planners(task.workload, task.topology, planners, context, communication)
        for plan in result.plans:
            for device, placed in enumerate(plan.devices):
                tables = tuple(shard.as_table for shard in placed.shards)
                if tables:
                    out.append(((task.name, plan.planner, device), tables))
    return out
