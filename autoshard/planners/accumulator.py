"""Sets that grow one table at a time, scored by a cost model: what greedy placement asks.

A cost model may offer its own fast ``accumulator(num_sets, batch_size)`` (the neural model
does: running pooled codes and a numpy head); any other ``CostModel`` gets ``RebuildingAccumulator``,
which asks ``predict_edits`` / ``predict_many``.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from autoshard.planners.local_search import predict_edits
from autoshard.types import CostModel, Table


class Accumulator(Protocol):
    def costs_if_added(self, table: Table) -> Sequence[float]: ...

    def add(self, set_index: int, table: Table) -> None: ...


class RebuildingAccumulator:
    def __init__(self, cost_model: CostModel, num_sets: int, batch_size: int) -> None:
        self.cost_model, self.batch_size = cost_model, batch_size
        self.sets: list[list[Table]] = [[] for _ in range(num_sets)]

    def costs_if_added(self, table: Table) -> list[float]:
        edits = [(i, None, table) for i in range(len(self.sets))]
        return predict_edits(self.cost_model, self.sets, edits, self.batch_size)

    def add(self, set_index: int, table: Table) -> None:
        self.sets[set_index].append(table)


def make_accumulator(cost_model: CostModel, num_sets: int, batch_size: int) -> Accumulator:
    own = getattr(cost_model, "accumulator", None)
    return own(num_sets, batch_size) if own is not None else RebuildingAccumulator(cost_model, num_sets, batch_size)
