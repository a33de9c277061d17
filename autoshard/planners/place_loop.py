"""The placement loop every planner steps: ``place_workload`` (the task's units, retried with
smaller shards after a dead end) and ``place`` (one placement to its end). What each step chooses
is a chooser's (``choosers``)."""

from __future__ import annotations

from collections.abc import Callable

from autoshard.core.errors import PlannerError
from autoshard.planners.choosers import Chooser
from autoshard.planners.deadline import Deadline
from autoshard.planners.feasibility import no_room_error
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
    dead_ends: dict[tuple[str, ...], PlannerError] | None = None,
) -> PlacementState:
    """The task's ``units``, then ``place`` them (heaviest first, or in the given order) on the
    fresh state ``start`` makes for them (``scope``, ``deadline``: ``place``'s; a placement that
    dropped its lookahead at the deadline and then ran into a dead end is placed again with it).
    When splitting is allowed and placement runs into a dead end, retry with shards of at most
    half, a quarter, ... of a device's memory, until the split stops changing.

    ``dead_ends``: the unit orders (by name) known to dead-end from ``start``'s state with this
    ``choose`` and ``scope``, and their errors, shared by the calls that place alike (the caller
    keys it by all else a placement depends on): such an order is not placed again but fails
    as it did (a task's split caps and their retries reach the same units: 436 of 977
    placements on grid80x16x8-giant under TorchRec's model). An order that dead-ends with the
    lookahead to its end is added; past the ``deadline`` (the lookahead dropped) each is placed."""
    limit, count = units.topology.device_memory_bytes, -1
    while True:
        found = units(allow_split, limit, max_ways)
        ordered = by_cost(found) if order_by_cost else found
        try:
            key = tuple(u.name for u in ordered) if dead_ends is not None else ()
            if dead_ends is not None and key in dead_ends and not (deadline is not None and deadline.expired):
                raise dead_ends[key]
            state = start(ordered)
            try:
                return place(state, choose, scope, deadline)
            except PlannerError as error:
                if not state.dropped_lookahead:
                    if dead_ends is not None:
                        dead_ends[key] = error
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
