"""Local search on a placement: moves and swaps off the most loaded device, judged by a cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from autoshard.planners.placement import DeviceState, predict_costs
from autoshard.planners.units import Unit
from autoshard.types import CostModel, Table

REL_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class Change:
    """Move unit ``out`` of device ``source`` to ``target``, and, for a swap, unit ``back`` of
    ``target`` to ``source``; with the two devices' predicted costs after it."""

    source: int
    target: int
    out: int
    back: int | None
    source_cost: float
    target_cost: float


def improve(states: list[DeviceState], cost_model: CostModel, batch_size: int, max_rounds: int = 50) -> int:
    """Apply the best move or swap off the max-cost device while it lowers the costs sorted
    descending (the max first, then the next; so ties at the max still make progress).
    ``states[*].load`` must hold predicted costs; they are kept up to date. Memory and the
    one-shard-per-device rule hold throughout. One batched model call per round; returns the
    number of changes applied."""
    for done in range(max_rounds):
        change = _best_change(states, cost_model, batch_size)
        if change is None:
            return done
        source, target = states[change.source], states[change.target]
        unit = source.remove(change.out, change.source_cost)
        if change.back is not None:
            source.add(target.remove(change.back, change.target_cost), change.source_cost)
        target.add(unit, change.target_cost)
    return max_rounds


def _best_change(states: Sequence[DeviceState], cost_model: CostModel, batch_size: int) -> Change | None:
    source = max(states, key=lambda s: (s.load, -s.index))
    tables = [s.tables for s in states]
    mine = tables[source.index]
    sets: list[list[Table]] = []
    shapes: list[tuple[int, int, int | None, int, int]] = []  # target, out, back, source set, target set
    for i, unit in enumerate(source.units):
        rest = mine[:i] + mine[i + 1:]
        sets.append(rest)
        rest_at = len(sets) - 1
        for target in states:
            if target is source:
                continue
            theirs = tables[target.index]
            if target.accepts(unit):
                sets.append(theirs + [unit.table])
                shapes.append((target.index, i, None, rest_at, len(sets) - 1))
            for j, other in enumerate(target.units):
                if _swappable(source, unit, target, other):
                    sets += [rest + [other.table], theirs[:j] + theirs[j + 1:] + [unit.table]]
                    shapes.append((target.index, i, j, len(sets) - 2, len(sets) - 1))
    if not shapes:
        return None
    costs = predict_costs(cost_model, sets, batch_size)
    loads = [s.load for s in states]
    best, best_key = None, _key(loads)
    for target, out, back, at_source, at_target in shapes:
        after = list(loads)
        after[source.index], after[target] = costs[at_source], costs[at_target]
        key = _key(after)
        if _lower(key, best_key):
            best, best_key = Change(source.index, target, out, back, costs[at_source], costs[at_target]), key
    return best


def _swappable(source: DeviceState, unit: Unit, target: DeviceState, other: Unit) -> bool:
    if unit.parent == other.parent:
        return False
    if unit.parent in target.parents or other.parent in source.parents:
        return False
    return (source.memory_bytes - unit.memory_bytes + other.memory_bytes <= source.capacity
            and target.memory_bytes - other.memory_bytes + unit.memory_bytes <= target.capacity)


def _key(loads: list[float]) -> list[float]:
    return sorted(loads, reverse=True)


def _lower(a: list[float], b: list[float]) -> bool:
    """``a`` < ``b`` lexicographically, ignoring differences under a relative tolerance."""
    tol = REL_TOL * max(1.0, abs(b[0]))
    for x, y in zip(a, b):
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False
