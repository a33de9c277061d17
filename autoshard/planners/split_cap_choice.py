"""Which column-split cap to plan: the plan without splits and the best-balanced split
candidate, the split one returned only where it is predicted clearly lower
(``best_over_split_caps``, ``chosen_over_split``; docs/concepts.md, "Column splits")."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.core.errors import PlannerError
from autoshard.core.types import Topology
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState, max_load
from autoshard.planners.placement_unit import Unit
from autoshard.planners.unit_preparation import by_cost


@dataclass(frozen=True, slots=True)
class CapGroup:
    """Split caps (None: no split) that split the tables alike: their units, and the max of
    those units placed by their own costs (``additive_max``)."""

    units: frozenset[Unit]
    caps: tuple[int | None, ...]
    additive: float


def best_over_split_caps(
    topology: Topology,
    allow_split: bool,
    plan_at: Callable[[int | None], list[DeviceState]],
    units_at: Callable[[int | None], Sequence[Unit]],
    margin: float = 0.0,
    deadline: Deadline | None = None,
) -> list[DeviceState]:
    """Without splitting, ``plan_at(None)``. With it, the plan without splits and, where
    splitting could pay, the plan of the split cap (2, 4, ... D ways) whose units balance best
    by their own costs; the plan with splits only if it is predicted more than ``margin``
    below the one without (``chosen_over_split``).

    Caps that split the tables alike (``units_at``, ``TaskUnits.at_cap``; only tables above the
    split level split, into the fewest shards that bring them under it, no finer than their
    widths allow: ``split_units``) are one candidate (``CapGroup``). Placement depends only on its units, so a
    cap of a group places as the group's first did, unless that one ran into a dead end and
    retried with smaller shards (``place_workload``): then the next cap of the group is
    planned too. The split candidate is planned only if its ``additive_max`` is more than
    ``margin`` below the unsplit one's: the additive balance, found without the model, tells
    where splitting could clear the margin. Without a plan that fits
    unsplit, the split candidates are planned best first until one plans. A ``PlannerError``
    is raised only if nothing plans. Past the ``deadline``, the plan without splits is kept."""
    if not allow_split:
        return plan_at(None)
    whole, splits, error = _cap_groups(topology, units_at)
    planned: list[list[DeviceState]] = []
    if whole is not None:
        found, error = _plan_group(whole, plan_at, error)
        planned += found
    if planned and deadline is not None and deadline.expired:
        return chosen_over_split(planned, margin)
    if planned:  # the best-balanced split candidate, where its balance could clear the margin
        assert whole is not None
        candidates = [g for g in splits if g.additive < (1 - margin) * whole.additive][:1]
    else:  # nothing fits unsplit: the split candidates, best first, until one plans
        candidates = splits
    for group in candidates:
        found, error = _plan_group(group, plan_at, error)
        planned += found
        if found:
            break
    if not planned:
        assert error is not None
        raise error
    return chosen_over_split(planned, margin)


def chosen_over_split(placements: Sequence[list[DeviceState]], margin: float) -> list[DeviceState]:
    """Of placements of one task, the lowest-max one holding column shards if it is predicted
    more than ``margin`` below the lowest-max one without (or there is none without); else
    that one: smaller predicted gains are within the model's error (``DEPARTURE_MARGIN``; chosen by
    measurement: docs/decisions.md, 20)."""
    whole = [p for p in placements if not _has_shards(p)]
    split = [p for p in placements if _has_shards(p)]
    best_whole = min(whole, key=max_load) if whole else None
    best_split = min(split, key=max_load) if split else None
    if best_whole is None or (best_split is not None and clearly_lower(best_split, best_whole, margin)):
        assert best_split is not None
        return best_split
    return best_whole


def clearly_lower(found: Sequence[DeviceState], than: Sequence[DeviceState], margin: float) -> bool:
    """Whether ``found``'s max load is more than ``margin`` (a fraction) below ``than``'s: what a
    plan other than the plain one must be predicted to be chosen (``DEPARTURE_MARGIN``)."""
    return max_load(found) < (1 - margin) * max_load(than)


def _has_shards(states: Sequence[DeviceState]) -> bool:
    return any(u.shard.columns is not None for s in states for u in s.units)


def _plan_group(
    group: CapGroup, plan_at: Callable[[int | None], list[DeviceState]], error: PlannerError | None
) -> tuple[list[list[DeviceState]], PlannerError | None]:
    """The group's placements: its first cap's, and the next one's while a cap retried with
    smaller shards or failed; and the last ``PlannerError`` (``error`` if none)."""
    found: list[list[DeviceState]] = []
    for cap in group.caps:
        try:
            states = plan_at(cap)
        except PlannerError as failed:
            error = failed
            continue
        found.append(states)
        # placed as split (the group's units all placed, beside any fixed ones): so would the others
        if group.units.issubset(u for s in states for u in s.units):
            break
    return found, error


def _cap_groups(
    topology: Topology,
    units_at: Callable[[int | None], Sequence[Unit]],
) -> tuple[CapGroup | None, list[CapGroup], PlannerError | None]:
    """The group of no split (None if its units cannot fit), the other groups lowest
    ``additive_max`` first (ties: fewer ways), and the error of a cap whose units cannot fit."""
    caps: list[int | None] = [None, *(2**k for k in range(1, topology.num_devices.bit_length()))]
    members: dict[frozenset[Unit], list[int | None]] = {}
    first: dict[frozenset[Unit], int] = {}
    error: PlannerError | None = None
    for order, cap in enumerate(caps):
        try:
            units = frozenset(units_at(cap))
        except PlannerError as failed:
            error = failed
            continue
        first.setdefault(units, order)
        members.setdefault(units, []).append(cap)
    groups = [
        CapGroup(units, tuple(c), additive_max(list(units), topology.num_devices)) for units, c in members.items()
    ]
    whole = next((g for g in groups if g.caps[0] is None), None)
    splits = sorted((g for g in groups if g is not whole), key=lambda g: (g.additive, first[g.units]))
    return whole, splits, error


def additive_max(units: Sequence[Unit], num_devices: int) -> float:
    """The max device load of the units placed largest first, each on the least-loaded device
    without another shard of its table, loads the sums of the units' own costs (memory
    ignored): how well a split cap's units can balance, found without the set-level model."""
    loads = [(0.0, d) for d in range(num_devices)]  # a heap of (load, device)
    parents: list[set[str]] = [set() for _ in range(num_devices)]
    for unit in by_cost(units):
        passed = []
        while loads and unit.parent in parents[loads[0][1]]:
            passed.append(heapq.heappop(loads))
        if loads:
            load, device = heapq.heappop(loads)
            parents[device].add(unit.parent)
            heapq.heappush(loads, (load + unit.cost, device))
        for entry in passed:
            heapq.heappush(loads, entry)
    return max(load for load, _ in loads)
