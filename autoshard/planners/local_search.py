"""Local search on a placement: moves and swaps off the most loaded device, judged by a cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from autoshard.costing import Edit
from autoshard.planners.placement import Deadline, DeviceState
from autoshard.planners.units import Unit
from autoshard.types import CostModel

REL_TOL = 1e-3  # changes under 0.1% of the max are noise next to the cost model's error


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


def improve(states: list[DeviceState], cost_model: CostModel, batch_size: int, max_rounds: int = 50,
            deadline: Deadline | None = None) -> int:
    """Apply the best move off the max-cost device, or when no move helps the best swap, while
    it lowers the max by more than 0.1% (the best: the lowest costs sorted descending).
    ``states[*].load`` must hold predicted costs; they are kept up to date. Memory and the
    one-shard-per-device rule hold throughout. One batched model call per round; returns the
    number of changes applied. Stops early once ``deadline`` expires."""
    for done in range(max_rounds):
        if deadline is not None and deadline.expired:
            return done
        # moves are ~10x fewer than swaps: try swaps only when no move helps
        change = (_best_change(states, cost_model, batch_size, swaps=False)
                  or _best_change(states, cost_model, batch_size, swaps=True))
        if change is None:
            return done
        source, target = states[change.source], states[change.target]
        unit = source.remove(change.out, change.source_cost)
        if change.back is not None:
            source.add(target.remove(change.back, change.target_cost), change.source_cost)
        target.add(unit, change.target_cost)
    return max_rounds


def _best_change(states: Sequence[DeviceState], cost_model: CostModel, batch_size: int,
                 swaps: bool) -> Change | None:
    source = max(states, key=lambda s: (s.load, -s.index))
    targets = [s for s in states if s is not source]
    edits: list[Edit] = []  # (device, position removed, table added): see autoshard.costing.Edit
    shapes: list[tuple[int, int, int | None, int, int]] = []  # target, out, back, source edit, target edit
    for i, unit in enumerate(source.units):
        if not swaps:
            edits.append((source.index, i, None))
            rest_at = len(edits) - 1
        for target in targets:
            if not swaps and target.accepts(unit):
                edits.append((target.index, None, unit.table))
                shapes.append((target.index, i, None, rest_at, len(edits) - 1))
            for j, other in enumerate(target.units if swaps else ()):
                if _swappable(source, unit, target, other):
                    edits += [(source.index, i, other.table), (target.index, j, unit.table)]
                    shapes.append((target.index, i, j, len(edits) - 2, len(edits) - 1))
    if not shapes:
        return None
    costs = cost_model.predict_edits([s.tables for s in states], edits, batch_size)
    loads = [s.load for s in states]
    bar = max(loads) * (1 - REL_TOL)  # a change must lower the max by more than the tolerance
    best, best_key = None, None
    for target, out, back, at_source, at_target in shapes:
        after = list(loads)
        after[source.index], after[target] = costs[at_source], costs[at_target]
        key = _key(after)
        if key[0] < bar and (best_key is None or key < best_key):
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
