"""What placements of the same units in the same order share: the cost model's answers at each
history of choices (``StepCosts``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np


class StepCosts:
    """Costs-if-added that placements of the same units, in the same order, on the same cost
    model have computed, by the choices made before the step. Placements that made the same
    choices hold the same sets, so the current unit costs the same on each device: the greedy
    placements of one task (the split caps' retries, the heuristics scored together) ask the cost
    model once for a step they share. A history
    is a node of a tree of choices (0: none yet), so two histories never share an entry."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, int], int] = {}  # (history, device chosen) -> the history after it
        self._costs: dict[int, dict[int, float]] = {}  # history -> {device: cost with the next unit added}
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

    def once(self, key: Hashable, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """A fact about the state at a history (``key`` names the fact and the history), computed
        once (read-only): the devices allowed (state, mask rules and the choosers' ``limit``).
        Placements that share the step compute it once."""
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = compute()
            found.flags.writeable = False
        return found
