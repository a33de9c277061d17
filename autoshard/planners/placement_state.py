"""The steppable placement every planner shares: ``PlacementState`` (devices, running costs,
memory, the feasibility mask and its packing lookahead), the extrapolation guard on units per
device (``unit_cap``), and the lookahead's answers for placements stepped side by side. The loop
that steps it is ``place_loop``'s; the choosers, ``choosers``'; the devices are
``device_state``'s; what placements of one unit order share, ``step_costs``'s; which split cap to
plan, ``split_cap_choice``'s; the first-fit check, ``packing``'s."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from autoshard.core.costing import Accumulator
from autoshard.core.types import CostModel, Topology
from autoshard.planners.device_state import DeviceState
from autoshard.planners.packing import packable_many
from autoshard.planners.placement_unit import Unit
from autoshard.planners.step_costs import StepCosts


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

    def __init__(
        self,
        units: Sequence[Unit],
        topology: Topology,
        accumulator: Accumulator | None = None,
        lookahead: bool = False,
        max_units_per_device: int | None = None,
        steps: StepCosts | None = None,
    ) -> None:
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
            chunk, at = walk[at : 2 * at], 2 * at
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
        return (rest[:at] + rest[at + 1 :])[::-1]

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


SET_SIZE_HEADROOM = 1.25
"""``unit_cap``'s headroom over the even share, for planners that place by the cost model."""


def unit_cap(
    cost_model: CostModel, num_units: int, num_devices: int, headroom: float = SET_SIZE_HEADROOM
) -> int | None:
    """The extrapolation guard: at most this many units on a device. The cost model's largest
    fitted set, unless the task needs more for an even spread (then ``headroom`` x the even share:
    every planner must extrapolate there, so none may concentrate units further). Without it, a
    planner piles units on the device the model prices cheapest past its trained sets, which can
    measure the slowest (docs/decisions.md, 22)."""
    if cost_model.max_set_size is None:
        return None
    return max(cost_model.max_set_size, math.ceil(headroom * num_units / num_devices))


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
        state._rooms.update(zip(rooms.tolist(), answers[at : at + len(rooms)]))
        at += len(rooms)


def first_alike(states: Sequence[PlacementState], indices: Sequence[int]) -> list[int]:
    """For each of ``indices``, the first of them whose placement is alike it so far
    (``PlacementState.alike_key``; itself when there is none)."""
    first: dict[object, int] = {}
    return [first.setdefault(k if (key := states[k].alike_key) is None else key, k) for k in indices]
