"""The choosers the planners share: a ``Chooser`` picks the device for a placement's current unit
among those its mask allows (``least_loaded`` by running load, ``cheapest_after`` by the cost
model among the ``candidates``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autoshard.planners.placement_state import PlacementState

Chooser = Callable[[PlacementState, np.ndarray], int]
"""(the placement, indices of the devices allowed for its current unit) -> the device to take it."""


def least_loaded(state: PlacementState, allowed: np.ndarray) -> int:
    """The device with the lowest load; ties to the one with less memory used, then the lowest
    index (as DreamShard's greedy sharders); load is a running sum of unit costs."""
    loads, free = state.loads.tolist(), state.free.tolist()  # memory used: the capacity less free
    return min(allowed.tolist(), key=lambda d: (loads[d], -free[d]))  # the first of equals: lowest index


CANDIDATES = 16
"""Scoring planners (cost_greedy, rl) score at most this many devices per unit: the least
loaded of those allowed. A min-max placement almost never wants a unit on a device with many
others below it, and the cost model's head runs once per scored device, so scoring all 128 of a
128-device task costs 8x the time, for placements of the same predicted max (chosen by
measurement: docs/decisions.md, 32)."""


def candidates(state: PlacementState, allowed: np.ndarray, limit: int = CANDIDATES) -> np.ndarray:
    """The ``limit`` least-loaded of the ``allowed`` devices (ties: lowest index), in index
    order; of several empty devices (all alike) only the first. ``allowed`` may be the state's
    ``allowed(scope)`` for a scope of at least ``limit``."""
    assert state.scope is None or limit <= state.scope, "the devices allowed were cut to fewer candidates"
    empty = state.count[allowed] == 0
    if empty.sum() > 1:  # keep the first empty device, drop the others
        empty[np.argmax(empty)] = False
        allowed = allowed[~empty]
    if len(allowed) > limit:
        allowed = np.sort(allowed[np.argsort(state.loads[allowed], kind="stable")[:limit]])
    return allowed


def cheapest_after(state: PlacementState, allowed: np.ndarray) -> int:
    """Of the ``candidates``, the device whose predicted cost with the unit added is lowest
    (ties: lowest index)."""
    allowed = candidates(state, allowed)
    return int(allowed[np.argmin(state.costs_if_added(allowed))])
