"""What the agent sees at each step, for any number of devices.

The observation splits into the task's global context, the unit to place, and one row per
device; the policy scores every device row with the same weights, so a policy trained on up to
P devices scores any device count. Costs are divided by the task's lower bound
(``PlacementState.cost_bound``: max(sum of the units' own costs / D, largest unit cost)), memory
by a device's capacity, counts by the even share ``units / D``: every feature is of order 1
whatever the task.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

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


def observe(state: PlacementState, rows: np.ndarray, if_added: np.ndarray, allowed: np.ndarray) -> Observation:
    """The observation for the state's current unit, describing the devices ``rows`` (all of
    them in the environment; the candidates when planning on many devices), with their costs if
    the unit is added and whether the mask allows them (both aligned with ``rows``)."""
    many = observe_many([state], [rows], [if_added], [allowed])
    return Observation(many.contexts[0], many.devices)


@dataclass(frozen=True, slots=True)
class Observations:
    """Several placements' observations at once: placement k's context is ``contexts[k]``, its
    device rows ``devices[starts[k]:starts[k + 1]]``."""

    contexts: np.ndarray  # [K, G + U]
    devices: np.ndarray  # [rows of all K, F]
    starts: tuple[int, ...]  # K + 1 row offsets

    @property
    def placement_of_row(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.contexts)), np.diff(self.starts))


def _ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank, ascending, ties by position (the inverse of a stable argsort)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty_like(order)
    ranks[order] = np.arange(len(order))
    return ranks


def observe_many(states: Sequence[PlacementState], rows: Sequence[np.ndarray], if_added: Sequence[np.ndarray],
                 allowed: Sequence[np.ndarray | None]) -> Observations:
    """``observe`` of several placements of one topology in one pass (rl+refine's sampled
    rollouts step side by side): state k with its ``rows[k]``, ``if_added[k]`` and
    ``allowed[k]`` (``None``: every row allowed), its costs scaled by its own ``cost_bound``."""
    topology = states[0].topology
    scales = np.array([s.cost_bound for s in states])
    n, capacity = topology.num_devices, float(topology.device_memory_bytes)
    units = [s.current for s in states]
    one = len(states) == 1
    lengths = [len(r) for r in rows]
    starts = tuple(itertools.accumulate(lengths, initial=0))
    of_row = None if one else np.repeat(np.arange(len(states)), lengths)

    def pick(arrays: Sequence[np.ndarray]) -> np.ndarray:
        """Each row's device's entry of its placement's per-device array."""
        return arrays[0][rows[0]] if one else np.stack(arrays)[of_row, at]

    def per_row(values: Sequence[float]) -> np.ndarray | float:
        """Each row's placement's value (a scalar for one placement)."""
        return values[0] if one else np.asarray(values)[of_row]

    at = rows[0] if one else np.concatenate(rows)
    all_loads = [s.loads for s in states]
    loads, free, count = pick(all_loads), pick([s.free for s in states]), pick([s.count for s in states])
    added = if_added[0] if one else np.concatenate(if_added)
    current_max = [float(x.max()) for x in all_loads]
    contexts = np.array([[
        s.position / len(s.units),
        s.remaining_cost / (scale * n),
        s.remaining_bytes / max(float(s.free.sum()), 1.0),
        top / scale,
        float(x.mean()) / scale,
        math.log2(n) / 7.0,
        unit.cost / scale,
        unit.memory_bytes / capacity,
        math.log10(unit.table.num_embeddings) / 8.0,
        math.log2(unit.table.embedding_dim) / 8.0,
        math.log10(unit.table.pooling_factor) / 3.0,
        unit.table.zipf_alpha,
    ] for s, unit, scale, top, x in zip(states, units, scales.tolist(), current_max, all_loads)], dtype=np.float32)
    rank = pick([_ranks(x) for x in all_loads])
    greedy = np.zeros(len(at))
    for k, (a, b) in enumerate(itertools.pairwise(starts)):
        if allowed[k] is None:  # every row allowed
            greedy[a + int(np.argmin(added[a:b]))] = 1.0
        elif allowed[k].any():
            candidates = np.flatnonzero(allowed[k])
            greedy[a + candidates[np.argmin(added[a:b][candidates])]] = 1.0
    scale = per_row(scales)
    devices = np.empty((len(at), F), dtype=np.float32)
    devices[:, 0] = 1.0
    devices[:, 1] = loads / scale
    devices[:, 2] = added / scale
    devices[:, 3] = devices[:, 2] - devices[:, 1]
    devices[:, 4] = (added - per_row(current_max)) / scale
    devices[:, 5] = (capacity - free) / capacity
    devices[:, 6] = np.minimum(np.maximum((free - per_row([u.memory_bytes for u in units])) / capacity, -1.0), 1.0)
    devices[:, 7] = count / per_row([len(s.units) / n for s in states])
    devices[:, 8] = rank / max(n - 1, 1)
    devices[:, 9] = greedy
    return Observations(contexts, devices, starts)
