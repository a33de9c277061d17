"""Local search on a placement: moves and swaps off the most loaded device, judged by a cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

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
    it lowers the max by more than 0.1% (the best: the lowest new max, then the lowest max and
    sum of the two devices it changes). Swap partners: least loaded first, up to ``SWAPS``.
    ``states[*].load`` must hold predicted costs; they are kept up to date. Memory and the
    one-shard-per-device rule hold throughout. One batched model call per round; returns the
    number of changes applied. Stops early once ``deadline`` expires."""
    bound = lower_bound(states)
    for done in range(max_rounds):
        if deadline is not None and deadline.expired:
            return done
        if max(s.load for s in states) <= bound * (1 + REL_TOL):
            return done  # at the lower bound: nothing can lower the max
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


SWAPS = 2048
"""A round scores at most about this many swaps: partners are taken least loaded first until the
neighbourhood holds that many (moves, one per unit and device, are always all scored). On a
128-device task a heavy device's 8 units x 127 devices x 8 units would be 8,000 swaps, 8x the
time for the same plans; a device with one giant table still tries it with every partner."""


Neighbourhood = tuple[list[Edit], list[tuple[int, int]], list[tuple[int, int, int | None]]]
"""The edits to score (set ``k`` is ``[source, *targets][k]``; see ``autoshard.costing.Edit``),
per change the positions of its source and target edits, and per change (target k, unit out,
unit back or None)."""


def _moves(source: DeviceState, targets: Sequence[DeviceState]) -> Neighbourhood:
    edits: list[Edit] = []
    pairs: list[tuple[int, int]] = []
    shapes: list[tuple[int, int, int | None]] = []
    for i, unit in enumerate(source.units):
        edits.append((0, i, None))  # the source without the unit: shared by its moves
        rest_at = len(edits) - 1
        for k, target in enumerate(targets, start=1):
            if target.accepts(unit):
                edits.append((k, None, unit.table))
                pairs.append((rest_at, len(edits) - 1))
                shapes.append((k, i, None))
    return edits, pairs, shapes


def _swaps(source: DeviceState, targets: Sequence[DeviceState]) -> Neighbourhood:
    edits: list[Edit] = []
    pairs: list[tuple[int, int]] = []
    shapes: list[tuple[int, int, int | None]] = []
    for i, unit in enumerate(source.units):
        share = SWAPS * (i + 1) / len(source.units)  # each unit gets its share of the budget
        for k, target in enumerate(targets, start=1):
            if len(shapes) >= share:
                break
            for j, other in enumerate(target.units):
                if _swappable(source, unit, target, other):
                    edits += [(0, i, other.table), (k, j, unit.table)]
                    pairs.append((len(edits) - 2, len(edits) - 1))
                    shapes.append((k, i, j))
    return edits, pairs, shapes


def _best_change(states: Sequence[DeviceState], cost_model: CostModel, batch_size: int,
                 swaps: bool) -> Change | None:
    source = max(states, key=lambda s: (s.load, -s.index))
    others = [s for s in states if s is not source]
    targets = sorted(others, key=lambda s: (s.load, s.index))  # partners: least loaded first
    involved = [source, *targets]  # set k of the edits is involved[k]
    edits, edits_at, shapes = (_swaps if swaps else _moves)(source, targets)
    if not shapes:
        return None
    costs = np.asarray(cost_model.predict_edits([s.tables for s in involved], edits, batch_size))
    at = np.asarray(edits_at)
    source_after, target_after = costs[at[:, 0]], costs[at[:, 1]]
    target_index = np.array([involved[k].index for k, _, _ in shapes])
    # the max of the devices a change leaves alone: the highest other load, or the next one
    # where the change's target is the highest
    loads = np.array([s.load for s in others])
    order = np.argsort(-loads, kind="stable")
    top = loads[order[0]]
    runner_up = loads[order[1]] if len(order) > 1 else 0.0
    untouched = np.where(target_index == others[order[0]].index, runner_up, top)
    pair_max = np.maximum(source_after, target_after)
    new_max = np.maximum(pair_max, untouched)
    bar = source.load * (1 - REL_TOL)  # a change must lower the max by more than the tolerance
    helps = np.flatnonzero(new_max < bar)
    if not len(helps):
        return None
    # the best: lowest new max, then lowest pair max, then lowest pair sum; ties to the first generated
    best = helps[np.lexsort((source_after[helps] + target_after[helps], pair_max[helps], new_max[helps]))[0]]
    k, out, back = shapes[best]
    return Change(source.index, involved[k].index, out, back, float(source_after[best]), float(target_after[best]))


def lower_bound(states: Sequence[DeviceState]) -> float:
    """No placement of these units has a lower max: a device costs at least its costliest unit
    alone (the cost model's floor, ``cost_model.predictor``), and every unit is on some device."""
    return max((u.cost for s in states for u in s.units), default=0.0)


def _swappable(source: DeviceState, unit: Unit, target: DeviceState, other: Unit) -> bool:
    if unit.parent == other.parent:
        return False
    if unit.parent in target.parents or other.parent in source.parents:
        return False
    return (source.memory_bytes - unit.memory_bytes + other.memory_bytes <= source.capacity
            and target.memory_bytes - other.memory_bytes + unit.memory_bytes <= target.capacity)
