"""What the agent sees at each step, for any number of devices.

The observation splits into the task's global context, the unit to place, and one row per
device; the policy scores every device row with the same weights, so a policy trained on up to
P devices scores any device count. Costs are divided by the task's lower bound
``scale = max(sum of the units' own costs / D, largest unit cost)``, memory by a device's
capacity, counts by the even share ``units / D``: every feature is of order 1 whatever the task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoshard.planners.placement import PlacementState

GLOBAL_FEATURES = ("progress", "remaining_cost", "remaining_memory", "max_cost", "mean_cost", "log_devices")
UNIT_FEATURES = ("cost", "memory", "log_rows", "log_dim", "log_pooling", "zipf_alpha")
DEVICE_FEATURES = ("real", "cost", "cost_if_added", "added_cost", "over_max", "memory_used",
                   "free_after", "count", "rank", "greedy_choice")
G, U, F = len(GLOBAL_FEATURES), len(UNIT_FEATURES), len(DEVICE_FEATURES)
OBS_BOUND = 1e3  # features are of order 1; the bound only keeps the space finite


@dataclass(frozen=True, slots=True)
class Observation:
    context: np.ndarray  # [G + U]: global features then unit features
    devices: np.ndarray  # [D, F]

    def padded(self, slots: int) -> np.ndarray:
        """The flat vector the environment returns: context, then ``slots`` device rows
        (rows beyond the task's devices are zero, with ``real`` = 0)."""
        rows = np.zeros((slots, F), dtype=np.float32)
        rows[:len(self.devices)] = self.devices
        return np.clip(np.concatenate([self.context, rows.ravel()]), -OBS_BOUND, OBS_BOUND).astype(np.float32)


def observation_size(slots: int) -> int:
    return G + U + slots * F


def task_scale(state: PlacementState) -> float:
    """The lower bound every cost feature is divided by."""
    costs = [u.cost for u in state.units]
    return max(sum(costs) / state.topology.num_devices, max(costs), 1e-9)


def observe(state: PlacementState, scale: float, rows: np.ndarray, if_added: np.ndarray,
            allowed: np.ndarray) -> Observation:
    """The observation for the state's current unit, describing the devices ``rows`` (all of
    them in the environment; the candidates when planning on many devices), with their costs if
    the unit is added and whether the mask allows them (both aligned with ``rows``)."""
    unit, topology = state.current, state.topology
    n, capacity = topology.num_devices, float(topology.device_memory_bytes)
    all_loads = state.loads
    loads, free = all_loads[rows], state.free[rows]
    current_max = float(all_loads.max())
    table = unit.table
    context = np.array([
        state.position / len(state.units),
        state.remaining_cost / (scale * n),
        state.remaining_bytes / max(float(state.free.sum()), 1.0),
        current_max / scale,
        float(all_loads.mean()) / scale,
        math.log2(n) / 7.0,
        unit.cost / scale,
        unit.memory_bytes / capacity,
        math.log10(table.num_embeddings) / 8.0,
        math.log2(table.embedding_dim) / 8.0,
        math.log10(table.pooling_factor) / 3.0,
        table.zipf_alpha,
    ], dtype=np.float32)
    order = np.argsort(np.argsort(all_loads, kind="stable"), kind="stable")[rows]
    greedy = np.zeros(len(rows))
    if allowed.any():
        candidates = np.flatnonzero(allowed)
        greedy[candidates[np.argmin(if_added[candidates])]] = 1.0
    devices = np.empty((len(rows), F), dtype=np.float32)
    devices[:, 0] = 1.0
    devices[:, 1] = loads / scale
    devices[:, 2] = if_added / scale
    devices[:, 3] = devices[:, 2] - devices[:, 1]
    devices[:, 4] = (if_added - current_max) / scale
    devices[:, 5] = (capacity - free) / capacity
    devices[:, 6] = np.clip((free - unit.memory_bytes) / capacity, -1.0, 1.0)
    devices[:, 7] = state.count[rows] / (len(state.units) / n)
    devices[:, 8] = order / max(n - 1, 1)
    devices[:, 9] = greedy
    return Observation(context, devices)
