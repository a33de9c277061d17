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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.planners.placement_state import PlacementState
from autoshard.planners.recording import StepView

GLOBAL_FEATURES = ("progress", "remaining_cost", "remaining_memory", "max_cost", "mean_cost", "log_devices")
UNIT_FEATURES = ("cost", "memory", "log_rows", "log_dim", "log_pooling", "zipf_alpha")
DEVICE_FEATURES = (
    "real",
    "cost",
    "cost_if_added",
    "added_cost",
    "over_max",
    "memory_used",
    "free_after",
    "count",
    "rank",
    "greedy_choice",
)
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
        rows[: len(self.devices)] = self.devices
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
    """Each value's rank along the last axis, ascending, ties by position (the inverse of a
    stable argsort)."""
    order = np.argsort(values, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(values.shape[-1]), values.shape), axis=-1)
    return ranks


def first_lowest(values: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """For each of ``groups`` groups of consecutive rows (``group``: each row's, ascending), the
    row of its lowest value, the first of equals (``np.argmin`` of each group); none for a group
    whose values are all infinite."""
    lowest = np.full(groups, np.inf)
    np.minimum.at(lowest, group, values)
    hits = np.flatnonzero((values == lowest[group]) & (values < np.inf))
    return hits[np.concatenate([[True], group[hits[1:]] != group[hits[:-1]]])] if len(hits) else hits


def observe_many(
    states: Sequence[PlacementState | StepView],
    rows: Sequence[np.ndarray],
    if_added: Sequence[np.ndarray],
    allowed: Sequence[np.ndarray | None],
) -> Observations:
    """``observe`` of several placements of one topology in one pass (rl+refine's sampled
    rollouts step side by side; the argmax rollout's steps are checked together): state k with
    its ``rows[k]``, ``if_added[k]`` and ``allowed[k]`` (``None``: every row allowed), its costs
    scaled by its own ``cost_bound``. The placements' per-device arrays are stacked, so the work
    is a few array operations whatever their number."""
    topology = states[0].topology
    n, capacity = topology.num_devices, float(topology.device_memory_bytes)  # the largest device's
    caps = np.array(topology.device_memory_bytes_all, dtype=np.float64)  # each device's own
    units = [s.current for s in states]
    lengths = [len(r) for r in rows]
    starts = tuple(itertools.accumulate(lengths, initial=0))
    of_row = np.repeat(np.arange(len(states)), lengths)
    at = np.concatenate(rows)
    all_loads, all_free = np.stack([s.loads for s in states]), np.stack([s.free for s in states])
    loads, free, count = all_loads[of_row, at], all_free[of_row, at], np.stack([s.count for s in states])[of_row, at]
    added = np.concatenate(if_added)
    scales = np.array([s.cost_bound for s in states])
    current_max = all_loads.max(axis=1)
    unit_features = [
        (
            unit.cost,
            unit.memory_bytes / capacity,
            math.log10(unit.table.num_embeddings) / 8.0,
            math.log2(unit.table.embedding_dim) / 8.0,
            math.log10(unit.table.pooling_factor) / 3.0,
            unit.table.zipf_alpha,
        )
        for unit in units
    ]
    per_unit = np.array(unit_features, dtype=np.float64).reshape(len(states), U)
    per_unit[:, 0] /= scales
    contexts = np.empty((len(states), G + U), dtype=np.float32)
    contexts[:, 0] = np.array([s.position / len(s.units) for s in states])
    contexts[:, 1] = np.array([s.remaining_cost for s in states]) / (scales * n)
    contexts[:, 2] = np.array([s.remaining_bytes for s in states], dtype=np.float64) / np.maximum(
        all_free.sum(axis=1).astype(np.float64), 1.0
    )
    contexts[:, 3] = current_max / scales
    contexts[:, 4] = all_loads.mean(axis=1) / scales
    contexts[:, 5] = math.log2(n) / 7.0
    contexts[:, G:] = per_unit
    # greedy's choice: per placement, the first allowed row whose cost with the unit added is lowest
    if all(a is None for a in allowed):
        masked = added
    else:
        ok = np.concatenate([np.ones(k, dtype=bool) if a is None else a for k, a in zip(lengths, allowed)])
        masked = np.where(ok, added, np.inf)
    greedy = np.zeros(len(at))
    greedy[first_lowest(masked, of_row, len(states))] = 1.0
    scale = scales[of_row]
    memory = np.array([u.memory_bytes for u in units], dtype=np.int64)
    devices = device_rows(
        loads / scale,
        added / scale,
        (added - current_max[of_row]) / scale,
        (caps[at] - free) / caps[at],
        np.minimum(np.maximum((free - memory[of_row]) / caps[at], -1.0), 1.0),
        count / np.array([len(s.units) / n for s in states])[of_row],
        _ranks(all_loads)[of_row, at] / max(n - 1, 1),
        greedy,
    )
    return Observations(contexts, devices, starts)


def device_rows(
    cost: np.ndarray,
    cost_if_added: np.ndarray,
    over_max: np.ndarray,
    memory_used: np.ndarray,
    free_after: np.ndarray,
    count: np.ndarray,
    rank: np.ndarray,
    greedy_choice: np.ndarray,
) -> np.ndarray:
    """Device rows in ``DEVICE_FEATURES``' order from their columns, already scaled (``real`` 1,
    ``added_cost`` the difference of the two costs as float32 holds them); the placing steps'
    and the repair steps' (``autoshard.rl.repair``) observations both write them here."""
    rows = np.empty((len(cost), F), dtype=np.float32)
    rows[:, 0] = 1.0
    rows[:, 1] = cost
    rows[:, 2] = cost_if_added
    rows[:, 3] = rows[:, 2] - rows[:, 1]
    for k, column in enumerate((over_max, memory_used, free_after, count, rank, greedy_choice), start=4):
        rows[:, k] = column
    return rows
