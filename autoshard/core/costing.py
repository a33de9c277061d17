"""Cost models, declared: what every cost model answers, and the fallbacks for the incremental parts.

Planners ask a cost model three kinds of question:

- ``predict_many(sets, batch)``: each set's milliseconds (the one method a model must write);
- ``accumulator(num_sets, batch)``: sets that grow one table at a time, scored before each
  addition (greedy placement and the RL environment ask "what would each device cost with this
  table added?" once per table);
- ``predict_edits(base_sets, edits, batch)``: sets with one table removed and/or one added
  (local search scores whole neighbourhoods of moves and swaps at once); ``edit_scorer(base_sets,
  batch)`` answers several such batches of one set of base sets.

``SetCostModel`` answers the last two by rebuilding the sets and calling ``predict_many``; a
model with a faster way (the neural model pools running codes) overrides them. Every cost model
in the project derives from it, so nothing has to be discovered at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from autoshard.core.types import CostModel, Table, Topology, Workload

Edit = tuple[int, int | None, Table | None]
"""``(b, r, t)``: set ``b`` without its table at position ``r`` (if not None), with ``t`` added (if not None)."""


@dataclass(frozen=True, slots=True)
class EditBatch:
    """Many edits as arrays (what local search generates and the neural model scores, without a
    Python tuple per edit): edit ``e`` is set ``base[e]`` without its table at position
    ``removed[e]`` (-1: none), with ``added[add[e]]`` (-1: none)."""

    base: np.ndarray  # int64, [edits]
    removed: np.ndarray  # int64, [edits]
    add: np.ndarray  # int64, [edits]
    added: tuple[Table, ...]

    def __len__(self) -> int:
        return len(self.base)

    @classmethod
    def of(cls, edits: Edits) -> EditBatch:
        if isinstance(edits, EditBatch):
            return edits
        distinct: dict[Table, int] = {}  # the added tables are few (a workload's), the edits many
        add = [-1 if t is None else distinct.setdefault(t, len(distinct)) for _, _, t in edits]
        removed = [-1 if r is None else r for _, r, _ in edits]
        return cls(
            np.array([b for b, _, _ in edits], dtype=np.int64),
            np.array(removed, dtype=np.int64),
            np.array(add, dtype=np.int64),
            tuple(distinct),
        )

    def take(self, index: np.ndarray) -> EditBatch:
        """The edits at ``index``, in that order."""
        return EditBatch(self.base[index], self.removed[index], self.add[index], self.added)

    def edits(self) -> list[Edit]:
        return [
            (int(b), None if r < 0 else int(r), None if a < 0 else self.added[a])
            for b, r, a in zip(self.base.tolist(), self.removed.tolist(), self.add.tolist())
        ]


Edits = EditBatch | Sequence[Edit]
"""Edits to score, as tuples or as one ``EditBatch``."""


class EditScorer(Protocol):
    """Edits of fixed base sets, priced in as many batches as the caller asks."""

    def predict(self, edits: Edits) -> np.ndarray: ...


class RebuildingEdits:
    """The fallback ``EditScorer``: each batch is one ``predict_edits`` call."""

    def __init__(self, cost_model: SetCostModel, base_sets: Sequence[Sequence[Table]], batch_size: int) -> None:
        self.cost_model, self.base_sets, self.batch_size = cost_model, base_sets, batch_size

    def predict(self, edits: Edits) -> np.ndarray:
        return np.asarray(self.cost_model.predict_edits(self.base_sets, edits, self.batch_size), dtype=np.float64)


class Accumulator(Protocol):
    """``num_sets`` sets, initially empty, that grow one table at a time."""

    def costs(self) -> np.ndarray: ...

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        """Each set's cost with ``table`` added (only the sets ``rows``, in that order, if given)."""
        ...

    def add(self, set_index: int, table: Table) -> None: ...


class SetCostModel:
    """Base of every cost model: ``predict`` and the incremental questions, from ``predict_many``.

    ``max_set_size`` is the largest set the model was fitted on (``None``: no known limit);
    planners that could exploit extrapolation (the RL agent) keep devices within it."""

    max_set_size: int | None = None
    dmp_world_size: int | None = None
    """Set where the model prices each shard at the bags DMP gives it on a world of that many
    ranks from the per-rank batch (``autoshard.core.dmp_batch``); ``None``: it prices every table
    at the batch it is given."""
    batch_free = False
    """True for a model that prices a table without the batch (a proxy per sample): it is asked
    as it is, a replica's share of the samples being in its ``as_table``."""

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        raise NotImplementedError

    def predict(self, tables: Sequence[Table], batch_size: int) -> float:
        return self.predict_many([tables], batch_size)[0]

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        """Warnings for inputs the model extrapolates to; ``InputError`` for inputs it cannot
        answer. A model that records no training ranges has nothing to say."""
        return ()

    def accumulator(self, num_sets: int, batch_size: int) -> Accumulator:
        return RebuildingAccumulator(self, num_sets, batch_size)

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int) -> EditScorer:
        """Edits of ``base_sets``, priced in batches (local search prices several per state)."""
        return RebuildingEdits(self, base_sets, batch_size)

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]:
        if isinstance(edits, EditBatch):
            edits = edits.edits()
        sets = [
            [t for k, t in enumerate(base_sets[b]) if k != r] + ([add] if add is not None else [])
            for b, r, add in edits
        ]
        return predict_nonempty(self, sets, batch_size)


def predict_nonempty(cost_model: CostModel, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
    """One batched ``predict_many`` call; an empty set costs 0.0 without asking the model."""
    out = [0.0] * len(table_sets)
    asked = [i for i, tables in enumerate(table_sets) if tables]
    if asked:
        for i, cost in zip(asked, cost_model.predict_many([list(table_sets[i]) for i in asked], batch_size)):
            out[i] = float(cost)
    return out


class RebuildingAccumulator:
    """The fallback accumulator: keeps the sets and asks ``predict_edits`` for every device."""

    def __init__(self, cost_model: SetCostModel, num_sets: int, batch_size: int) -> None:
        self.cost_model, self.batch_size = cost_model, batch_size
        self.sets: list[list[Table]] = [[] for _ in range(num_sets)]

    def costs(self) -> np.ndarray:
        return np.asarray(predict_nonempty(self.cost_model, self.sets, self.batch_size))

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        edits = [(int(i), None, table) for i in (range(len(self.sets)) if rows is None else rows)]
        return np.asarray(self.cost_model.predict_edits(self.sets, edits, self.batch_size))

    def add(self, set_index: int, table: Table) -> None:
        self.sets[set_index].append(table)


def bound_to_task(cost_model: CostModel | None, workload: Workload, topology: Topology) -> CostModel | None:
    """``cost_model`` as it prices ``workload`` on ``topology``. A model whose prices depend on
    the task beyond its shards and batch (TorchRec's estimator: each shard's table, the world and
    local world size) offers ``for_task(workload, topology)``; any other model prices each shard
    at the bags DMP gives it from the workload's per-rank batch (``dmp_batch.at_dmp_batch``)."""
    from autoshard.core.dmp_batch import at_dmp_batch  # it builds on this module

    if cost_model is None:
        return None
    bind = getattr(cost_model, "for_task", None)
    return at_dmp_batch(cost_model, topology.num_devices) if bind is None else bind(workload, topology)


def is_exact(cost_model: object) -> bool:
    """Whether ``cost_model``'s prices are the objective itself, with no model error (TorchRec's
    estimator judging plans for TorchRec): planners then take any lower price (no departure
    margin) and even out plateaus of equal maxima, which a learned model's error makes unsafe
    (docs/decisions.md, 15). A model says so with ``exact = True``."""
    return bool(getattr(cost_model, "exact", False))
