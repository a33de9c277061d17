"""Memory-aware placement shared by every planner: the steppable ``PlacementState`` (devices,
running costs, memory, the feasibility mask), the greedy placement loop over it, and the final
frozen ``ShardingPlan``. Greedy planners, local search and the RL environment all use it. Which
split cap to plan is ``split_caps``'s; the packing lookahead's first-fit check is ``packing``'s."""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

import numpy as np

from autoshard.costing import Accumulator, predict_nonempty
from autoshard.errors import PlannerError
from autoshard.planners.feasibility import check_feasible, no_room_error
from autoshard.planners.packing import packable_many
from autoshard.planners.splitting import split_units
from autoshard.planners.units import CostFn, Unit
from autoshard.types import CostModel, DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload


@dataclass(slots=True)
class DeviceState:
    """One device while planning: its units, memory used, and load (a proxy sum, or the cost
    model's prediction for the whole set, depending on the planner)."""

    index: int
    capacity: int
    units: list[Unit] = field(default_factory=list)
    memory_bytes: int = 0
    load: float = 0.0
    parents: set[str] = field(default_factory=set)

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.memory_bytes

    @property
    def tables(self) -> list[Table]:
        return [u.table for u in self.units]

    def accepts(self, unit: Unit) -> bool:
        """Room for ``unit``, and no other shard of its table here."""
        return unit.parent not in self.parents and unit.memory_bytes <= self.free_bytes

    def add(self, unit: Unit, load: float) -> None:
        self.units.append(unit)
        self.memory_bytes += unit.memory_bytes
        self.parents.add(unit.parent)
        self.load = load

    def remove(self, position: int, load: float) -> Unit:
        unit = self.units.pop(position)
        self.memory_bytes -= unit.memory_bytes
        self.parents.discard(unit.parent)
        self.load = load
        return unit

    def copy(self) -> DeviceState:
        """A copy that changes independently of this one (the units themselves are frozen)."""
        return DeviceState(self.index, self.capacity, list(self.units), self.memory_bytes, self.load, set(self.parents))


class StepCosts:
    """Costs-if-added that placements of the same units, in the same order, on the same cost
    model have computed, by the choices made before the step. Placements that made the same
    choices hold the same sets, so the current unit costs the same on each device: greedy
    placement, the policy's argmax rollout (the clone of greedy) and its sampled rollouts
    (until they first draw otherwise) ask the cost model once for a step they share. A history
    is a node of a tree of choices (0: none yet), so two histories never share an entry."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, int], int] = {}  # (history, device chosen) -> the history after it
        self._costs: dict[int, dict[int, float]] = {}  # history -> {device: cost with the next unit added}
        self._scores: dict[int, dict[Hashable, np.ndarray]] = {}  # history -> {(policy, rows): scores}
        self._known: dict[Hashable, np.ndarray] = {}  # (fact, history, ...) -> its value (``once``)
        self._rooms: dict[int, dict[int, bool]] = {}  # history -> {free room: packable after taking the unit}

    def after(self, history: int, device: int) -> int:
        """The history of a placement at ``history`` that puts its current unit on ``device``."""
        return self._children.setdefault((history, device), len(self._children) + 1)

    def at(self, history: int) -> dict[int, float]:
        """The costs computed at ``history``, by device: the one dict every placement at that
        history reads and adds to."""
        return self._costs.setdefault(history, {})

    def rooms(self, history: int) -> dict[int, bool]:
        """The packing lookahead's answers at ``history``, by a device's free room: whether the
        units after the current one still pack once a device with that much room takes it (the
        one dict every placement at that history reads and adds to)."""
        return self._rooms.setdefault(history, {})

    def scores(self, history: int) -> dict[Hashable, np.ndarray]:
        """A policy's scores of candidate devices computed at ``history``, by (policy, rows): the
        policy's argmax rollout and its sampled rollouts alike so far observe the same state."""
        return self._scores.setdefault(history, {})

    def once(self, key: Hashable, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """A fact about the state at a history (``key`` names the fact and the history), computed
        once (read-only): the devices allowed (state, mask rules and the choosers' ``limit``).
        Greedy placement, the policy's argmax rollout (the same steps under an extra rule) and its
        sampled rollouts compute the steps they share once."""
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = compute()
            found.flags.writeable = False
        return found


class PlacementState:
    """A placement in progress: units are placed in the given order, one ``apply(device)`` each.

    ``mask()`` says which devices may take the current unit: those with room and no other shard
    of its table; then, where it leaves a choice, those holding fewer than ``max_units_per_device``
    units; then, with ``lookahead``, those that leave the remaining units packable (first-fit
    decreasing; FFD is not exact, so if no device passes, every device left stays allowed;
    ``drop_lookahead`` turns it off for the remaining steps).
    With an ``accumulator`` a device's load is the cost model's prediction for its whole set,
    floored while placing so that an addition never lowers it (a model that says otherwise is
    wrong there, and the choices must not seek it out) and, once the last unit is placed, its
    set's prediction itself, as any plan of those sets is scored; without, the sum of its units'
    own costs (proxy planners). With ``steps``, costs-if-added
    come from, and go to, placements of the same units that made the same choices
    (``StepCosts``): the same numbers, asked of the model once.
    """

    def __init__(self, units: Sequence[Unit], topology: Topology, accumulator: Accumulator | None = None,
                 lookahead: bool = False, max_units_per_device: int | None = None,
                 steps: StepCosts | None = None) -> None:
        self.units, self.topology = list(units), topology
        self.devices = [DeviceState(d, topology.device_memory_bytes) for d in range(topology.num_devices)]
        self.accumulator, self.lookahead, self.max_units_per_device = accumulator, lookahead, max_units_per_device
        self._capped = False  # some device holds ``max_units_per_device`` units (until then the cap masks nothing)
        self.dropped_lookahead = False
        self.position = 0
        self.free = np.full(topology.num_devices, topology.device_memory_bytes, dtype=np.int64)
        self.count = np.zeros(topology.num_devices, dtype=np.int64)
        self.loads = np.zeros(topology.num_devices)
        self._rest = sorted(u.memory_bytes for u in self.units)  # ascending: units not yet placed
        self.remaining_cost = float(sum(u.cost for u in self.units))  # of the units not yet placed
        self.cost_bound = cost_bound(self.units, topology.num_devices)
        self.remaining_bytes = int(sum(u.memory_bytes for u in self.units))
        self._placed_parents: set[str] = set()
        self._if_added: np.ndarray | None = None
        self.steps, self.history = steps, 0
        self._partial: dict[int, float] = {} if steps is None else steps.at(0)  # costs if added, by device
        self._rooms: dict[int, bool] = {} if steps is None else steps.rooms(0)  # the lookahead's, by free room
        self.scope: int | None = None  # the ``limit`` of the last ``allowed``

    @property
    def done(self) -> bool:
        return self.position >= len(self.units)

    @property
    def alike_key(self) -> tuple | None:
        """Equal for placements alike so far: the same choices from the same start in one
        ``StepCosts``, under the same mask rules (so their states and masks are the same);
        ``None`` outside one."""
        return None if self.steps is None else (id(self.steps), self.history, self.lookahead, self.max_units_per_device)

    @property
    def current(self) -> Unit:
        return self.units[self.position]

    def room(self) -> np.ndarray:
        """Devices with room for the current unit and no other shard of its table."""
        unit = self.current
        ok = self.free >= unit.memory_bytes
        if unit.parent in self._placed_parents:  # another shard of its table is placed: not there
            for d in ok.nonzero()[0]:
                if unit.parent in self.devices[d].parents:
                    ok[d] = False
        return ok

    def drop_lookahead(self) -> None:
        """No packing lookahead for the remaining steps (``place`` past its deadline)."""
        self.lookahead, self.dropped_lookahead = False, self.dropped_lookahead or self.lookahead

    def mask(self) -> np.ndarray:
        """Devices the current unit may go to (see the class docstring)."""
        ok = np.zeros(len(self.devices), dtype=bool)
        ok[self._allowed(None)] = True
        return ok

    def allowed(self, limit: int | None = None) -> np.ndarray:
        """Indices of the devices ``mask`` allows. With ``limit``, only as many as a chooser of
        the ``limit`` ``candidates`` needs: the allowed devices in order of load (ties: lowest
        index) until ``limit`` of them (of empty devices only the first, as ``candidates``), so
        the packing lookahead checks those and no more; their ``candidates`` are the mask's.
        Once for placements alike so far (``StepCosts``; kept as indices)."""
        self.scope = limit
        key = self.alike_key
        if key is None:
            return self._allowed(limit)
        assert self.steps is not None
        return self.steps.once(("allowed", key, limit), lambda: self._allowed(limit))

    def _allowed(self, limit: int | None) -> np.ndarray:
        """``allowed``, computed."""
        open_, check = self._open()
        if not check:
            return open_
        chunk, walk = self._first_chunk(open_, limit)
        if limit is None:
            safe = open_[self._first_fit_after(chunk)]
            return safe if len(safe) else open_
        at, found = limit, 0
        passing: list[int] = []
        while len(chunk):
            ok = chunk[self._first_fit_after(chunk)]
            passing += ok.tolist()
            found += int((self.count[ok] > 0).sum())
            if found >= limit:
                break
            chunk, at = walk[at:2 * at], 2 * at
        return np.sort(np.array(passing, dtype=np.int64)) if passing else open_

    def _open(self) -> tuple[np.ndarray, bool]:
        """The devices with room for the current unit (under the unit cap, where it leaves a
        choice), and whether the packing lookahead must check them."""
        ok = self.room()
        if self._capped and ok.sum() > 1:
            capped = ok & (self.count < self.max_units_per_device)
            ok = capped if capped.any() else ok
        open_ = ok.nonzero()[0]
        return open_, self.lookahead and len(open_) > 1 and not self._rest_packs_anywhere()

    def _first_chunk(self, open_: np.ndarray, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        """The devices the lookahead checks first, and the loaded ones in order of load (the rest of
        its walk). Without ``limit``, every open device at once. With it: ``candidates`` keeps one
        empty device, the first (all have the same room), and the least loaded of the others, so the
        lookahead checks those in order of load until ``limit`` pass, in chunks that double (each
        chunk's rooms in one first-fit pass), the empty one with the first."""
        if limit is None:
            return open_, open_[:0]
        empty, loaded = open_[self.count[open_] == 0], open_[self.count[open_] > 0]
        walk = loaded[np.argsort(self.loads[loaded], kind="stable")]
        return np.concatenate([empty[:1], walk[:limit]]), walk

    def _first_fit_after(self, devices: np.ndarray | None = None) -> np.ndarray:
        """For each of ``devices`` (default: every device): would the units after the current one
        still pack by first-fit decreasing if it took the current one (False where it has no
        room)? Devices with as much room left leave the same bins (FFD sorts them), so each free
        room is checked once per step, and once for placements at the same history
        (``StepCosts.rooms``)."""
        free = self.free if devices is None else self.free[devices]
        fits = free >= self.current.memory_bytes
        unknown = self._unknown_rooms(free[fits])
        if len(unknown):
            self._rooms.update(zip(unknown.tolist(), self._packable_at(unknown).tolist()))
        known = self._rooms
        return np.array([f and known[r] for f, r in zip(fits.tolist(), free.tolist())], dtype=bool)

    def _unknown_rooms(self, rooms: np.ndarray) -> np.ndarray:
        """The distinct ``rooms`` whose lookahead answer this step does not know yet."""
        known = self._rooms
        return np.array([r for r in np.unique(rooms).tolist() if r not in known], dtype=np.int64)

    def _rest_packs_anywhere(self) -> bool:
        """FFD's first check for every device at once: the units after the current one pack
        wherever it goes (room beyond the largest of them covers their total, less the current
        unit's size at most)."""
        return self._largest_and_spare()[1] >= self.remaining_bytes  # spare - size >= the rest's total

    def _largest_and_spare(self) -> tuple[int, int]:
        """The largest unit not yet placed, the current one aside (0 if none), and the devices'
        room beyond it, summed (infinite with no unit after the current one)."""
        rest, size = self._rest, self.current.memory_bytes
        if len(rest) <= 1:
            return 0, np.iinfo(np.int64).max
        largest = rest[-1] if bisect.bisect_left(rest, size) != len(rest) - 1 else rest[-2]
        return largest, int(np.maximum(self.free - largest, 0).sum())

    def _packable_at(self, rooms: np.ndarray) -> np.ndarray:
        """For each free room (of devices with room for the current unit): do the units after it
        still pack once a device with that room takes it? O(D) from running totals; first-fit
        decreasing only for rooms the quick test cannot clear."""
        ok = self._quick_packable(rooms)
        failing = (~ok).nonzero()[0]
        if len(failing):  # first-fit decreasing, all rooms at once
            ok[failing] = packable_many(self._sizes_after(), self._bins_taking(rooms[failing]))
        return ok

    def _quick_packable(self, rooms: np.ndarray) -> np.ndarray:
        """``_packable_at``'s quick test: True where the units after the current one surely pack
        once a device with that room takes it (room beyond the largest of them covers their total)."""
        size = self.current.memory_bytes
        largest, spare = self._largest_and_spare()
        if spare >= self.remaining_bytes:  # ``_rest_packs_anywhere``
            return np.ones(len(rooms), dtype=bool)
        total = self.remaining_bytes - size  # room beyond the largest item must cover it
        return spare - np.maximum(rooms - largest, 0) + np.maximum(rooms - size - largest, 0) >= total

    def _sizes_after(self) -> list[int]:
        """The sizes of the units after the current one, largest first (first-fit's items)."""
        rest, at = self._rest, bisect.bisect_left(self._rest, self.current.memory_bytes)  # its own entry, left out
        return (rest[:at] + rest[at + 1:])[::-1]

    def _bins_taking(self, rooms: np.ndarray) -> np.ndarray:
        """Per room, every device's free bytes once a device with that room takes the current unit."""
        values, first = np.unique(self.free, return_index=True)  # a device of each free room
        taking = first[np.searchsorted(values, rooms)]
        free = np.tile(self.free, (len(taking), 1))
        free[np.arange(len(taking)), taking] -= self.current.memory_bytes
        return free

    def costs_if_added(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The predicted cost of every device (or of the devices ``rows``, in that order) with
        the current unit added (needs an accumulator); never below the device's cost now, since
        a unit only adds work (a cost model that says otherwise is wrong there, and a search
        would seek those places out)."""
        assert self.accumulator is not None, "costs_if_added needs a cost model's accumulator"
        if self._if_added is None:
            if rows is not None and self._partial and all(r in self._partial for r in rows.tolist()):
                return np.array([self._partial[r] for r in rows.tolist()])  # primed, or scored before
            if rows is not None and len(rows) < len(self.devices):
                costs = np.maximum(self.accumulator.costs_if_added(self.current.table, rows), self.loads[rows])
                self._partial.update(zip(rows.tolist(), costs.tolist()))
                return costs
            if len(self._partial) == len(self.devices):  # every device known (``steps``)
                self._if_added = np.array([self._partial[d] for d in range(len(self.devices))])
            else:
                self._if_added = np.maximum(self.accumulator.costs_if_added(self.current.table), self.loads)
                self._partial.update(enumerate(self._if_added.tolist()))
        return self._if_added if rows is None else self._if_added[rows]

    def knows(self, rows: np.ndarray) -> bool:
        """Whether the current unit's costs on the devices ``rows`` are known already."""
        return all(r in self._partial for r in rows.tolist())

    def prime(self, rows: np.ndarray, costs: np.ndarray) -> None:
        """Record the current unit's predicted costs on the devices ``rows``, scored elsewhere
        (``place_together`` scores several placements in one call); ``costs_if_added`` on those
        devices then answers from them."""
        self._partial.update(zip(rows.tolist(), np.maximum(costs, self.loads[rows]).tolist()))

    def apply(self, device: int) -> None:
        """Place the current unit on ``device`` (which must have room) and move to the next."""
        self._require_room(device)
        unit, state = self.current, self.devices[device]
        if self.accumulator is None:
            load = state.load + unit.cost
        elif self._if_added is None and device in self._partial:  # scored among a few candidates
            load = self._partial[device]
        else:
            load = float(self.costs_if_added(np.array([device]))[0])
        self._place(device, load)

    def preplace(self, devices: Sequence[int]) -> None:
        """Place the next ``len(devices)`` units on these devices without scoring each step (units
        that stay where a plan had them); the loads are priced once, after the last."""
        self.steps = None  # loads priced otherwise than step by step: not another placement's history
        for device in devices:
            self._require_room(device)
            self._place(device, self.devices[device].load + self.current.cost)
        if not self.done:  # else the last unit's placing priced them
            self._price_sets()

    def _price_sets(self) -> None:
        """Every device's load: the cost model's prediction for its whole set (one call)."""
        if self.accumulator is not None:
            self.loads[:] = np.where(self.count > 0, self.accumulator.costs(), 0.0)
            for state, load in zip(self.devices, self.loads.tolist()):
                state.load = load

    def _require_room(self, device: int) -> None:
        if not self.devices[device].accepts(self.current):
            raise ValueError(f"device {device} cannot take {self.current.name!r}")

    def _place(self, device: int, load: float) -> None:
        unit, state = self.current, self.devices[device]
        if self.accumulator is not None:
            self.accumulator.add(device, unit.table)
        state.add(unit, load)
        self.free[device] -= unit.memory_bytes
        self.count[device] += 1
        if self.max_units_per_device is not None and self.count[device] >= self.max_units_per_device:
            self._capped = True
        self.loads[device] = load
        del self._rest[bisect.bisect_left(self._rest, unit.memory_bytes)]
        self.remaining_cost -= unit.cost
        self.remaining_bytes -= unit.memory_bytes
        self._placed_parents.add(unit.parent)
        self.position += 1
        if self.done:  # the loads were floored step by step (an addition never lowers a load, the
            self._price_sets()  # choices' guard); the finished plan's are its sets' predictions
        self._if_added = None
        if self.steps is None:
            self._partial, self._rooms = {}, {}
        else:
            self.history = self.steps.after(self.history, device)
            self._partial, self._rooms = self.steps.at(self.history), self.steps.rooms(self.history)


def cost_bound(units: Sequence[Unit], num_devices: int) -> float:
    """No placement's max is lower than the even share of the units' own costs, or the largest
    (and never 0: observations divide by it)."""
    costs = [u.cost for u in units]
    return max(sum(costs) / num_devices, max(costs, default=0.0), 1e-9)


Assignment = tuple[tuple[str, ...], ...]
"""Each device's unit names, in its order: placements with the same assignment are the same
placement (local search from them ends in the same place)."""


def assignment(devices: Sequence[DeviceState]) -> Assignment:
    return tuple(tuple(u.name for u in d.units) for d in devices)


def max_load(states: Sequence[DeviceState]) -> float:
    return max(s.load for s in states)


Chooser = Callable[[PlacementState, np.ndarray], int]
"""(the placement, indices of the devices allowed for its current unit) -> the device to take it."""


def prepare_units(workload: Workload, topology: Topology, cost_fn: CostFn, allow_split: bool,
                  shard_memory_limit: int | None = None, max_ways: int | None = None) -> list[Unit]:
    """The workload's tables as units with their costs alone, split column-wise if allowed
    (shards at most ``shard_memory_limit`` bytes if they can be, default the device memory);
    raises ``PlannerError`` if they cannot fit."""
    return TaskUnits(workload, topology, cost_fn)(allow_split, shard_memory_limit, max_ways)


class TaskUnits:
    """``prepare_units`` of one task under one cost function, each split (whether to split, the
    shard memory limit, the cap on ways) computed once and handed out as a new list: a planner
    asks for the units of every split cap to choose the caps it plans, then places them, and the
    planners of a task that share a ``SharedWork`` ask alike (``units_of``)."""

    def __init__(self, workload: Workload, topology: Topology, cost_fn: CostFn) -> None:
        self.workload, self.topology, self.cost_fn = workload, topology, cost_fn
        self._whole: list[Unit] | None = None
        self._found: dict[tuple[bool, int, int | None], list[Unit] | PlannerError] = {}

    def __call__(self, allow_split: bool, shard_memory_limit: int | None = None,
                 max_ways: int | None = None) -> list[Unit]:
        limit = self.topology.device_memory_bytes if shard_memory_limit is None else shard_memory_limit
        key = (allow_split, limit, max_ways)
        found = self._found.get(key)
        if found is None:
            try:
                found = self._prepared(allow_split, limit, max_ways)
            except PlannerError as error:
                found = error
            self._found[key] = found
        if isinstance(found, PlannerError):
            raise found
        return list(found)

    def _prepared(self, allow_split: bool, limit: int, max_ways: int | None) -> list[Unit]:
        if self._whole is None:  # every split starts from the whole tables: costed once
            tables = self.workload.tables
            self._whole = [Unit.of(TableShard(t), c) for t, c in zip(tables, self.cost_fn(tables))]
        units = self._whole
        if allow_split and self.topology.num_devices > 1:
            units = split_units(units, self.cost_fn, self.topology, limit, max_ways)
        check_feasible(units, self.topology, allow_split)
        return units

    def at_cap(self, cap: int | None) -> list[Unit]:
        """The units that split cap ``cap`` (None: no split) starts placement from
        (``place_workload``'s first try, before any retry with smaller shards)."""
        return self(cap is not None, max_ways=cap)


def place_workload(units: TaskUnits, allow_split: bool, choose: Chooser,
                   start: Callable[[list[Unit]], PlacementState], order_by_cost: bool = True,
                   max_ways: int | None = None, scope: int | None = None,
                   deadline: Deadline | None = None) -> PlacementState:
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


def by_cost(units: Sequence[Unit]) -> list[Unit]:
    """Heaviest first; ties by name."""
    return sorted(units, key=lambda u: (-u.cost, u.name))


def place(state: PlacementState, choose: Chooser, scope: int | None = None,
          deadline: Deadline | None = None) -> PlacementState:
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


SET_SIZE_HEADROOM = 1.25
"""``unit_cap``'s headroom over the even share, for planners that place by the cost model."""


def unit_cap(cost_model: CostModel, num_units: int, num_devices: int,
             headroom: float = SET_SIZE_HEADROOM) -> int | None:
    """The extrapolation guard: at most this many units on a device. The cost model's largest
    fitted set, unless the task needs more for an even spread (then ``headroom`` x the even share:
    every planner must extrapolate there, so none may concentrate units further). Measured: on 400
    tables over 4 devices cost_greedy without it put 246 on one device, which this host's profile
    priced below the others and which measured the slowest, 1.20x the best heuristic's plan; the
    agent's plan under it measured 0.87x that one (docs/evaluation.md, "Many tables a device")."""
    if cost_model.max_set_size is None:
        return None
    return max(cost_model.max_set_size, math.ceil(headroom * num_units / num_devices))


CANDIDATES = 16
"""Scoring planners (cost_greedy, rl) score at most this many devices per unit: the least
loaded of those allowed. A min-max placement almost never wants a unit on a device with many
others below it, and the cost model's head runs once per scored device, so scoring all 128 of a
128-device task costs 8x the time. On 200-1,000 tables over 16-128 devices, scoring 8, 16, 32 or
every device gave placements of the same predicted max (``docs/planners.md``)."""


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


def place_together(states: Sequence[PlacementState], choose: BatchChooser, shared: Accumulator,
                   limit: int = CANDIDATES, deadline: Deadline | None = None) -> list[PlacementState | None]:
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
                states[k].prime(rows[k], costs[at:at + len(rows[k])])
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
    jobs: list[tuple[PlacementState, np.ndarray, np.ndarray]] = []
    seen: set[int] = set()
    for state in states:
        if state.done or id(state._rooms) in seen or not state.lookahead or state._rest_packs_anywhere():
            continue  # done, checked with an alike placement, or nothing for the lookahead to check (cheap first)
        seen.add(id(state._rooms))
        open_, check = state._open()
        if not check:
            continue
        chunk, _ = state._first_chunk(open_, limit)
        free = state.free[chunk]
        rooms = state._unknown_rooms(free[free >= state.current.memory_bytes])
        if not len(rooms):
            continue
        ok = state._quick_packable(rooms)
        state._rooms.update(zip(rooms[ok].tolist(), [True] * int(ok.sum())))
        if not ok.all():
            jobs.append((state, rooms[~ok], state._bins_taking(rooms[~ok])))
    if not jobs:
        return
    assert len({(s.position, len(s._rest)) for s, _, _ in jobs}) == 1, "one step of one unit order"
    answers = packable_many(jobs[0][0]._sizes_after(), np.concatenate([bins for _, _, bins in jobs])).tolist()
    at = 0
    for state, rooms, _ in jobs:
        state._rooms.update(zip(rooms.tolist(), answers[at:at + len(rooms)]))
        at += len(rooms)


def first_alike(states: Sequence[PlacementState], indices: Sequence[int]) -> list[int]:
    """For each of ``indices``, the first of them whose placement is alike it so far
    (``PlacementState.alike_key``; itself when there is none)."""
    first: dict[object, int] = {}
    return [first.setdefault(k if (key := states[k].alike_key) is None else key, k) for k in indices]


def cheapest_after(state: PlacementState, allowed: np.ndarray) -> int:
    """Of the ``candidates``, the device whose predicted cost with the unit added is lowest
    (ties: lowest index)."""
    allowed = candidates(state, allowed)
    return int(allowed[np.argmin(state.costs_if_added(allowed))])


def build_plan(name: str, states: Sequence[DeviceState], started: float, batch_size: int,
               cost_model: CostModel | None = None, partial: bool = False, reused_s: float = 0.0) -> ShardingPlan:
    """The frozen plan. Device costs come from ``cost_model`` (one batched call), or, without
    one, are the states' loads; ``plan_time_s`` runs from ``started`` (``time.perf_counter``);
    ``reused_s``: the planning time of placements it took from other planners."""
    costs = ([s.load for s in states] if cost_model is None
             else predict_nonempty(cost_model, [s.tables for s in states], batch_size))
    devices = tuple(DevicePlan(tuple(u.shard for u in s.units), float(c)) for s, c in zip(states, costs))
    return ShardingPlan(name, devices, time.perf_counter() - started, partial=partial, reused_s=reused_s)


@dataclass(slots=True)
class Deadline:
    """A searching planner's time budget: ``expired`` once ``budget_s`` has passed since
    ``started`` (never, without a budget); ``hit`` records that the search was cut short."""

    started: float
    budget_s: float | None = None
    hit: bool = False

    @property
    def expired(self) -> bool:
        if self.budget_s is not None and time.perf_counter() - self.started > self.budget_s:
            self.hit = True
        return self.hit
