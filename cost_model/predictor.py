"""The trained cost model behind the project's ``CostModel`` interface, built for hot loops.

Per-table codes depend on the table alone, so they are computed once per (table, batch size) and
cached; a prediction for many sets is then one pooling + one head call over a flat batch.

**The floor.** A set costs at least its costliest table alone: a device that also runs other
tables does all of that table's work and more. The network does not know this, and on a few
sets it predicts less for a giant table with company than for the giant alone. A search that
minimises the predicted max finds exactly those sets, so every prediction here is floored at the
largest single-table prediction of its set (docs/decisions.md, 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from autoshard.core.costing import EditBatch, Edits, SetCostModel
from autoshard.core.types import Table, Workload
from cost_model.accumulator import leave_one_out_max
from cost_model.features import CACHED_TABLES, FeatureCache, keys_to_fill, op_key
from cost_model.network import LOG_MS_MAX, LOG_MS_MIN, OpIndex, SetCostNetwork, pool
from cost_model.profile import DeviceProfile
from cost_model.ranges import TrainedRanges


class NeuralCostModel(SetCostModel):
    """Predicts a device's milliseconds per iteration for the set of tables it holds."""

    def __init__(
        self,
        network: SetCostNetwork,
        feature_mean: Any,
        feature_std: Any,
        profile: DeviceProfile,
        row_cap_bytes: int,
        trained_batch_size: int,
        metrics: dict[str, Any] | None = None,
        max_cached: int = CACHED_TABLES,
        ranges: TrainedRanges | None = None,
        linear_beyond: int | None = None,
    ) -> None:
        self.network = network.eval()
        self.feature_mean = torch.as_tensor(feature_mean, dtype=torch.float32)
        self.feature_std = torch.as_tensor(feature_std, dtype=torch.float32)
        self.profile, self.row_cap_bytes = profile, row_cap_bytes
        self.trained_batch_size, self.metrics = trained_batch_size, metrics or {}
        self.features = FeatureCache(row_cap_bytes, max_cached)
        self._codes: dict[tuple[Table, int], torch.Tensor] = {}
        self._code_arrays: dict[tuple[Table, int], np.ndarray] = {}
        self._alone: dict[tuple[Table, int], float] = {}
        self._split_head = self._interaction_split_head = None
        self._max_cached = max_cached
        self._ranges: TrainedRanges | None = None
        self.ranges = ranges  # what the training data covered (None: an older checkpoint)
        self.linear_beyond = linear_beyond

    @property
    def ranges(self) -> TrainedRanges | None:
        """What the training data covered (None: an older checkpoint). Tables of a pooling factor
        below its minimum are priced as at that minimum (``cost_model.features``: an upper bound,
        since fewer lookups never cost more); setting it empties the per-table caches if that
        minimum changes."""
        return self._ranges

    @ranges.setter
    def ranges(self, value: TrainedRanges | None) -> None:
        self._ranges = value
        min_pooling = None if value is None else float(value.pooling[0])
        if min_pooling != self.features.min_pooling:
            self.features.min_pooling = min_pooling
            self._codes.clear()
            self._code_arrays.clear()
            self._alone.clear()

    @property
    def max_set_size(self) -> int | None:  # type: ignore[override]
        """The largest table set of the training traces (planners' extrapolation guard)."""
        return self.ranges.tables_per_set[1] if self.ranges is not None else None

    @property
    def size_limit(self) -> int | None:
        """Sets larger than this are priced linearly in their size (``SetCostNetwork.predict_pooled``):
        ``linear_beyond`` if set, else the largest training set."""
        return self.linear_beyond if self.linear_beyond is not None else self.max_set_size

    def check_workload(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        """Raise ``InputError`` for tables this model cannot answer (a precision or optimizer it
        never saw); return warnings for mild extrapolation (see ``cost_model.ranges``)."""
        if self.ranges is None:
            return (
                "this cost model records no trained ranges, so inputs outside its training data are not "
                "detected; re-save it with cost_model.checkpoint.add_trained_ranges",
            )
        return self.ranges.check(workload, max_tables_per_device)

    def check_tables(self, tables: Sequence[Table], noun: str = "shard") -> tuple[str, ...]:
        """``check_workload`` for the tables a plan puts on devices, e.g. the ``as_table`` of its
        row-wise shards and replicas, whose pooling factors (a share of their table's) may be
        below the trained range where the workload's are not (``TrainedRanges.check_tables``)."""
        if self.ranges is None:
            return ()
        return self.ranges.check_tables(tables, noun)

    def normalise(self, raw: np.ndarray) -> torch.Tensor:
        """Standardised features, the first ``num_features`` (what this network was trained on)."""
        raw = raw[:, : self.network.config.num_features]
        return (torch.from_numpy(np.ascontiguousarray(raw)) - self.feature_mean) / self.feature_std

    def codes(self, tables: Sequence[Table], batch_size: int) -> torch.Tensor:
        # in the order given, not a set's: the encoder's float32 sums depend on a row's place in the
        # batch, and a set's order changes with PYTHONHASHSEED (plans differed from run to run)
        missing = [t for t, _ in keys_to_fill(self._codes, [(t, batch_size) for t in tables], self._max_cached)]
        if missing:
            with torch.inference_mode():
                fresh = self.network.encode(self.normalise(self.features(missing, batch_size)))
            if len(self._code_arrays) + len(missing) > self._max_cached:
                self._code_arrays.clear()  # ``code_array`` refills from ``_codes``: none is read below
            # ``code_array``'s answers too, in one conversion: planning asks each table's, one by one
            for table, code, array in zip(missing, fresh, fresh.double().numpy()):
                self._codes[(table, batch_size)] = code
                self._code_arrays[(table, batch_size)] = array
        return torch.stack([self._codes[(t, batch_size)] for t in tables])

    def predict_detail_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> np.ndarray:
        """``[len(table_sets), 3]`` milliseconds: forward, backward+update, total (0 for an empty
        set); the total is floored at the set's costliest table alone (see the module docstring)."""
        out = self._network_detail(table_sets, batch_size)
        nonempty = [i for i, tables in enumerate(table_sets) if len(tables)]
        if nonempty:  # one cached lookup for every table, one segmented max
            alone = self.alone_ms([t for i in nonempty for t in table_sets[i]], batch_size)
            starts = np.cumsum([0] + [len(table_sets[i]) for i in nonempty[:-1]])
            out[nonempty, 2] = np.maximum(out[nonempty, 2], np.maximum.reduceat(alone, starts))
        return out

    def alone_ms(self, tables: Sequence[Table], batch_size: int) -> np.ndarray:
        """Each table's total milliseconds alone on a device (cached per table and batch size)."""
        missing = [t for t, _ in keys_to_fill(self._alone, [(t, batch_size) for t in tables], self._max_cached)]
        if missing:
            for table, cost in zip(missing, self._network_detail([[t] for t in missing], batch_size)[:, 2]):
                self._alone[(table, batch_size)] = float(cost)
        return np.array([self._alone[(t, batch_size)] for t in tables])

    def alone_one(self, table: Table, batch_size: int) -> float:
        """``alone_ms`` of one table (the cached answer without building arrays: hot loops ask it)."""
        cost = self._alone.get((table, batch_size))
        return float(self.alone_ms([table], batch_size)[0]) if cost is None else cost

    def _network_detail(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> np.ndarray:
        """The network's own ``[sets, 3]`` milliseconds, without the floor."""
        out = np.zeros((len(table_sets), 3))
        nonempty = [i for i, s in enumerate(table_sets) if len(s)]
        if not nonempty:
            return out
        flat = [t for i in nonempty for t in table_sets[i]]
        segments = torch.repeat_interleave(
            torch.arange(len(nonempty)), torch.tensor([len(table_sets[i]) for i in nonempty])
        )
        ops = OpIndex.of([self.op_keys(table_sets[i]) for i in nonempty]) if self.network.config.grouped else None
        with torch.inference_mode():
            log_ms = self.network.pool_and_predict(
                self.codes(flat, batch_size), segments, len(nonempty), self.size_limit, ops
            )
        out[nonempty] = torch.exp(log_ms).double().numpy()
        return out

    @property
    def split_head(self):
        """The head for running sets (built once; see ``cost_model.accumulator``)."""
        if self._split_head is None:
            from cost_model.accumulator import SplitHead

            self._split_head = SplitHead(self.network.head, self.network.config.table_code)
        return self._split_head

    @property
    def interaction_split_head(self):
        """A grouped network's interaction head for running sets (``None`` when ungrouped)."""
        if not self.network.config.grouped:
            return None
        if self._interaction_split_head is None:
            from cost_model.accumulator import SplitHead

            self._interaction_split_head = SplitHead(self.network.interaction, self.network.config.table_code)
        return self._interaction_split_head

    def code_array(self, table: Table, batch_size: int) -> np.ndarray:
        """One table's code as a float64 numpy vector (cached)."""
        key = (table, batch_size)
        code = self._code_arrays.get(key)
        if code is None:
            if len(self._code_arrays) >= self._max_cached:
                self._code_arrays.clear()
            code = self._code_arrays[key] = self.codes([table], batch_size)[0].double().numpy()
        return code

    def accumulator(self, num_sets: int, batch_size: int):
        """Running sets that grow one table at a time (``cost_model.accumulator.SetAccumulator``)."""
        from cost_model.accumulator import SetAccumulator

        return SetAccumulator(self, num_sets, batch_size)

    def op_keys(self, tables: Sequence[Table]) -> list:
        """Each table's op (``cost_model.features.op_key``) for a grouped network; one op for all
        tables of an ungrouped one."""
        return [op_key(t) for t in tables] if self.network.config.grouped else [0] * len(tables)

    def predict_edits(self, base_sets: Sequence[Sequence[Table]], edits: Edits, batch_size: int) -> list[float]:
        """Total ms of edited sets without rebuilding them: edit ``(b, r, t)`` is ``base_sets[b]``
        without its table at position ``r`` (if not None) and with table ``t`` added (if not None);
        or an ``EditBatch`` of them. One batch of ``edit_scorer``."""
        return self.edit_scorer(base_sets, batch_size).predict(edits).tolist()

    def edit_scorer(self, base_sets: Sequence[Sequence[Table]], batch_size: int):
        """Edits of ``base_sets`` priced in batches (``cost_model.accumulator.EditedSets``).

        Pooling is updated incrementally (sum -/+ codes; max via leave-one-out maxima), so a local
        search can score thousands of moves and swaps in one head call. A grouped network re-prices
        only the ops an edit touches (the removed table's and the added table's) and adds the
        others' cached milliseconds."""
        from cost_model.accumulator import EditedSets, SplitHeadEdits

        return (EditedSets if self.network.config.grouped else SplitHeadEdits)(self, base_sets, batch_size)

    def grouped_edits_ms(
        self, flat: list[Table], sizes: list[int], batch: EditBatch, removed: np.ndarray, batch_size: int
    ) -> np.ndarray:
        """A grouped network's own ms of edited sets (before the floor), for ``EditedSets``:
        ``flat`` the base sets' tables, ``removed`` each edit's flat row (-1: none)."""
        added = list(batch.added)
        with torch.inference_mode():
            codes = self.codes(flat + added, batch_size)
            base_codes, add_codes = codes[: len(flat)], codes[len(flat) :]
            pooled = _edited_pooled(base_codes, sizes, add_codes, batch.base, removed, batch.add)
            log_ms = self._edited_ops_log_ms(
                flat, added, base_codes, add_codes, sizes, batch.base, removed, batch.add, pooled
            )
            return torch.where(pooled[1] > 0, torch.exp(log_ms), torch.zeros_like(log_ms)).double().numpy()

    def _edited_ops_log_ms(
        self,
        flat: list[Table],
        added: list[Table],
        base_codes: torch.Tensor,
        add_codes: torch.Tensor,
        sizes: list[int],
        b_idx: np.ndarray,
        removed: np.ndarray,
        add_idx: np.ndarray,
        pooled_sets: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """A grouped network's total log ms of edited sets: every base set split into its ops
        (B x K op sets for K op kinds, empty ones included), each edit turned into at most two
        op edits (the removed table's op, the added table's op, one edit if they are the same),
        those ops re-priced, the untouched ops' milliseconds kept, then the interaction factor."""
        kinds: dict = {}
        flat_kind = np.array([kinds.setdefault(k, len(kinds)) for k in self.op_keys(flat)], dtype=np.int64)
        add_kind = np.array([kinds.setdefault(k, len(kinds)) for k in self.op_keys(added)], dtype=np.int64)
        num_kinds, num_bases = len(kinds), len(sizes)
        set_of = np.repeat(np.arange(num_bases), sizes)
        op_of = set_of * num_kinds + flat_kind  # each base table's op set
        order = np.argsort(op_of, kind="stable")  # base tables regrouped op set by op set
        op_sizes = np.bincount(op_of, minlength=num_bases * num_kinds)
        position = np.empty(len(flat), dtype=np.int64)
        position[order] = np.arange(len(flat))  # where each base table sits in the regrouped order
        op_codes = base_codes[torch.from_numpy(order)]
        base_op_ms = torch.exp(
            self.network.predict_pooled(
                *pool(op_codes, torch.from_numpy(op_of[order]), num_bases * num_kinds), self.size_limit
            )[:, 2]
        )
        base_op_ms = torch.where(torch.from_numpy(op_sizes) > 0, base_op_ms, torch.zeros_like(base_op_ms))
        # op edits: (edit, op set, removed position in the regrouped order or -1, added table or -1)
        has_rem, has_add = removed >= 0, add_idx >= 0
        rem_kind = np.where(has_rem, flat_kind[np.maximum(removed, 0)], -1)
        new_kind = np.where(has_add, add_kind[np.maximum(add_idx, 0)], -1)
        same = has_rem & has_add & (rem_kind == new_kind)
        first = np.flatnonzero(has_rem)  # the removed table's op, with the added table if it joins the same op
        second = np.flatnonzero(has_add & ~same)  # the added table's op, when it is another one
        edit_of = np.concatenate([first, second])
        op_edit = np.concatenate(
            [b_idx[first] * num_kinds + rem_kind[first], b_idx[second] * num_kinds + new_kind[second]]
        )
        op_removed = np.concatenate([position[removed[first]], np.full(len(second), -1)])  # rows of op_codes
        op_added = np.concatenate([np.where(same[first], add_idx[first], -1), add_idx[second]])
        new_total, new_count, new_largest = _edited_pooled(
            op_codes, op_sizes.tolist(), add_codes, op_edit, op_removed, op_added
        )
        new_op_ms = torch.exp(self.network.predict_pooled(new_total, new_count, new_largest, self.size_limit)[:, 2])
        new_op_ms = torch.where(new_count > 0, new_op_ms, torch.zeros_like(new_op_ms))
        base_ms = base_op_ms.view(num_bases, num_kinds).sum(1)
        base_ops = (torch.from_numpy(op_sizes) > 0).view(num_bases, num_kinds).sum(1).to(base_ms.dtype)
        edit_t, op_t = torch.from_numpy(edit_of), torch.from_numpy(op_edit)
        ms = base_ms[torch.from_numpy(b_idx)].clone().index_add_(0, edit_t, new_op_ms - base_op_ms[op_t])
        ops = (
            base_ops[torch.from_numpy(b_idx)]
            .clone()
            .index_add_(
                0, edit_t, (new_count > 0).to(ms.dtype) - (torch.from_numpy(op_sizes[op_edit]) > 0).to(ms.dtype)
            )
        )
        factor = self.network.interaction_log(*pooled_sets, ops, self.size_limit)[:, 2]
        return (torch.log(ms.clamp_min(1e-30)) + factor).clamp(LOG_MS_MIN, LOG_MS_MAX)

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        if table_sets and all(len(tables) == 1 for tables in table_sets):  # tables alone (units' costs): cached
            return self.alone_ms([tables[0] for tables in table_sets], batch_size).tolist()
        return self.predict_detail_many(table_sets, batch_size)[:, 2].tolist()

    def predict(self, tables: Sequence[Table], batch_size: int) -> float:
        return self.predict_many([tables], batch_size)[0]


def _edited_pooled(
    base_codes: torch.Tensor,
    sizes: Sequence[int],
    add_codes: torch.Tensor,
    b_idx: np.ndarray,
    removed: np.ndarray,
    add_idx: np.ndarray,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pooled codes (sum, size, max) of edited sets: set ``b_idx[e]`` of the consecutive sets of
    ``sizes`` in ``base_codes``, without its row ``removed[e]`` (a flat row index, -1: none), with
    ``add_codes[add_idx[e]]`` (-1: none)."""
    width = base_codes.shape[1]
    segments = torch.from_numpy(np.repeat(np.arange(len(sizes)), sizes))
    totals, _, maxima = pool(base_codes, segments, len(sizes))
    b_t, rem_t, add_t = (torch.from_numpy(np.ascontiguousarray(a)) for a in (b_idx, removed, add_idx))
    has_rem, has_add = rem_t >= 0, add_t >= 0
    zero = base_codes.new_zeros(1, width)
    rem_codes = torch.cat([zero, base_codes])[rem_t + 1]
    new_codes = torch.cat([zero, add_codes])[add_t + 1]
    total = totals[b_t] - rem_codes + new_codes
    count = (
        torch.tensor(sizes, dtype=base_codes.dtype)[b_t] - has_rem.to(base_codes.dtype) + has_add.to(base_codes.dtype)
    )
    largest = maxima[b_t]
    if bool(has_rem.any()):
        loo = torch.from_numpy(leave_one_out_max(base_codes.numpy(), sizes, -1e9))
        largest = torch.where(has_rem.unsqueeze(1), torch.cat([zero - 1e9, loo])[rem_t + 1], largest)
    largest = torch.where(has_add.unsqueeze(1), torch.maximum(largest, new_codes), largest)
    return total, count, largest
