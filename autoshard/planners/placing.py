"""The placement loop every planner steps (``place_workload``, ``place``), several placements of
one unit order side by side (``place_together``), and the choosers the planners share
(``least_loaded``, ``cheapest_after`` among the ``candidates``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autoshard.core.costing import Accumulator
from autoshard.core.errors import PlannerError
from autoshard.planners.deadline import Deadline
from autoshard.planners.feasibility import no_room_error
from autoshard.planners.placement import Chooser, PlacementState, prefetch_lookahead
from autoshard.planners.task_units import TaskUnits, by_cost
from autoshard.planners.units import Unit


def place_workload(
    units: TaskUnits,
    allow_split: bool,
    choose: Chooser,
    start: Callable[[list[Unit]], PlacementState],
    order_by_cost: bool = True,
    max_ways: int | None = None,
    scope: int | None = None,
    deadline: Deadline | None = None,
) -> PlacementState:
    """The task's ``units``, then ``place`` them (heaviest first, or in the given order) on the
    fresh state ``start`` makes for them (``scope``, ``deadline``: ``place``'s; a placement that
    dropped its lookahead at the deadline and then ran into a dead end is placed again with it).
    When splitting is allowed and placement runs into a dead end, retry with shards of at most
    half, a quarter, ... of a device's memory, until the split stops changing."""
    limit, count = units.topology.device_memory_bytes, -1
    while True:
        found = units(allow_split, limit, max_ways)
        ordered = by_cost(found) if order_by_cost else found
        try:
            state = start(ordered)
            try:
                return place(state, choose, scope, deadline)
            except PlannerError:
                if not state.dropped_lookahead:
                    raise
            return place(start(ordered), choose, scope)  # the lookahead was needed after all
        except PlannerError:
            if not allow_split or len(found) == count:
                raise
            limit, count = limit // 2, len(found)


def place(
    state: PlacementState, choose: Chooser, scope: int | None = None, deadline: Deadline | None = None
) -> PlacementState:
    """Step ``state`` to the end, each unit on the device ``choose`` picks among the allowed
    ones (with ``scope``, for a chooser of at most that many ``candidates``: ``allowed(scope)``);
    ``PlannerError`` naming the unit when no device has room. Past the ``deadline`` the packing
    lookahead stops (``drop_lookahead``): its first-fit checks grow with units x devices, and
    the placement must finish to make a plan."""
    while not state.done:
        if state.lookahead and deadline is not None and deadline.expired:
            state.drop_lookahead()
        allowed = state.allowed(scope)
        if not len(allowed):
            raise no_room_error(state.current, state.devices)
        state.apply(choose(state, allowed))
    return state


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


BatchChooser = Callable[[Sequence[PlacementState], Sequence[np.ndarray]], list[int]]
"""(placements, each one's allowed devices) -> each one's device: ``Chooser`` for several at once."""


def place_together(
    states: Sequence[PlacementState],
    choose: BatchChooser,
    shared: Accumulator,
    limit: int = CANDIDATES,
    deadline: Deadline | None = None,
) -> list[PlacementState | None]:
    """Step placements of the same units side by side: state k's accumulator is sets k x D ..
    of ``shared`` (``costing.AccumulatorView``), so each step scores the current unit on every
    placement's ``candidates`` (``limit`` of them) in one call, then ``choose`` picks every
    placement's device in one call. A placement that runs into a dead end comes back ``None``;
    every one does once the ``deadline`` expires."""
    devices = states[0].topology.num_devices
    live = list(range(len(states)))
    while live and not states[live[0]].done:
        if deadline is not None and deadline.expired:
            return [None] * len(states)
        unit = states[live[0]].current
        prefetch_lookahead([states[k] for k in live], limit)  # their first-fit checks in one pass
        allowed = {k: states[k].allowed(limit) for k in live}
        live = [k for k in live if len(allowed[k])]
        rows = {k: candidates(states[k], allowed[k], limit) for k in live}
        if not live:
            break
        assert all(states[k].current is unit for k in live), "place_together needs one unit order"
        scored = [k for k in live if not states[k].knows(rows[k])]  # not known from another placement
        if scored:
            costs = shared.costs_if_added(unit.table, np.concatenate([rows[k] + k * devices for k in scored]))
            at = 0
            for k in scored:
                states[k].prime(rows[k], costs[at : at + len(rows[k])])
                at += len(rows[k])
        for k, device in zip(live, choose([states[k] for k in live], [allowed[k] for k in live])):
            states[k].apply(device)
    return [states[k] if k in live else None for k in range(len(states))]


def cheapest_after(state: PlacementState, allowed: np.ndarray) -> int:
    """Of the ``candidates``, the device whose predicted cost with the unit added is lowest
    (ties: lowest index)."""
    allowed = candidates(state, allowed)
    return int(allowed[np.argmin(state.costs_if_added(allowed))])
