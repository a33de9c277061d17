"""Local search on a placement: moves and swaps off the most loaded device, judged by a cost model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.core.costing import EditBatch, EditScorer
from autoshard.core.types import CostModel
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState

REL_TOL = 1e-3  # changes under 0.1% of the max are noise next to the cost model's error
MAX_ROUNDS = 50  # rounds of local search at most: cost_greedy's, the rl planners' and a re-plan's


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
    lowers_max: bool = True  # else (``improve(even_out=True)``) it only takes the max device below the max


def improve(
    states: list[DeviceState],
    cost_model: CostModel,
    batch_size: int,
    max_rounds: int = MAX_ROUNDS,
    deadline: Deadline | None = None,
    even_out: bool = False,
    max_units: int | None = None,
) -> int:
    """Apply the best move off the max-cost device, or when no move helps the best swap, while
    it lowers the max by more than 0.1% (the best: the lowest new max, then the lowest max and
    sum of the two devices it changes). Swap partners: least loaded first, up to ``SWAPS``.
    ``states[*].load`` must hold predicted costs; they are kept up to date. Memory and the
    one-shard-per-device rule hold throughout. A round prices its neighbourhood in batches on one
    ``edit_scorer`` of the devices' sets (the moves; then the swaps' source sides, and their
    target sides only where the source side helps); returns the number of changes applied.
    Stops early once ``deadline`` expires. ``max_units``: no move may leave a device holding more
    units (the extrapolation guard).

    ``even_out``: where no change lowers the max (another device is as loaded), take the best
    one that leaves both devices it touches below it, so that a later round can lower the max
    (the sorted device costs still fall with every change); swaps then up to ``PLATEAU_SWAPS``.
    Re-planning uses it; cost_greedy does not: its predicted gains measured as losses (the
    optimizer's curse: more devices near the max; docs/decisions.md, 15)."""
    if even_out:
        return _evened_out(states, cost_model, batch_size, max_rounds, deadline)
    for done in range(max_rounds):
        if deadline is not None and deadline.expired:
            return done
        step = round_changes(states, cost_model, batch_size, max_units, per_target=False)
        if step is None:
            return done
        apply_change(states, step.changes[0])
    return max_rounds


def _evened_out(
    states: list[DeviceState], cost_model: CostModel, batch_size: int, max_rounds: int, deadline: Deadline | None
) -> int:
    """``improve(even_out=True)``."""
    bound = lower_bound(states)
    budget = SWAPS
    for done in range(max_rounds):
        if deadline is not None and deadline.expired:
            return done
        if max(s.load for s in states) <= bound * (1 + REL_TOL):
            return done  # at the lower bound: nothing can lower the max
        source, targets = _max_and_others(states)
        level = _level(source, targets)
        # set k of the edits: [source, *targets][k]
        scorer = cost_model.edit_scorer([s.tables for s in (source, *targets)], batch_size)
        # moves are ~10x fewer than swaps: price swaps only when no move lowers the max
        change = move = _best_change(source, targets, scorer, False, SWAPS, True)
        if move is None or not (move.lowers_max or level):
            swap = _best_change(source, targets, scorer, True, budget, True)
            change = swap if swap is not None and (swap.lowers_max or move is None) else move
        if change is None:
            return done
        if not change.lowers_max:
            budget = PLATEAU_SWAPS  # from the first change that only evens the top out
        apply_change(states, change)
    return max_rounds


def apply_change(states: Sequence[DeviceState], change: Change) -> None:
    """Make ``change`` on ``states`` (indexed by device), with its predicted costs."""
    source, target = states[change.source], states[change.target]
    unit = source.remove(change.out, change.source_cost)
    if change.back is not None:
        source.add(target.remove(change.back, change.target_cost), change.source_cost)
    target.add(unit, change.target_cost)


@dataclass(frozen=True, slots=True)
class Round:
    """A round of local search on a placement: its max-cost device ``source`` and, for each other
    device, the best change between the two that lowers the max, best first (the first is the one
    ``improve`` makes): moves, or swaps where no move lowers it."""

    source: int
    changes: tuple[Change, ...]


def round_changes(
    states: Sequence[DeviceState],
    cost_model: CostModel,
    batch_size: int,
    max_units: int | None = None,
    per_target: bool = True,
    even_out: bool = False,
    price: ChangePrice | None = None,
) -> Round | None:
    """``improve``'s next round with every target's best change (without ``per_target`` only the
    best; no move to a device holding ``max_units`` units already), or None where it stops: at the
    lower bound, where another device is about as loaded as the max, or where no change lowers
    the max. With ``even_out`` (``improve``'s), where no change lowers the max, the changes that
    leave both devices they touch below it (a swap's only where no move lowers the max). With
    ``price``, only the changes it prices finite, the cheapest first among those of the same new
    max (a re-plan's budget of moved shards)."""
    if max(s.load for s in states) <= lower_bound(states) * (1 + REL_TOL):
        return None
    source, targets = _max_and_others(states)
    if not even_out and _level(source, targets):
        return None
    scorer = cost_model.edit_scorer([s.tables for s in (source, *targets)], batch_size)
    found = None
    for swaps in (False, True):  # moves are ~10x fewer than swaps: swaps only where no move lowers the max
        changes = _ranked_changes(
            source, targets, scorer, swaps, even_out=even_out, per_target=per_target, max_units=max_units, price=price
        )
        if changes and (changes[0].lowers_max or found is None):
            found = Round(source.index, tuple(changes))
        if found is not None and found.changes[0].lowers_max:
            break
    return found


def _max_and_others(states: Sequence[DeviceState]) -> tuple[DeviceState, list[DeviceState]]:
    """A round's max-cost device (ties: the lowest index), and the others least loaded first."""
    source = max(states, key=lambda s: (s.load, -s.index))
    return source, sorted((s for s in states if s is not source), key=lambda s: (s.load, s.index))


def _level(source: DeviceState, targets: Sequence[DeviceState]) -> bool:
    """Two other devices are (about) as loaded as the max: no one change lowers it."""
    return len(targets) > 1 and targets[-2].load >= source.load * (1 - REL_TOL)


SWAPS = 2048
"""A round scores at most about this many swaps: partners are taken least loaded first until the
neighbourhood holds that many (moves, one per unit and device, are always all scored). On a
128-device task a heavy device's 8 units x 127 devices x 8 units would be 8,000 swaps, 8x the
time for the same plans; a device with one giant table still tries it with every partner."""

PLATEAU_SWAPS = 256
"""``improve(even_out=True)``'s swap budget once a change has only evened the top out: on 80-table
tasks it kept most of the full budget's predicted gain at under half the time."""


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    """The edits to score (set ``k`` is ``[source, *targets][k]``), and per change: where its
    source's and its target's edits are in them, its target ``k``, the unit ``out`` of the
    source and the unit ``back`` of the target (-1: a move). Changes in the order generated."""

    edits: EditBatch
    source_at: np.ndarray
    target_at: np.ndarray
    k: np.ndarray
    out: np.ndarray
    back: np.ndarray


ChangePrice = Callable[[Sequence[DeviceState], Neighbourhood], np.ndarray]
"""(a round's devices, its max-cost device first; its neighbourhood) -> each change's price (inf: not
to be made), which ranks changes of the same new max."""


def _units(states: Sequence[DeviceState], parents: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The units of ``states``, flat: their memory, their parent's id, and which of the states
    holds each (its index in ``states``)."""
    units = [u for s in states for u in s.units]
    memory = np.array([u.memory_bytes for u in units], dtype=np.int64)
    parent = np.array([parents.setdefault(u.parent, len(parents)) for u in units], dtype=np.int64)
    held = np.repeat(np.arange(len(states)), [len(s.units) for s in states])
    return memory, parent, held


def _on_targets(source: DeviceState, targets: Sequence[DeviceState], rows: np.ndarray) -> np.ndarray:
    """``[len(source.units), len(targets)]``: whether a shard of source unit i's table is on
    target k, for the units at ``rows`` (False elsewhere). Set look-ups: a 128-device task's
    targets hold thousands of spread shards that no change moves."""
    found = np.zeros((len(source.units), len(targets)), dtype=bool)
    for i in rows.tolist():
        parent = source.units[i].parent
        found[i] = [parent in t.parents for t in targets]
    return found


def _moves(source: DeviceState, targets: Sequence[DeviceState], max_units: int | None = None) -> Neighbourhood:
    """Each unit of the source to each target that accepts it (room, no shard of its table, and
    fewer than ``max_units`` units)."""
    memory = np.array([u.memory_bytes for u in source.units], dtype=np.int64)
    free = np.array([t.free_bytes for t in targets], dtype=np.int64)
    n = len(source.units)
    movable = np.array([u.movable for u in source.units], dtype=bool)
    shares = _on_targets(source, targets, np.flatnonzero(movable))  # a shard of its table is on target k
    open_ = np.array([max_units is None or len(t.units) < max_units for t in targets])
    i, k = np.nonzero((memory[:, None] <= free[None, :]) & ~shares & open_[None, :] & movable[:, None])
    removals = np.arange(n)  # edit i: the source without unit i, shared by its moves
    edits = EditBatch(
        np.concatenate([np.zeros(n, np.int64), k + 1]),
        np.concatenate([removals, np.full(len(i), -1)]),
        np.concatenate([np.full(n, -1), i]),
        tuple(source.tables),
    )
    return Neighbourhood(edits, i, n + np.arange(len(i)), k + 1, i, np.full(len(i), -1))


def _swaps(source: DeviceState, targets: Sequence[DeviceState], budget: int = SWAPS) -> Neighbourhood:
    """Unit i of the source for unit j of target k, where both fit and neither device then holds
    two shards of a table; partners least loaded first, each source unit its share of ``budget``.
    Only movable units take part: the targets' others are left out before anything is compared."""
    parents: dict[str, int] = {}
    memory, parent, _ = _units([source], parents)
    n, count = len(source.units), len(targets)
    placed = [(k, j, u) for k, t in enumerate(targets) for j, u in enumerate(t.units) if u.movable]
    t_of = np.array([k for k, _, _ in placed], dtype=np.int64)  # each movable target unit's target
    t_at = np.array([j for _, j, _ in placed], dtype=np.int64)  # and its position there
    t_memory = np.array([u.memory_bytes for _, _, u in placed], dtype=np.int64)
    t_parent = np.array([parents.setdefault(u.parent, len(parents)) for _, _, u in placed], dtype=np.int64)
    same = parent[:, None] == t_parent[None, :]
    movable = np.array([u.movable for u in source.units], dtype=bool)
    on_target = _on_targets(source, targets, np.flatnonzero(movable))[:, t_of]  # unit i's table on j's target
    on_source = np.array([u.parent in source.parents for _, _, u in placed], dtype=bool)[None, :]
    used, capacity = (
        np.array([getattr(t, a) for t in targets], dtype=np.int64)[t_of] for a in ("memory_bytes", "capacity")
    )
    ok = (
        movable[:, None]
        & ~same
        & ~on_target
        & ~on_source
        & (source.memory_bytes - memory[:, None] + t_memory[None, :] <= source.capacity)
        & (used[None, :] - t_memory[None, :] + memory[:, None] <= capacity[None, :])
    )
    per_target = np.zeros((n, count), dtype=np.int64)
    rows, cols = np.nonzero(ok)
    np.add.at(per_target, (rows, t_of[cols]), 1)
    kept = np.zeros((n, count), dtype=bool)  # the budget: targets taken in order until each unit's share
    total = 0
    for row in range(n):
        share = budget * (row + 1) / n
        before = total + np.concatenate([[0], np.cumsum(per_target[row])[:-1]])  # the total as target k is reached
        taken = int(np.searchsorted(before >= share, True))  # targets until the total reaches the share
        kept[row, :taken] = True
        total += int(per_target[row, :taken].sum())
    i, m = np.nonzero(ok & kept[:, t_of])
    k, j, swaps = t_of[m], t_at[m], len(i)
    edits = EditBatch(
        np.concatenate([np.zeros(swaps, np.int64), k + 1]),
        np.concatenate([i, j]),
        np.concatenate([n + m, i]),
        (*source.tables, *(u.table for _, _, u in placed)),
    )
    return Neighbourhood(edits, np.arange(swaps), swaps + np.arange(swaps), k + 1, i, j)


def _best_change(
    source: DeviceState,
    targets: Sequence[DeviceState],
    scorer: EditScorer,
    swaps: bool,
    budget: int = SWAPS,
    even_out: bool = False,
) -> Change | None:
    """The best move (or swap, up to ``budget``) off ``source``, the max-cost device, to one of
    ``targets``, priced by ``scorer`` (edits of the sets ``[source, *targets]``), that lowers the
    max; with ``even_out``, failing that, one that leaves both devices it touches below it."""
    best = _ranked_changes(source, targets, scorer, swaps, budget, even_out)
    return best[0] if best else None


def _ranked_changes(
    source: DeviceState,
    targets: Sequence[DeviceState],
    scorer: EditScorer,
    swaps: bool,
    budget: int = SWAPS,
    even_out: bool = False,
    per_target: bool = False,
    max_units: int | None = None,
    price: ChangePrice | None = None,
) -> list[Change]:
    """``_best_change`` as a list (empty or the best), or with ``per_target`` each target's
    best change, best first; no move to a target holding ``max_units`` units already, and with
    ``price`` only the changes it prices finite, the cheapest first among those of the same new max."""
    if not targets:
        return []
    involved = [source, *targets]  # set k of the edits is involved[k]
    near = _swaps(source, targets, budget) if swaps else _moves(source, targets, max_units)
    if not len(near.k):
        return []
    cost = allowed = None  # without a price, every change, as ranked (cost_greedy's hot path: no extra work)
    if price is not None:
        cost = price(involved, near)
        allowed = np.isfinite(cost)
        if not allowed.any():
            return []
    # the max of the devices a change leaves alone: the highest other load, or the next one
    # where the change's target is the highest
    target_index = np.array([s.index for s in involved])[near.k]
    loads = np.array([s.load for s in targets])
    order = np.argsort(-loads, kind="stable")
    top = loads[order[0]]
    runner_up = loads[order[1]] if len(order) > 1 else 0.0
    untouched = np.where(target_index == targets[order[0]].index, runner_up, top)
    bar = source.load * (1 - REL_TOL)  # a change must lower the max by more than the tolerance
    if not even_out and not (untouched < bar).any():  # another device is (about) as loaded: none can
        return []
    if swaps:  # a swap's two edits are its own: price the targets' only where the source's helps
        source_after = scorer.predict(near.edits.take(near.source_at))
        target_after = np.full(len(source_after), np.inf)
        live_mask = (source_after < bar) & ((untouched < bar) | even_out)
        live = np.flatnonzero(live_mask if allowed is None else live_mask & allowed)
        if not len(live):
            return []
        target_after[live] = scorer.predict(near.edits.take(near.target_at[live]))
    else:
        costs = scorer.predict(near.edits)
        source_after, target_after = costs[near.source_at], costs[near.target_at]
    pair_max = np.maximum(source_after, target_after)
    new_max = np.maximum(pair_max, untouched)
    helping = (pair_max if even_out else new_max) < bar
    helps = np.flatnonzero(helping if allowed is None else helping & allowed)
    if not len(helps):
        return []
    # the best: lowest new max, then lowest price, pair max, pair sum; ties to the first generated
    priced = () if cost is None else (cost[helps],)
    ranked = helps[np.lexsort((source_after[helps] + target_after[helps], pair_max[helps], *priced, new_max[helps]))]
    if per_target:  # each target's first in that order
        ranked = ranked[np.sort(np.unique(near.k[ranked], return_index=True)[1])]
    return [
        Change(
            source.index,
            involved[int(near.k[c])].index,
            int(near.out[c]),
            None if near.back[c] < 0 else int(near.back[c]),
            float(source_after[c]),
            float(target_after[c]),
            bool(new_max[c] < bar),
        )
        for c in (ranked if per_target else ranked[:1])
    ]


def lower_bound(states: Sequence[DeviceState]) -> float:
    """No placement of these units has a lower max: a device costs at least its costliest unit
    alone (the cost model's floor, ``cost_model.predictor``), and every unit is on some device."""
    return max((u.cost for s in states for u in s.units), default=0.0)
