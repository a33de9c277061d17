"""What a placement in progress asks the cost model at each step: the current unit's predicted
cost on each device with it added (``AddedCosts``)."""

from __future__ import annotations

import numpy as np

from autoshard.core.costing import Accumulator
from autoshard.core.types import Table


class AddedCosts:
    """The current unit's (``table``'s) predicted cost on each device with it added, from the
    ``accumulator`` of the devices' sets, and never below the device's load now (``loads``, the
    placement's own array), since a unit only adds work (a cost model that says otherwise is wrong
    there, and a search would seek those places out). Asked for a few devices, it asks the model
    for those alone. What it learns goes to ``known`` (device -> cost), which placements at the
    same history share (``StepCosts.at``): what one asked, the others read."""

    def __init__(self, accumulator: Accumulator, loads: np.ndarray, table: Table | None, known: dict[int, float]):
        self.accumulator, self.loads = accumulator, loads
        self.table, self.known = table, known
        self._every: np.ndarray | None = None  # every device's, once asked for all

    def next_step(self, table: Table | None, known: dict[int, float]) -> None:
        """The next unit's step: its ``table`` (None past the last), and what is known of it."""
        self.table, self.known, self._every = table, known, None

    def of(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The costs on every device, or on the devices ``rows``, in that order."""
        assert self.table is not None, "no unit left to place"
        known = self.known
        if self._every is None:
            if rows is not None and known and all(r in known for r in rows.tolist()):
                return np.array([known[r] for r in rows.tolist()])  # primed, or scored before
            if rows is not None and len(rows) < len(self.loads):
                costs = np.maximum(self.accumulator.costs_if_added(self.table, rows), self.loads[rows])
                known.update(zip(rows.tolist(), costs.tolist()))
                return costs
            if len(known) == len(self.loads):  # every device known (``StepCosts``)
                self._every = np.array([known[d] for d in range(len(self.loads))])
            else:
                self._every = np.maximum(self.accumulator.costs_if_added(self.table), self.loads)
                known.update(enumerate(self._every.tolist()))
        return self._every if rows is None else self._every[rows]

    def on(self, device: int) -> float:
        """The cost on ``device``: the load it takes with the unit."""
        if self._every is None and device in self.known:  # scored among a few candidates
            return self.known[device]
        return float(self.of(np.array([device]))[0])
