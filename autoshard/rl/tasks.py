"""Placement tasks for training and evaluating the agent: tables drawn from a pool, a device
count, and binding memory (``slack`` x an even share, at least the largest table's need)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from autoshard.core.errors import InputError
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.task import Task, memory_for
from autoshard.core.types import Table, Topology


class TaskSource(Protocol):
    """Where an environment's episodes come from."""

    def sample(self, rng: np.random.Generator) -> Task: ...


@dataclass(frozen=True, slots=True)
class FixedTasks:
    """Episodes drawn uniformly from given tasks (tests, curricula, one workload to learn)."""

    tasks: tuple[Task, ...]

    def sample(self, rng: np.random.Generator) -> Task:
        return self.tasks[int(rng.integers(len(self.tasks)))]


@lru_cache(maxsize=8)
def _pool_tables(pool: PoolConfig, split: str) -> tuple[Table, ...]:
    generated = generate_pool(pool)
    return generated.train if split == "train" else generated.test


@dataclass(frozen=True, slots=True)
class TaskDistribution:
    """What each episode draws: ``num_tables`` and ``num_devices`` uniformly from their choices,
    memory slack uniformly from ``slack``; tables from the pool's ``split``."""

    pool: PoolConfig = PoolConfig()
    split: str = "train"
    num_tables: tuple[int, ...] = (10, 20, 40, 60, 80, 120, 160)
    num_devices: tuple[int, ...] = (2, 4, 8, 16)
    slack: tuple[float, float] = (1.1, 2.0)
    batch_size: int = 2048

    def __post_init__(self) -> None:
        if self.split not in ("train", "test"):
            raise InputError("split", f"must be 'train' or 'test', got {self.split!r}")
        if not self.num_tables or min(self.num_tables) < 1:
            raise InputError("num_tables", f"must be counts >= 1, got {self.num_tables!r}")
        if not self.num_devices or min(self.num_devices) < 1:
            raise InputError("num_devices", f"must be counts >= 1, got {self.num_devices!r}")
        if not 1.0 <= self.slack[0] <= self.slack[1]:
            raise InputError("slack", f"must be (low, high) with 1 <= low <= high, got {self.slack!r}")

    @property
    def max_devices(self) -> int:
        return max(self.num_devices)

    def sample(self, rng: np.random.Generator) -> Task:
        tables = _pool_tables(self.pool, self.split)
        count = min(int(rng.choice(self.num_tables)), len(tables))
        devices = int(rng.choice(self.num_devices))
        slack = float(rng.uniform(*self.slack))
        workload = sample_task(tables, count, rng, self.batch_size, f"{self.split}{count}x{devices}")
        return Task(workload.name, workload, Topology(devices, memory_for(workload, devices, slack)))
