"""A placement in progress, stepped unit by unit: ``PlacementState`` (its devices, their running
loads and free memory, and which devices may take the current unit), and the extrapolation guard
on units per device (``unit_cap``). What it asks at each step comes from its collaborators: the
cost model's costs-if-added (``added_costs``) and the packing lookahead (``packing_lookahead``).
The loop that steps it is ``place_loop``'s; the choosers, ``choosers``'; the devices are
``device_state``'s; what placements of one unit order share, ``step_costs``'s."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autoshard.core.costing import Accumulator
from autoshard.core.types import CostModel, Topology
from autoshard.planners.added_costs import AddedCosts
from autoshard.planners.device_state import DeviceState
from autoshard.planners.packing_lookahead import PackingLookahead
from autoshard.planners.placement_rules import PlacementRules
from autoshard.planners.placement_unit import Unit
from autoshard.planners.step_costs import StepCosts


class PlacementState:
    """A placement in progress: units are placed in the given order, one ``apply(device)`` each.

    ``mask()`` says which devices may take the current unit: those with room and no other shard
    of its table; then, where it leaves a choice, those holding fewer than ``max_units_per_device``
    units; then, with ``lookahead``, those that leave the remaining units packable (``packing``:
    first-fit decreasing; FFD is not exact, so if no device passes, every device left stays
    allowed; ``drop_lookahead`` turns it off for the remaining steps).
    With an ``accumulator`` a device's load is the cost model's prediction for its whole set,
    floored while placing so that an addition never lowers it (``added``: a model that says
    otherwise is wrong there, and the choices must not seek it out) and, once the last unit is
    placed, its set's prediction itself, as any plan of those sets is scored; without, the sum of
    its units' own costs (proxy planners). With ``steps``, costs-if-added and the lookahead's
    answers come from, and go to, placements of the same units that made the same choices
    (``StepCosts``): the same numbers, computed once. ``fixed``: units already on their devices
    (rank, unit) before the first step, the shards of sharding options that fix their devices
    (``sharding_options``); they take memory and load like placed units. ``rules``: the
    workload's placement constraints, applied by ``room`` (``placement_rules``). ``held``: a state
    of no units of its own that holds these ``fixed`` units on this topology with an accumulator
    of the same model and batch (``TaskCache.held``): its devices, free memory, counts and loads
    are copied instead of putting each unit on its device again (the accumulator takes them as
    without it: the same numbers). The placements of a task's split caps and their retries all
    start there.
    """

    def __init__(
        self,
        units: Sequence[Unit],
        topology: Topology,
        accumulator: Accumulator | None = None,
        lookahead: bool = False,
        max_units_per_device: int | None = None,
        steps: StepCosts | None = None,
        fixed: Sequence[tuple[int, Unit]] = (),
        rules: PlacementRules | None = None,
        held: PlacementState | None = None,
    ) -> None:
        self.rules = rules if rules else None
        self.units, self.topology = list(units), topology
        self.devices = [DeviceState(d, cap) for d, cap in enumerate(topology.device_memory_bytes_all)]
        self.accumulator, self.lookahead, self.max_units_per_device = accumulator, lookahead, max_units_per_device
        self._capped = False  # some device holds ``max_units_per_device`` units (until then the cap masks nothing)
        self.dropped_lookahead = False
        self.position = 0
        self.free = np.array(topology.device_memory_bytes_all, dtype=np.int64)  # each device's own cap
        self.count = np.zeros(topology.num_devices, dtype=np.int64)
        self.loads = np.zeros(topology.num_devices)
        self.remaining_cost = float(sum(u.cost for u in self.units))  # of the units not yet placed
        self.cost_bound = cost_bound(self.units, topology.num_devices)
        self._placed_parents: set[str] = set()
        self._fixed = fixed  # what ``held`` must have held
        if fixed:
            self._hold(fixed, held)
        self.steps, self.history = steps, 0
        self.packing = PackingLookahead((u.memory_bytes for u in self.units), {} if steps is None else steps.rooms(0))
        table = self.units[0].table if self.units else None
        self.added = None if accumulator is None else AddedCosts(accumulator, self.loads, table, self._known(0))
        self.scope: int | None = None  # the ``limit`` of the last ``allowed``

    @property
    def done(self) -> bool:
        return self.position >= len(self.units)

    @property
    def current(self) -> Unit:
        return self.units[self.position]

    @property
    def remaining_bytes(self) -> int:
        """The memory of the units not yet placed."""
        return self.packing.remaining_bytes

    @property
    def alike_key(self) -> tuple | None:
        """Equal for placements alike so far: the same choices from the same start in one
        ``StepCosts``, under the same mask rules (so their states and masks are the same);
        ``None`` outside one."""
        return None if self.steps is None else (id(self.steps), self.history, self.lookahead, self.max_units_per_device)

    def room(self) -> np.ndarray:
        """Devices with room for the current unit and no other shard of its table."""
        unit = self.current
        ok = self.free >= unit.memory_bytes
        if unit.parent in self._placed_parents:  # another shard of its table is placed: not there
            for d in ok.nonzero()[0]:
                if unit.parent in self.devices[d].parents:
                    ok[d] = False
        if self.rules is not None and unit.parent in self.rules.tables:
            ok &= self.rules.mask(unit.parent, self.devices)
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
            safe = open_[self.fits_after(chunk)]
            return safe if len(safe) else open_
        at, found = limit, 0
        passing: list[int] = []
        while len(chunk):
            ok = chunk[self.fits_after(chunk)]
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
        if self._capped and self.max_units_per_device is not None and ok.sum() > 1:
            capped = ok & (self.count < self.max_units_per_device)
            ok = capped if capped.any() else ok
        open_ = ok.nonzero()[0]
        check = (
            self.lookahead and len(open_) > 1 and not self.packing.packs_anywhere(self.free, self.current.memory_bytes)
        )
        return open_, check

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

    def fits_after(self, devices: np.ndarray | None = None) -> np.ndarray:
        """For each of ``devices`` (default: every device): would the units after the current one
        still pack by first-fit decreasing if it took the current one (False where it has no
        room)? (``PackingLookahead.fits_after``.)"""
        rooms = self.free if devices is None else self.free[devices]
        return self.packing.fits_after(self.free, rooms, self.current.memory_bytes)

    def rooms_to_check(self, limit: int | None) -> np.ndarray:
        """The free rooms of the devices ``allowed(limit)`` checks first whose packing answers
        this step does not know yet (none where the lookahead has nothing to check)."""
        open_, check = self._open()
        if not check:
            return np.zeros(0, dtype=np.int64)
        chunk, _ = self._first_chunk(open_, limit)
        rooms = self.free[chunk]
        return self.packing.unknown(rooms[rooms >= self.current.memory_bytes])

    def costs_if_added(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The predicted cost of every device (or of the devices ``rows``, in that order) with
        the current unit added (needs an accumulator; ``AddedCosts``)."""
        assert self.added is not None, "costs_if_added needs a cost model's accumulator"
        return self.added.of(rows)

    def apply(self, device: int) -> None:
        """Place the current unit on ``device`` (which must have room) and move to the next."""
        self._require_room(device)
        unit, state = self.current, self.devices[device]
        load = state.load + unit.cost if self.added is None else self.added.on(device)
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

    def _hold(self, fixed: Sequence[tuple[int, Unit]], held: PlacementState | None = None) -> None:
        """Put the ``fixed`` units on their devices and price the devices' sets (a spread variant
        fixes thousands of shards on a 128-device task: each device takes its own at once). With
        ``held`` (the class docstring), the devices are copied from it and only the accumulator
        takes the units."""
        add_all = getattr(self.accumulator, "add_all", None)  # one call for all (TorchRec's sums)
        if add_all is not None:
            add_all([device for device, _ in fixed], [unit.table for _, unit in fixed])
        elif self.accumulator is not None:
            for device, unit in fixed:
                self.accumulator.add(device, unit.table)
        if held is not None and held._fixed is fixed:
            if held.units or held.topology != self.topology or (held.accumulator is None) != (self.accumulator is None):
                raise ValueError("held: a state of no units of its own on this topology, of this accumulator's model")
            self.devices = [d.copy() for d in held.devices]
            self.free[:], self.count[:], self.loads[:] = held.free, held.count, held.loads
            self._placed_parents = set(held._placed_parents)
        else:
            by_device: dict[int, list[Unit]] = {}
            for device, unit in fixed:
                by_device.setdefault(device, []).append(unit)
            for device, units in by_device.items():
                state = self.devices[device]
                state.extend(units, sum((u.cost for u in units), state.load))
                self.free[device] -= sum(u.memory_bytes for u in units)
                self.count[device] += len(units)
                self._placed_parents.update(state.parents)
            self.loads[:] = [d.load for d in self.devices]
        self._price_sets()
        if self.max_units_per_device is not None and (self.count >= self.max_units_per_device).any():
            self._capped = True

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
        self.remaining_cost -= unit.cost
        self._placed_parents.add(unit.parent)
        self.position += 1
        if self.done:  # the loads were floored step by step (an addition never lowers a load, the
            self._price_sets()  # choices' guard); the finished plan's are its sets' predictions
        if self.steps is not None:
            self.history = self.steps.after(self.history, device)
        self.packing.placed(unit.memory_bytes, {} if self.steps is None else self.steps.rooms(self.history))
        if self.added is not None:
            self.added.next_step(None if self.done else self.current.table, self._known(self.history))

    def _known(self, history: int) -> dict[int, float]:
        """The costs-if-added known at ``history`` (shared in ``steps``; else a new dict)."""
        return {} if self.steps is None else self.steps.at(history)


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
