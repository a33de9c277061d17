"""Held-out evaluation of the neural model against the simpler estimators, and the noise floor.

Metrics, per split: MAPE, Spearman correlation, and pairwise ranking accuracy (of two table sets,
is the costlier one predicted costlier: what a planner needs), over up to 20,000 random pairs.
The noise floor is the MAPE between two measurements (passes) of the same table sets, averaged
over every pair of passes: no model can be expected to beat it on single-pass labels; labels are
medians over passes, so their own noise is lower (about the floor / sqrt(passes)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from cost_model.dataset import Labelled, Splits
from cost_model.estimators import BandwidthEstimator, Estimator, LinearAggregate, SumOfSingles
from cost_model.predictor import NeuralCostModel
from cost_model.traces.store import TraceSet
from cost_model.traces.summary import pairwise_pass_mape

MAX_PAIRS = 20_000


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / true))


def ranking_accuracy(pred: np.ndarray, true: np.ndarray, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    n = len(true)
    i, j = rng.integers(0, n, MAX_PAIRS), rng.integers(0, n, MAX_PAIRS)
    keep = true[i] != true[j]
    i, j = i[keep], j[keep]
    return float(np.mean(np.sign(pred[i] - pred[j]) == np.sign(true[i] - true[j])))


@dataclass(frozen=True, slots=True)
class Scores:
    """An estimator's figures on a split (``scores``), each rounded to 4 places."""

    mape: float
    spearman: float
    ranking_accuracy: float
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "mape": self.mape,
            "spearman": self.spearman,
            "ranking_accuracy": self.ranking_accuracy,
            "samples": self.samples,
        }


def scores(pred: np.ndarray, true: np.ndarray) -> Scores:
    return Scores(
        round(mape(pred, true), 4),
        round(float(spearmanr(pred, true).statistic), 4),
        round(ranking_accuracy(pred, true), 4),
        int(len(true)),
    )


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """A split's noise floor (``noise_floor``): None with a single pass per sample."""

    pass_to_pass_mape: float | None
    passes: int

    def to_dict(self) -> dict[str, Any]:
        return {"pass_to_pass_mape": self.pass_to_pass_mape, "passes": self.passes}


def noise_floor(samples: Sequence[Labelled]) -> NoiseFloor:
    """Pass-to-pass MAPE over every pair of passes (``summary.pairwise_pass_mape``), and the median
    number of passes per sample."""
    floor = pairwise_pass_mape(s.passes_total_ms for s in samples)
    if floor is None:
        return NoiseFloor(None, 1)
    return NoiseFloor(round(floor, 4), int(np.median([len(s.passes_total_ms) for s in samples])))


@dataclass(frozen=True, slots=True)
class PlanChoices:
    """How often the model names the faster of two plans of one task (``plan_choices``):
    ``named_the_faster`` is a share of ``pairs`` (None for no pair)."""

    pairs: int
    named_the_faster: float | None
    margin: float
    plans: int
    tasks: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "named_the_faster": self.named_the_faster,
            "margin": self.margin,
            "plans": self.plans,
            "tasks": self.tasks,
        }


def plan_choices(samples: Sequence[Labelled], predicted: np.ndarray, margin: float = 0.05) -> PlanChoices:
    """Of pairs of plans for the same task whose measured max differs by more than ``margin``,
    the share where the prediction names the faster one. A plan's measured (predicted) max is the
    largest measured (predicted) cost of its device sets; compute only, as the sets were measured."""
    measured: dict[tuple[str, str], float] = {}
    guessed: dict[tuple[str, str], float] = {}
    for sample, cost in zip(samples, predicted):
        for task, planner, _ in sample.plans:
            key = (task, planner)
            measured[key] = max(measured.get(key, 0.0), sample.total_ms)
            guessed[key] = max(guessed.get(key, 0.0), float(cost))
    right = pairs = 0
    plans = sorted(measured)
    for i, a in enumerate(plans):
        for b in plans[i + 1 :]:
            if a[0] != b[0] or abs(measured[a] - measured[b]) <= margin * min(measured[a], measured[b]):
                continue
            pairs += 1
            right += (measured[a] < measured[b]) == (guessed[a] < guessed[b])
    return PlanChoices(
        pairs, round(right / pairs, 4) if pairs else None, margin, len(plans), len({t for t, _ in plans})
    )


def predict_labelled(model: NeuralCostModel, samples: Sequence[Labelled]) -> np.ndarray:
    """The model's total ms for each sample at its own batch size (one call per batch size)."""
    out = np.zeros(len(samples))
    for batch in {s.batch_size for s in samples}:
        index = [i for i, s in enumerate(samples) if s.batch_size == batch]
        out[index] = model.predict_many([samples[i].tables for i in index], batch)
    return out


@dataclass(frozen=True, slots=True)
class SplitAccuracy:
    """Every estimator on one held-out split, its noise floor, whether the neural model beats every
    other estimator on both MAPE and ranking accuracy, and on plan sets, its ``plan_choices``."""

    estimators: dict[str, Scores]
    noise_floor: NoiseFloor
    neural_beats_all: bool
    plan_choices: PlanChoices | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "estimators": {name: s.to_dict() for name, s in self.estimators.items()},
            "noise_floor": self.noise_floor.to_dict(),
            "neural_beats_all": self.neural_beats_all,
        }
        if self.plan_choices is not None:
            out["plan_choices"] = self.plan_choices.to_dict()
        return out


@dataclass(frozen=True, slots=True)
class AccuracyReport:
    """``evaluate_all``: each held-out split by name (`autoshard cost eval --json`, and a model's
    ``metrics.json`` ``evaluation``)."""

    splits: dict[str, SplitAccuracy]

    def to_dict(self) -> dict[str, Any]:
        return {name: split.to_dict() for name, split in self.splits.items()}


def evaluate_all(
    model: NeuralCostModel, splits: Splits, traces: TraceSet, extra: Mapping[str, Sequence[Labelled]] | None = None
) -> AccuracyReport:
    """Every estimator on the held-out splits, side by side, plus the noise floor of each split;
    on split (c), plan sets, also how often the model picks the faster of two plans. ``extra``:
    more named held-out splits (e.g. ``fresh_pool``, sets of a pool drawn with a fresh seed),
    scored the same way; the sum of singles only where every table was measured alone."""
    cap = model.row_cap_bytes
    singles = SumOfSingles(traces.singles)
    fitted: list[Estimator] = [LinearAggregate(cap).fit(splits.train), BandwidthEstimator(cap).fit(splits.train)]
    report: dict[str, SplitAccuracy] = {}
    named = {name: getattr(splits, name) for name in ("unseen_sets", "unseen_tables", "plan_sets")} | dict(extra or {})
    for split_name, samples in named.items():
        if not samples:
            continue
        true = np.array([s.total_ms for s in samples])
        sets, batches = [s.tables for s in samples], [s.batch_size for s in samples]
        estimators = fitted if not all(singles.covers(t) for t in sets) else [singles, *fitted]
        results = {e.name: scores(e.predict(sets, batches), true) for e in estimators}
        predicted = predict_labelled(model, samples)
        results["neural"] = scores(predicted, true)
        report[split_name] = SplitAccuracy(
            results,
            noise_floor(samples),
            all(
                results["neural"].mape < r.mape and results["neural"].ranking_accuracy > r.ranking_accuracy
                for k, r in results.items()
                if k != "neural"
            ),
            plan_choices(samples, predicted) if split_name == "plan_sets" else None,
        )
    return AccuracyReport(report)
