"""The packing lookahead of a placement in progress (``PackingLookahead``): would the units after
the current one still pack, by first-fit decreasing (``packing``), once a device with a given
free room takes it? ``PlacementState``'s mask asks it at every step."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np

from autoshard.planners.packing import packable_many


class PackingLookahead:
    """The sizes of a placement's units not yet placed (the current one included), and the
    current step's answers by free room (``answers``: a device's free bytes -> whether the units
    after the current one still pack once a device with that much room takes it). Devices with
    as much room left leave the same bins (first-fit decreasing sorts them), so each room is
    checked once per step, and once for placements at the same history, which share ``answers``
    (``StepCosts.rooms``). ``free``: every device's free bytes now; ``size``: the current unit's."""

    def __init__(self, sizes: Iterable[int], answers: dict[int, bool]) -> None:
        self._rest = sorted(sizes)  # ascending
        self.remaining_bytes = int(sum(self._rest))
        self.answers = answers

    def __len__(self) -> int:
        """How many units are not yet placed."""
        return len(self._rest)

    def placed(self, size: int, answers: dict[int, bool]) -> None:
        """The current unit, of ``size`` bytes, is placed; ``answers``: the next step's."""
        del self._rest[bisect.bisect_left(self._rest, size)]
        self.remaining_bytes -= size
        self.answers = answers

    def add(self, sizes: Iterable[int]) -> None:
        """Units that join those not yet placed (a table taken as column shards)."""
        for size in sizes:
            bisect.insort(self._rest, size)
            self.remaining_bytes += size
        self.answers = {}

    def fits_after(self, free: np.ndarray, rooms: np.ndarray, size: int) -> np.ndarray:
        """For devices with free bytes ``rooms``: would the units after the current one still
        pack if it took the current one (False where it has no room)? Answers the rooms not
        known yet and keeps them (``answers``)."""
        fits = rooms >= size
        unknown = self.unknown(rooms[fits])
        if len(unknown):
            self.answers.update(zip(unknown.tolist(), self.packable(free, size, unknown).tolist()))
        known = self.answers
        return np.array([f and known[r] for f, r in zip(fits.tolist(), rooms.tolist())], dtype=bool)

    def unknown(self, rooms: np.ndarray) -> np.ndarray:
        """The distinct ``rooms`` whose answer this step does not know yet."""
        known = self.answers
        return np.array([r for r in np.unique(rooms).tolist() if r not in known], dtype=np.int64)

    def packs_anywhere(self, free: np.ndarray, size: int) -> bool:
        """First-fit's first check for every device at once: the units after the current one pack
        wherever it goes (room beyond the largest of them covers their total, less the current
        unit's size at most)."""
        return self._largest_and_spare(free, size)[1] >= self.remaining_bytes  # spare - size >= the rest's total

    def packable(self, free: np.ndarray, size: int, rooms: np.ndarray) -> np.ndarray:
        """For each free room (of devices with room for the current unit): do the units after it
        still pack once a device with that room takes it? O(D) from running totals; first-fit
        decreasing only for rooms the quick test cannot clear."""
        ok = self.surely_packable(free, size, rooms)
        failing = (~ok).nonzero()[0]
        if len(failing):  # first-fit decreasing, all rooms at once
            ok[failing] = packable_many(self.sizes_after(size), bins_taking(free, size, rooms[failing]))
        return ok

    def surely_packable(self, free: np.ndarray, size: int, rooms: np.ndarray) -> np.ndarray:
        """``packable``'s quick test: True where the units after the current one surely pack once
        a device with that room takes it (room beyond the largest of them covers their total)."""
        largest, spare = self._largest_and_spare(free, size)
        if spare >= self.remaining_bytes:  # ``packs_anywhere``
            return np.ones(len(rooms), dtype=bool)
        total = self.remaining_bytes - size  # room beyond the largest item must cover it
        return spare - np.maximum(rooms - largest, 0) + np.maximum(rooms - size - largest, 0) >= total

    def sizes_after(self, size: int) -> list[int]:
        """The sizes of the units after the current one (of ``size`` bytes), largest first
        (first-fit's items)."""
        rest, at = self._rest, bisect.bisect_left(self._rest, size)  # the current unit's own entry, left out
        return (rest[:at] + rest[at + 1 :])[::-1]

    def _largest_and_spare(self, free: np.ndarray, size: int) -> tuple[int, int]:
        """The largest unit not yet placed, the current one aside (0 if none), and the devices'
        room beyond it, summed (infinite with no unit after the current one)."""
        rest = self._rest
        if len(rest) <= 1:
            return 0, np.iinfo(np.int64).max
        largest = rest[-1] if bisect.bisect_left(rest, size) != len(rest) - 1 else rest[-2]
        return largest, int(np.maximum(free - largest, 0).sum())


def bins_taking(free: np.ndarray, size: int, rooms: np.ndarray) -> np.ndarray:
    """Per room, every device's free bytes (``free``) once a device with that room takes a unit
    of ``size`` bytes."""
    values, first = np.unique(free, return_index=True)  # a device of each free room
    taking = first[np.searchsorted(values, rooms)]
    bins = np.tile(free, (len(taking), 1))
    bins[np.arange(len(taking)), taking] -= size
    return bins
