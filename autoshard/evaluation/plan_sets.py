"""The device sets that planners create: tasks to plan, and each plan's device sets.

A cost model must be right where plans go. ``plan_tasks`` draws tasks (tables x devices, memory
binding, a batch size) from a table pool; ``plan_memberships`` plans each with every planner and
returns, for each device of each plan, its tables at the task's batch size: the sets to measure
(``cost_model.bench.plan_traces``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from autoshard.core.communication import CommunicationModel
from autoshard.core.synthetic import sample_task
from autoshard.core.task import Task, memory_for
from autoshard.core.types import DeviceSet, Table, Topology
from autoshard.planners.context import PlannerContext
from autoshard.planning.compare import compare_planners


@dataclass(frozen=True, slots=True)
class PlanTaskConfig:
    """How tasks are drawn: table counts, device counts and batch sizes (uniform over the choices;
    no batch sizes: the caller's one), memory ``slack`` x an even share (binding), seeded."""

    tasks: int = 12
    tables: tuple[int, ...] = (20, 40, 80, 160)
    devices: tuple[int, ...] = (4, 8, 16)
    slack: float = 1.3
    seed: int = 0
    batch_sizes: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        """As recorded in a plan-set trace header (``batch_sizes`` only when drawn, so that files
        written before it existed still resume)."""
        out = asdict(self)
        if not self.batch_sizes:
            out.pop("batch_sizes")
        return out


def plan_tasks(pool: Sequence[Table], config: PlanTaskConfig, batch_size: int, prefix: str) -> list[Task]:
    """``config.tasks`` tasks of distinct pool tables, named ``{prefix}{i}``, each at a batch size
    drawn from ``config.batch_sizes`` (or at ``batch_size``)."""
    rng = np.random.default_rng(config.seed)
    tasks = []
    for i in range(config.tasks):
        count = min(int(rng.choice(config.tables)), len(pool))
        devices = int(rng.choice(config.devices))
        batch = int(rng.choice(config.batch_sizes)) if config.batch_sizes else batch_size
        workload = sample_task(tuple(pool), count, rng, batch, f"{prefix}{i}")
        tasks.append(Task(workload.name, workload, Topology(devices, memory_for(workload, devices, config.slack))))
    return tasks


def plan_memberships(
    tasks: Sequence[Task], planners: Sequence[str], context: PlannerContext, communication: CommunicationModel | None
) -> list[DeviceSet]:
    """Every non-empty device of every plan; planners that cannot plan a task are left out of it."""
    out = []
    for task in tasks:
        result = compare_planners(task.workload, task.topology, planners, context, communication)
        for plan in result.plans:
            for device, placed in enumerate(plan.devices):
                tables = tuple(shard.as_table for shard in placed.shards)
                if tables:
                    out.append(DeviceSet((task.name, plan.planner, device), tables, task.workload.batch_size))
    return out
