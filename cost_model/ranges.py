"""What a cost model was trained on, and what it will and will not answer.

``TrainedRanges`` records the span of every input the training traces covered. The policy
(docs/decisions.md, 6):

- **refused** (``InputError``): a ``bytes_per_element`` or an ``optimizer`` that no training
  table had. The model has no signal for them (a precision seen at one value only is a constant
  feature; the optimizer is no feature at all), so any answer would be a guess;
- **warned**: batch size, rows, dim or pooling factor more than ``LOG_MARGIN`` times beyond the
  trained span, Zipf skew more than ``ZIPF_MARGIN`` beyond it, or more tables on one device than
  the largest trained set. These enter through log-scaled, physically meaningful features
  (lookups, bytes, distinct rows), so the model extrapolates along trends it learnt; the planner
  still answers, with one warning per field. The margins keep the sample extremes of a densely
  sampled range (rows 104..39.6M drawn from 100..39.8M) from warning about their neighbours.

A pooling factor below the trained minimum is the one extrapolation the model does not make: the
predictor prices such a table as at the minimum (``cost_model.features``; an upper bound), so its
warning says so. Row-wise shards and data-parallel replicas (``TableShard.as_table``) run at a
share of their table's pooling factor, often below 1 a bag, so a plan's shards can leave the
ranges that its whole tables keep: ``check_tables`` warns about them as ``check`` does about a
workload's tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from autoshard.core.errors import InputError
from autoshard.core.types import Table, Workload

PRECISION_NAMES = {1: "int8/fp8", 2: "fp16", 4: "fp32", 8: "fp64"}
LOG_MARGIN = 1.5  # batch, rows, dim, pooling: warn outside [min / 1.5, max * 1.5]
ZIPF_MARGIN = 0.1  # zipf_alpha: warn outside [min - 0.1, max + 0.1]

_CATEGORICAL = ("bytes_per_element", "optimizers")  # fields of TrainedRanges that list values, not a span

# (field of TrainedRanges, Table attribute, how to print a value, log-scaled)
_TABLE_SPANS = (
    ("rows", "num_embeddings", "{:,}", True),
    ("dim", "embedding_dim", "{}", True),
    ("pooling", "pooling_factor", "{:g}", True),
    ("zipf", "zipf_alpha", "{:g}", False),
)


def _tolerated(span: tuple[float, float], log_scaled: bool) -> tuple[float, float]:
    low, high = span
    return (low / LOG_MARGIN, high * LOG_MARGIN) if log_scaled else (low - ZIPF_MARGIN, high + ZIPF_MARGIN)


@dataclass(frozen=True, slots=True)
class TrainedRanges:
    """Min/max of each numeric input over the training sets, and the categorical values seen."""

    batch_size: tuple[int, int]
    tables_per_set: tuple[int, int]
    rows: tuple[int, int]
    dim: tuple[int, int]
    pooling: tuple[float, float]
    zipf: tuple[float, float]
    bytes_per_element: tuple[int, ...]  # sorted
    optimizers: tuple[str, ...]  # sorted Optimizer values

    @classmethod
    def of(cls, table_sets: Iterable[Sequence[Table]], batch_sizes: Iterable[int]) -> TrainedRanges:
        """The ranges of these training sets, measured at these batch sizes."""
        sets = [tuple(s) for s in table_sets if len(s)]
        if not sets:
            raise ValueError("TrainedRanges.of needs at least one non-empty set")
        tables = {t for s in sets for t in s}
        span = lambda values: (min(values), max(values))  # noqa: E731
        return cls(
            span(list(batch_sizes)),
            span([len(s) for s in sets]),
            span([t.num_embeddings for t in tables]),
            span([t.embedding_dim for t in tables]),
            span([float(t.pooling_factor) for t in tables]),
            span([float(t.zipf_alpha) for t in tables]),
            tuple(sorted({t.bytes_per_element for t in tables})),
            tuple(sorted({t.optimizer.value for t in tables})),
        )

    def union(self, other: TrainedRanges) -> TrainedRanges:
        """The ranges of both trainings (a model fine-tuned on new traces still knows the old)."""
        spans = {
            f.name: (
                min(getattr(self, f.name)[0], getattr(other, f.name)[0]),
                max(getattr(self, f.name)[1], getattr(other, f.name)[1]),
            )
            for f in fields(self)
            if f.name not in _CATEGORICAL
        }
        return TrainedRanges(
            **spans,
            **{name: tuple(sorted(set(getattr(self, name)) | set(getattr(other, name)))) for name in _CATEGORICAL},
        )

    def to_dict(self) -> dict[str, list]:
        """Plain lists of ints, floats and strings (``torch.load(weights_only=True)`` reads them)."""
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainedRanges:
        return cls(**{f.name: tuple(data[f.name]) for f in fields(cls)})

    def covers(self, table: Table) -> bool:
        """Whether the training tables spanned this table's rows, dim, pooling and skew (no
        margins) and had its precision and optimizer."""
        return (
            all(
                getattr(self, field)[0] <= getattr(table, attr) <= getattr(self, field)[1]
                for field, attr, _, _ in _TABLE_SPANS
            )
            and table.bytes_per_element in self.bytes_per_element
            and table.optimizer.value in self.optimizers
        )

    def check(self, workload: Workload, max_tables_per_device: int | None = None) -> tuple[str, ...]:
        """Raise ``InputError`` for an input the model cannot answer; else warnings (one per field)."""
        self._refuse_unseen(workload.tables)
        warnings = []
        low, high = _tolerated(self.batch_size, True)
        if not low <= workload.batch_size <= high:
            warnings.append(
                f"batch_size {workload.batch_size} is outside the trained range {_span(*self.batch_size)}; "
                "predictions extrapolate through the lookups-per-batch features"
            )
        warnings.extend(self._table_warnings(workload.tables, "table"))
        if max_tables_per_device is not None and max_tables_per_device > self.tables_per_set[1]:
            warnings.append(
                f"a device may hold {max_tables_per_device} tables, beyond the largest trained set "
                f"of {self.tables_per_set[1]}; larger sets are priced linearly in their size"
            )
        return tuple(warnings)

    def check_tables(self, tables: Sequence[Table], noun: str = "shard") -> tuple[str, ...]:
        """``check`` for the tables a plan puts on devices (e.g. its shards' ``as_table``), which
        may leave the ranges that the workload's tables keep: ``InputError`` for an unseen
        precision or optimizer, else one warning per field, counting ``noun``s."""
        self._refuse_unseen(tables)
        return tuple(self._table_warnings(tables, noun))

    def _table_warnings(self, tables: Sequence[Table], noun: str) -> list[str]:
        warnings = []
        sequences = [t for t in tables if not t.pooled]
        if sequences:  # every trace is of pooled lookups (EmbeddingBag); a sequence table is outside
            count = f"{len(sequences)} {noun}{'s are' if len(sequences) > 1 else ' is'}"
            warnings.append(
                f"{count} sequence (non-pooled) lookups, outside its trained range (e.g. {sequences[0].name!r}): "
                "the traces hold pooled lookups only; their compute is priced as pooled bags of the same lookups"
            )
        for field, attr, fmt, log_scaled in _TABLE_SPANS:
            low, high = _tolerated(getattr(self, field), log_scaled)
            for side, bound, out in (
                ("below the trained min", getattr(self, field)[0], lambda v: v < low),
                ("above the trained max", getattr(self, field)[1], lambda v: v > high),
            ):
                hits = [t for t in tables if out(getattr(t, attr))]
                if hits:
                    worst = (min if side.startswith("below") else max)(hits, key=lambda t: getattr(t, attr))
                    count = f"{len(hits)} {noun}{'s have' if len(hits) > 1 else ' has'}"
                    bounded = (
                        "; priced as at the trained min, an upper bound"
                        if field == "pooling" and side.startswith("below")
                        else ""
                    )
                    warnings.append(
                        f"{count} {attr} {side} {fmt.format(bound)} "
                        f"(e.g. {worst.name!r}: {fmt.format(getattr(worst, attr))}){bounded}"
                    )
        return warnings

    def _refuse_unseen(self, tables: Sequence[Table]) -> None:
        checks = (
            ("bytes_per_element", lambda t: t.bytes_per_element, self.bytes_per_element, _precision),
            ("optimizer", lambda t: t.optimizer.value, self.optimizers, str),
        )
        for field, value, seen, show in checks:
            bad = [(i, t) for i, t in enumerate(tables) if value(t) not in seen]
            if not bad:
                continue
            i, table = bad[0]
            others = f" (and {len(bad) - 1} more table{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
            trained = " or ".join(show(v) for v in seen)
            fix = (
                f"use {field} {trained}, or train a model on traces that include {show(value(table))} "
                "(`autoshard bench collect --precisions --optimizers`; docs/profiles.md)"
            )
            raise InputError(
                field,
                f"table {table.name!r} has {field} {show(value(table))}{others}, but this cost "
                f"model was trained on {trained} only and cannot predict it",
                fix,
                where=f"tables[{i}]",
            )


def _precision(bytes_per_element: object) -> str:
    name = PRECISION_NAMES.get(bytes_per_element, "?") if isinstance(bytes_per_element, int) else "?"
    return f"{bytes_per_element} ({name})"


def _span(low: float, high: float) -> str:
    return str(low) if low == high else f"{low}-{high}"
