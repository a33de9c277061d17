"""Running pooled codes of several sets, for planners that grow sets one table at a time.

Greedy placement and the RL environment ask, for every table, "what would each device cost with
this table added?". The head's input is ``[sum / 8, mean, max, log n]`` of the set's table codes
(``cost_model.network.pooled_input``), and its first layer is linear: the sum and mean parts
are projected through it once per table (cached on the head, across placements) and kept as
running sums, so scoring D devices costs only the max part's projection and the rest of the head.

A grouped network (``cost_model.network``) keeps such running rows per op kind (precision,
optimizer) of every set, with each op's milliseconds cached, and one more row per set for the
interaction head: adding a table re-prices only its own op and the interaction.

Everything is numpy, float32, one thread: planning asks the head for a handful of rows at a
time, where a numpy call costs less than a torch call (docs/decisions.md, 32).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from autoshard.core.costing import EditBatch, Edits
from autoshard.core.types import Table
from cost_model.features import CACHED_TABLES
from cost_model.network import LOG_MS_MAX, LOG_MS_MIN, OUTPUTS, linear_scale

if TYPE_CHECKING:
    from cost_model.predictor import NeuralCostModel

TOTAL = OUTPUTS.index("total")
HALF = np.float32(0.5)


class SplitHead:
    """A head (Linear + SiLU layers) with its first layer split by the parts of its input:
    ``[sum / 8 | mean | max | log n | extra]``, each of the first three ``width`` wide, ``extra``
    the trailing inputs (the interaction head's log of the op count)."""

    def __init__(self, head: torch.nn.Sequential, width: int) -> None:
        # every weight and bias halved: a layer then gives half its pre-activation x, and SiLU is
        # x sigmoid(x) = (x / 2) (1 + tanh(x / 2)), two passes fewer (a power of two scales exactly:
        # the same numbers, in less time)
        layers = [
            (np.ascontiguousarray(m.weight.detach().float().numpy().T * HALF), m.bias.detach().float().numpy() * HALF)
            for m in head
            if isinstance(m, torch.nn.Linear)
        ]
        (first, first_bias), self.rest = layers[0], layers[1:]
        self.hidden = first.shape[1]
        self.w_sum, self.w_mean = first[:width] / np.float32(8.0), first[width : 2 * width].copy()
        self.w_max = first[2 * width : 3 * width].copy()
        self.w_log, self.first_bias = first[3 * width].copy(), first_bias
        self.w_extra = first[3 * width + 1 :].copy()
        w, b = self.rest[-1]
        self.rest[-1] = (w[:, TOTAL : TOTAL + 1].copy(), b[TOTAL : TOTAL + 1].copy())  # only the total is asked
        self._clear()

    def _clear(self) -> None:
        # every projected table is a row of three stores (row 0: zeros, "no table"); ``_projected``
        # holds each table's row and its three row views (for single lookups in hot loops)
        self._row: dict[tuple[Table, int], int] = {}
        self._projected: dict[tuple[Table, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        widths = (self.w_max.shape[0], self.hidden, self.hidden)
        self._stores = [np.zeros((256, w), dtype=np.float32) for w in widths]
        self._used = 1

    def projected(
        self,
        model: NeuralCostModel,
        table: Table,
        batch_size: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(code, its projection through the sum part, through the mean part), float32, cached."""
        found = self._projected.get((table, batch_size))
        if found is None:
            self._make_room(1)
            found = self._project(model, table, batch_size)
        return found

    def _make_room(self, count: int) -> bool:
        """Start afresh if ``count`` more tables would pass ``CACHED_TABLES``; whether it did."""
        if self._used > 1 and self._used - 1 + count > CACHED_TABLES:
            self._clear()
            return True
        return False

    def _project(
        self,
        model: NeuralCostModel,
        table: Table,
        batch_size: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = (table, batch_size)
        if self._used == len(self._stores[0]):  # grow: rows handed out before keep their values
            self._stores = [np.concatenate([a, np.zeros_like(a)]) for a in self._stores]
        code = model.code_array(table, batch_size).astype(np.float32)
        row = self._row[key] = self._used
        self._used += 1
        for store, value in zip(self._stores, (code, code @ self.w_sum, code @ self.w_mean)):
            store[row] = value
        found = self._projected[key] = tuple(store[row] for store in self._stores)  # type: ignore[assignment]
        return found

    def projected_many(
        self, model: NeuralCostModel, tables: Sequence[Table], batch_size: int, leading_none: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``projected`` of each table, stacked: (codes, sum parts, mean parts), ``[len(tables), .]``,
        after a row of zeros if ``leading_none`` (then row k + 1 is table k); the tables not
        cached yet are encoded in one call."""
        missing = [t for t in dict.fromkeys(tables) if (t, batch_size) not in self._row]
        if missing:
            if self._make_room(len(missing)):  # before, not during: the rows below must stay put
                missing = list(dict.fromkeys(tables))
            model.codes(missing, batch_size)  # one encoder call; code_array then reads its cache
            for t in missing:
                self._project(model, t, batch_size)
        rows = [self._row[(t, batch_size)] for t in tables]
        index = np.array([0, *rows] if leading_none else rows, dtype=np.int64)
        return tuple(store[index] for store in self._stores)  # type: ignore[return-value]

    def first_input(
        self,
        sums: np.ndarray,
        means: np.ndarray,
        count: np.ndarray,
        limit: int | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(the first layer's input without its max part, each set's ``linear_scale``, None when
        no set is past ``limit``) of sets with these projected sums of the sum and mean parts and
        ``count`` tables, priced linearly past ``limit`` as ``SetCostNetwork.predict_pooled`` does."""
        n = np.maximum(count, 1.0).astype(np.float32)
        if limit is None or not len(n) or n.max() <= limit:  # no set past the limit: nothing to scale
            first = self.first_bias + sums  # a new array (the inputs may be views of running sets),
            first += means / n[:, None]  # summed in the order of the scaled expression below
            first += np.log(n)[:, None] * self.w_log
            return first, None
        scale = linear_scale(n, limit)
        first = self.first_bias + sums / scale[:, None] + means / n[:, None] + np.log(n / scale)[:, None] * self.w_log
        return first.astype(np.float32), scale

    def log_total(self, first: np.ndarray, largest: np.ndarray) -> np.ndarray:
        """The head's total output from its first layer's input without the max part (``first``,
        ``[n, hidden]``, halved as the weights are) and the max-pooled codes (``largest``,
        ``[n, width]``), float64."""
        x = largest @ self.w_max
        x += first
        for w, b in self.rest:
            x *= silu_gate(x)  # x is half the pre-activation: x (1 + tanh x) is SiLU of twice x
            x = x @ w
            x += b
        return x[:, 0].astype(np.float64) * 2

    def ms(self, first: np.ndarray, largest: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
        """Total milliseconds, with each set's ``linear_scale`` (``[n]``; None: 1, no set scaled)."""
        log_ms = self.log_total(first, largest)
        if scale is not None:
            log_ms += np.log(scale)
        return np.exp(np.clip(log_ms, LOG_MS_MIN, LOG_MS_MAX))


class EditedSets:
    """Edits of fixed base sets, priced in as many batches as a caller asks
    (``NeuralCostModel.edit_scorer``; local search prices a round's moves, then its swaps' source
    sides, then their targets, on one device state): what depends only on the base sets (each
    table's place, its cost alone, the sets' costliest tables) is gathered once. An edit's cost is
    floored at the costliest table the edited set holds, as ``NeuralCostModel`` floors sets."""

    def __init__(self, model: NeuralCostModel, base_sets: Sequence[Sequence[Table]], batch_size: int) -> None:
        self.model, self.batch_size = model, batch_size
        self.sizes = [len(s) for s in base_sets]
        self.flat = [t for s in base_sets for t in s]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self._position = {id(t): i for i, t in enumerate(self.flat)}
        self.alone = model.alone_ms(self.flat, batch_size)
        self._alone_max = np.array(
            [self.alone[a:b].max(initial=0.0) for a, b in zip(self.offsets[:-1], self.offsets[1:])]
        )
        self._alone_others: np.ndarray | None = None  # per flat table: the set's costliest other table

    def positions(self, added: Sequence[Table]) -> np.ndarray | None:
        """Where each of ``added`` is in the base sets (the same objects), or None if one is not."""
        at = [self._position.get(id(t), -1) for t in added]
        return None if -1 in at else np.array(at, dtype=np.int64)

    def predict(self, edits: Edits) -> np.ndarray:
        """Each edit's total ms (0 for an empty set), floored."""
        batch = EditBatch.of(edits)
        if not len(batch):
            return np.zeros(0)
        removed = np.where(batch.removed >= 0, self.offsets[batch.base] + batch.removed, -1)
        at = self.positions(batch.added)
        cost = self._network(batch, removed, at)
        added_alone = self.alone[at] if at is not None else self.model.alone_ms(list(batch.added), self.batch_size)
        kept = self._alone_max[batch.base]
        if (removed >= 0).any():
            if self._alone_others is None:
                self._alone_others = leave_one_out_max(self.alone, self.sizes, 0.0)
            kept = np.where(removed >= 0, self._alone_others[np.maximum(removed, 0)], kept)
        return np.maximum(cost, np.maximum(kept, np.concatenate([[0.0], added_alone])[batch.add + 1]))

    def _network(self, batch: EditBatch, removed: np.ndarray, at: np.ndarray | None) -> np.ndarray:
        """The network's own ms of each edited set (before the floor); ``removed``: flat rows."""
        return self.model.grouped_edits_ms(self.flat, self.sizes, batch, removed, self.batch_size)


class SplitHeadEdits(EditedSets):
    """``EditedSets`` of an ungrouped network, on its split head: each table's code is projected
    through the sum and mean parts of the head's first layer once (cached), so an edit adds and
    subtracts projected rows, and only its max-pooled code goes through a matmul. The base sets'
    rows, sums and maxima are gathered once; an added table of the base sets (a move's, a swap's)
    reuses its rows."""

    def __init__(self, model: NeuralCostModel, base_sets: Sequence[Sequence[Table]], batch_size: int) -> None:
        super().__init__(model, base_sets, batch_size)
        head = self.head = model.split_head
        self.rows = head.projected_many(model, self.flat, batch_size, leading_none=True)  # row k + 1: flat[k]
        codes, sums, means = self.rows
        bounds = list(zip(self.offsets[:-1], self.offsets[1:]))
        self.set_sums = np.stack([sums[1 + a : 1 + b].sum(0) for a, b in bounds])
        self.set_means = np.stack([means[1 + a : 1 + b].sum(0) for a, b in bounds])
        self.set_max = np.stack([codes[1 + a : 1 + b].max(0, initial=-1e9) for a, b in bounds])
        self._others: np.ndarray | None = None  # per flat row (after a row "none"): its set's max without it

    def _network(self, batch: EditBatch, removed: np.ndarray, at: np.ndarray | None) -> np.ndarray:
        codes, sums, means = self.rows
        if at is not None:  # the added tables' rows are the base sets' (row 0: none)
            add = np.concatenate([[0], at + 1])[batch.add + 1]
            new_codes, new_sums, new_means = codes, sums, means
        else:
            add = batch.add + 1
            new_codes, new_sums, new_means = self.head.projected_many(
                self.model, list(batch.added), self.batch_size, leading_none=True
            )
        rem = removed + 1  # row 0: nothing
        has_rem, has_add = removed >= 0, batch.add >= 0
        count = np.asarray(self.sizes, dtype=np.float64)[batch.base] - has_rem + has_add
        largest = self.set_max[batch.base]
        if has_rem.any():
            if self._others is None:
                width = codes.shape[1]
                self._others = np.concatenate(
                    [np.full((1, width), -1e9, np.float32), leave_one_out_max(codes[1:], self.sizes, -1e9)]
                )
            largest = np.where(has_rem[:, None], self._others[rem], largest)
        largest = np.where(has_add[:, None], np.maximum(largest, new_codes[add]), largest).astype(np.float32)
        first, scale = self.head.first_input(
            self.set_sums[batch.base] - sums[rem] + new_sums[add],
            self.set_means[batch.base] - means[rem] + new_means[add],
            count,
            self.model.size_limit,
        )
        return np.where(count > 0, self.head.ms(first, np.ascontiguousarray(largest), scale), 0.0)


def silu_gate(half_x: np.ndarray) -> np.ndarray:
    """2 sigmoid(x) = 1 + tanh(x / 2) of ``half_x`` = x / 2, which cannot overflow: SiLU(x) is
    ``half_x`` times it. (torch's SiLU in place on the same memory is faster on large batches,
    but rounds otherwise: on 5,000 tables over 8 devices greedy placement's near-ties then went
    the other way and the plans' predicted max moved by 0.2-0.6%, for no speed measurable on the
    service's requests.)"""
    gate = np.tanh(half_x)
    gate += 1
    return gate


def leave_one_out_max(values: np.ndarray, sizes: Sequence[int], empty: float) -> np.ndarray:
    """For each row of each consecutive segment of ``values`` (``sizes`` rows each), the max of
    the segment's other rows (``empty`` for a row alone); 1-D or 2-D (rows along axis 0)."""
    out = np.full_like(values, empty)
    start = 0
    for n in sizes:
        if n > 1:
            seg = values[start : start + n]
            prefix, suffix = np.maximum.accumulate(seg), np.maximum.accumulate(seg[::-1])[::-1]
            out[start] = suffix[1]
            out[start + n - 1] = prefix[n - 2]
            out[start + 1 : start + n - 1] = np.maximum(prefix[: n - 2], suffix[2:])
        start += n
    return out


class PooledRows:
    """``num_rows`` running sets on one head: their projected sums, max-pooled codes and sizes."""

    def __init__(self, head: SplitHead, num_rows: int, width: int, limit: int | None) -> None:
        self.head, self.limit = head, limit
        self.sums = np.zeros((num_rows, head.hidden), dtype=np.float32)  # projected sums of the sum part
        self.means = np.zeros((num_rows, head.hidden), dtype=np.float32)  # projected sums of the mean part
        self.largest = np.full((num_rows, width), -1e9, dtype=np.float32)
        self.count = np.zeros(num_rows)
        self._pending: list[tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]] = []

    def first(
        self,
        rows: np.ndarray | slice,
        added: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The head's first-layer input without its max part, the max-pooled codes and the
        ``linear_scale`` of sets ``rows`` (with ``added``'s code and projections, if given),
        priced linearly past the size limit as ``SetCostNetwork.predict_pooled`` does."""
        self._fold()
        count, largest, sums, means = self.count[rows], self.largest[rows], self.sums[rows], self.means[rows]
        if added is not None:
            code, s, m = added
            count, largest, sums, means = count + 1, np.maximum(largest, code), sums + s, means + m
        first, scale = self.head.first_input(sums, means, count, self.limit)
        return first, largest, scale

    def ms(
        self, rows: np.ndarray | slice, added: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    ) -> np.ndarray:
        return self.head.ms(*self.first(rows, added))

    def add(self, row: int, projected: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Add a table's code and projections to set ``row``, when next asked: a placement whose
        steps' costs all come from another one's (``StepCosts``: the policy's argmax rollout
        after greedy placement) never asks, and its additions cost nothing."""
        self._pending.append((row, projected))

    def _fold(self) -> None:
        for row, (code, s, m) in self._pending:  # in order: the sums are those of adding them one by one
            self.sums[row] += s
            self.means[row] += m
            np.maximum(self.largest[row], code, out=self.largest[row])
            self.count[row] += 1
        self._pending.clear()


class SetAccumulator:
    """``num_sets`` sets, initially empty, on one cost model and batch size. Costs are floored
    at each set's costliest table alone, as ``NeuralCostModel`` floors them."""

    def __init__(self, model: NeuralCostModel, num_sets: int, batch_size: int) -> None:
        self.model, self.batch_size, self.num_sets = model, batch_size, num_sets
        self.width, self.limit = model.network.config.table_code, model.size_limit
        self.op_head = model.split_head
        self.kinds: dict[Hashable, int] = {}
        self.ops: list[PooledRows] = []  # per op kind: that op of every set
        self.op_ms = np.zeros((num_sets, 0))  # grouped: each set's ops' milliseconds (0 for an op it does not run)
        inter = model.interaction_split_head
        self.whole = None if inter is None else PooledRows(inter, num_sets, self.width, self.limit)
        self.count = np.zeros(num_sets)
        self.floor = np.zeros(num_sets)

    def _kind(self, table: Table) -> int:
        if self.whole is None and self.ops:  # ungrouped: every table is one op's
            return 0
        key = self.model.op_keys([table])[0]
        kind = self.kinds.get(key)
        if kind is None:
            kind = self.kinds[key] = len(self.ops)
            self.ops.append(PooledRows(self.op_head, self.num_sets, self.width, self.limit))
            self.op_ms = np.concatenate([self.op_ms, np.zeros((self.num_sets, 1))], axis=1)
        return kind

    def _total(
        self, rows: np.ndarray | slice, op_sum: np.ndarray, num_ops: np.ndarray, added: Table | None = None
    ) -> np.ndarray:
        """The ops' summed milliseconds times the interaction factor (grouped networks)."""
        if self.whole is None:
            return op_sum
        projected = None if added is None else self.whole.head.projected(self.model, added, self.batch_size)
        first, largest, _ = self.whole.first(rows, projected)
        ops = np.maximum(num_ops, 1.0)
        first = first + (np.log(ops)[:, None] * self.whole.head.w_extra[0]).astype(np.float32)
        factor = (1 - 1 / ops) * self.whole.head.log_total(first, largest)
        return np.exp(np.clip(np.log(np.maximum(op_sum, 1e-30)) + factor, LOG_MS_MIN, LOG_MS_MAX))

    def costs(self) -> np.ndarray:
        if self.whole is None:  # ungrouped: the one op is the set
            cost = self.ops[0].ms(slice(None)) if self.ops else np.zeros(self.num_sets)
        else:
            cost = self._total(slice(None), self.op_ms.sum(1), (self.op_ms > 0).sum(1).astype(float))
        return np.where(self.count > 0, np.maximum(cost, self.floor), 0.0)

    def costs_if_added(self, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
        """Each set's total ms with ``table`` added (only the sets ``rows``, if given)."""
        kind = self._kind(table)
        at = slice(None) if rows is None else np.asarray(rows, dtype=np.int64)
        cost = self.ops[kind].ms(at, self.op_head.projected(self.model, table, self.batch_size))
        if self.whole is not None:  # grouped: the other ops' cached milliseconds, then the interaction
            op_ms = self.op_ms[at]
            num_ops = (op_ms > 0).sum(1) + (op_ms[:, kind] == 0)
            cost = self._total(at, op_ms.sum(1) - op_ms[:, kind] + cost, num_ops.astype(float), table)
        return np.maximum(cost, np.maximum(self.floor[at], self._alone(table)))

    def _alone(self, table: Table) -> float:
        return self.model.alone_one(table, self.batch_size)

    def add(self, set_index: int, table: Table) -> None:
        kind = self._kind(table)
        self.ops[kind].add(set_index, self.op_head.projected(self.model, table, self.batch_size))
        if self.whole is not None:  # grouped: keep the op's milliseconds and the whole set's codes
            self.op_ms[set_index, kind] = self.ops[kind].ms(np.array([set_index]))[0]
            self.whole.add(set_index, self.whole.head.projected(self.model, table, self.batch_size))
        self.count[set_index] += 1
        self.floor[set_index] = max(self.floor[set_index], self._alone(table))
