"""Sharding tasks for training and evaluating the agent: tables drawn from a pool, a cluster of
hosts x devices, and binding memory (``slack`` x an even share; in a ``giant_share`` of tasks
without the floor of the largest table, so that some tables fit no device)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from autoshard.core.errors import InputError
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.task import Task, even_memory, memory_for
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
    """What each episode draws: ``num_tables`` and a topology (hosts, devices per host) uniformly
    from their choices, memory slack uniformly from ``slack``, and in ``giant_share`` of the tasks
    memory without the largest table's floor; tables from the pool's ``split``."""

    pool: PoolConfig = PoolConfig()
    split: str = "train"
    num_tables: tuple[int, ...] = (10, 20, 40, 80, 120, 160)
    topologies: tuple[tuple[int, int], ...] = ((1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 4))
    slack: tuple[float, float] = (1.1, 2.0)
    giant_share: float = 0.25
    batch_size: int = 2048

    def __post_init__(self) -> None:
        if self.split not in ("train", "test"):
            raise InputError("split", f"must be 'train' or 'test', got {self.split!r}")
        if not self.num_tables or min(self.num_tables) < 1:
            raise InputError("num_tables", f"must be counts >= 1, got {self.num_tables!r}")
        if not self.topologies or min(min(t) for t in self.topologies) < 1:
            raise InputError("topologies", f"must be (hosts, devices per host) >= 1, got {self.topologies!r}")
        if not 1.0 <= self.slack[0] <= self.slack[1]:
            raise InputError("slack", f"must be (low, high) with 1 <= low <= high, got {self.slack!r}")
        if not 0.0 <= self.giant_share <= 1.0:
            raise InputError("giant_share", f"must be in [0, 1], got {self.giant_share}")

    @property
    def max_devices(self) -> int:
        return max(h * d for h, d in self.topologies)

    def sample(self, rng: np.random.Generator) -> Task:
        tables = _pool_tables(self.pool, self.split)
        count = min(int(rng.choice(self.num_tables)), len(tables))
        hosts, per_host = self.topologies[int(rng.integers(len(self.topologies)))]
        slack = float(rng.uniform(*self.slack))
        giant = bool(rng.random() < self.giant_share)
        devices = hosts * per_host
        workload = sample_task(tables, count, rng, self.batch_size, f"{self.split}{count}_{hosts}x{per_host}")
        memory = even_memory(workload, devices, slack) if giant else memory_for(workload, devices, slack)
        return Task(workload.name, workload, Topology.cluster(hosts, per_host, memory))
