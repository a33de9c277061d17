"""The placement loop every planner steps: ``place_workload`` (the task's units, retried with
smaller shards after a dead end), ``place`` (one placement to its end) and ``place_together``
(several placements of one unit order side by side). What each step chooses is a chooser's
(``choosers``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autoshard.core.costing import Accumulator
from autoshard.core.errors import PlannerError
from autoshard.planners.choosers import CANDIDATES, BatchChooser, Chooser, candidates
from autoshard.planners.deadline import Deadline
from autoshard.planners.feasibility import no_room_error
from autoshard.planners.packing import packable_many
from autoshard.planners.packing_lookahead import bins_taking
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit
from autoshard.planners.unit_preparation import TaskUnits, by_cost


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


def prefetch_lookahead(states: Sequence[PlacementState], limit: int | None) -> None:
    """The packing lookahead's answers for the rooms that each placement's ``allowed(limit)``
    checks first, with one first-fit pass for all of them: ``place_together``'s placements are at
    the same step of the same units, so first-fit packs the same items into each one's bins
    (first-fit is row by row: the answers are those each would compute alone). Placements alike
    so far share their answers (``StepCosts.rooms``) and are checked once."""
    jobs: list[tuple[PlacementState, np.ndarray]] = []
    seen: set[int] = set()
    for state in states:
        if state.done or not state.lookahead:
            continue
        packing, size = state.packing, state.current.memory_bytes
        if id(packing.answers) in seen or packing.packs_anywhere(state.free, size):
            continue  # checked with an alike placement, or nothing for the lookahead to check (cheap first)
        seen.add(id(packing.answers))
        rooms = state.rooms_to_check(limit)
        if not len(rooms):
            continue
        ok = packing.surely_packable(state.free, size, rooms)
        packing.answers.update(zip(rooms[ok].tolist(), [True] * int(ok.sum())))
        if not ok.all():
            jobs.append((state, rooms[~ok]))
    if not jobs:
        return
    assert len({(s.position, len(s.packing)) for s, _ in jobs}) == 1, "one step of one unit order"
    first = jobs[0][0]
    bins = [bins_taking(s.free, s.current.memory_bytes, rooms) for s, rooms in jobs]
    answers = packable_many(first.packing.sizes_after(first.current.memory_bytes), np.concatenate(bins)).tolist()
    at = 0
    for state, rooms in jobs:
        state.packing.answers.update(zip(rooms.tolist(), answers[at : at + len(rooms)]))
        at += len(rooms)
