"""From traces to labelled table sets, and the held-out splits every evaluation uses.

Splits (seeded): sets whose tables all come from the **test pool** form split (b), ``unseen_tables``,
never trained on. The rest (train-pool sets and every train-pool table alone) are shuffled into
train / validation / split (a) ``unseen_sets`` (sets of training tables not trained on) at 80/10/10;
single-table samples always go to training. **Plan sets** (the device sets of plans, from
``autoshard bench plans``): those of training-pool tasks go to training, those of test-pool tasks
form split (c), ``plan_sets``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from autoshard.core.types import Table
from cost_model.traces.store import Sample, TraceSet


@dataclass(frozen=True, slots=True)
class Labelled:
    """A table set at a batch size and its label: the median over passes of forward, backward and
    total ms."""

    tables: tuple[Table, ...]
    forward_ms: float
    backward_ms: float
    total_ms: float
    passes_total_ms: tuple[float, ...]
    batch_size: int
    plans: tuple[tuple[str, str, int], ...] = ()  # a plan set's (task, planner, device) memberships

    @classmethod
    def of(cls, sample: Sample) -> Labelled:
        med = lambda pick: statistics.median(pick(m) for m in sample.passes)  # noqa: E731
        return cls(
            sample.tables,
            med(lambda m: m.forward.median),
            med(lambda m: m.backward.median),
            sample.cost_ms,
            tuple(m.total.median for m in sample.passes),
            sample.batch_size,
            sample.plans,
        )


@dataclass(frozen=True, slots=True)
class Splits:
    train: tuple[Labelled, ...]
    validation: tuple[Labelled, ...]
    unseen_sets: tuple[Labelled, ...]  # split (a)
    unseen_tables: tuple[Labelled, ...]  # split (b)
    plan_sets: tuple[Labelled, ...] = ()  # split (c)

    def sizes(self) -> dict[str, int]:
        """Samples per split; ``plan_sets`` only when there are some (traces without plan sets
        report as they always did)."""
        names = ("train", "validation", "unseen_sets", "unseen_tables") + (("plan_sets",) if self.plan_sets else ())
        return {k: len(getattr(self, k)) for k in names}


def make_splits(traces: TraceSet, seed: int = 0, validation: float = 0.1, unseen_sets: float = 0.1) -> Splits:
    test_pool = tuple(Labelled.of(s) for s in traces.samples if s.split == "test" and s.kind == "set")
    singles = [Labelled.of(s) for s in traces.samples if s.split == "train" and s.kind == "single"]
    sets = [Labelled.of(s) for s in traces.samples if s.split == "train" and s.kind == "set"]
    order = np.random.default_rng(seed).permutation(len(sets))
    n_val, n_test = int(len(sets) * validation), int(len(sets) * unseen_sets)
    pick = lambda idx: tuple(sets[i] for i in idx)  # noqa: E731
    plans = {
        split: tuple(Labelled.of(s) for s in traces.samples if s.kind == "plan" and s.split == split)
        for split in ("train", "test")
    }
    return Splits(
        tuple(singles) + pick(order[n_val + n_test :]) + plans["train"],
        pick(order[:n_val]),
        pick(order[n_val : n_val + n_test]),
        test_pool,
        plans["test"],
    )


def with_measured(splits: Splits, measured: Sequence[Labelled], seed: int = 0, validation: float = 1 / 6) -> Splits:
    """``splits`` with the sets of measured plans (``cost_model.relative_labels``) shuffled into
    training and, ``validation`` of them, the validation split that stops training early."""
    order = np.random.default_rng(seed).permutation(len(measured))
    held = int(len(measured) * validation)
    return replace(
        splits,
        train=splits.train + tuple(measured[i] for i in order[held:]),
        validation=splits.validation + tuple(measured[i] for i in order[:held]),
    )


def every_set(traces: TraceSet) -> tuple[Labelled, ...]:
    """Every random set of the traces, whatever its pool split: a held-out split of its own when
    the traces come from a pool no model was trained or tuned on (``cost eval --fresh-pool``)."""
    return tuple(Labelled.of(s) for s in traces.samples if s.kind == "set")
