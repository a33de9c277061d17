"""Held-out evaluation of the neural model against the simpler estimators, and the noise floor.

Metrics, per split: MAPE, Spearman correlation, and pairwise ranking accuracy (of two table sets,
is the costlier one predicted costlier: what a planner needs), over up to 20,000 random pairs.
The noise floor is the MAPE between two measurements (passes) of the same table sets, averaged
over every pair of passes: no model can be expected to beat it on single-pass labels; labels are
medians over passes, so their own noise is lower (about the floor / sqrt(passes)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from cost_model.dataset import Labelled, Splits
from cost_model.estimators import BandwidthEstimator, LinearAggregate, SumOfSingles
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


def scores(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    return {
        "mape": round(mape(pred, true), 4),
        "spearman": round(float(spearmanr(pred, true).statistic), 4),
        "ranking_accuracy": round(ranking_accuracy(pred, true), 4),
        "samples": int(len(true)),
    }


def noise_floor(samples: Sequence[Labelled]) -> dict[str, Any]:
    """Pass-to-pass MAPE over every pair of passes (``summary.pairwise_pass_mape``), and the median
    number of passes per sample."""
    floor = pairwise_pass_mape(s.passes_total_ms for s in samples)
    if floor is None:
        return {"pass_to_pass_mape": None, "passes": 1}
    return {"pass_to_pass_mape": round(floor, 4), "passes": int(np.median([len(s.passes_total_ms) for s in samples]))}


def plan_choices(samples: Sequence[Labelled], predicted: np.ndarray, margin: float = 0.05) -> dict[str, Any]:
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
    return {
        "pairs": pairs,
        "named_the_faster": round(right / pairs, 4) if pairs else None,
        "margin": margin,
        "plans": len(plans),
        "tasks": len({t for t, _ in plans}),
    }


def predict_labelled(model: NeuralCostModel, samples: Sequence[Labelled]) -> np.ndarray:
    """The model's total ms for each sample at its own batch size (one call per batch size)."""
    out = np.zeros(len(samples))
    for batch in {s.batch_size for s in samples}:
        index = [i for i, s in enumerate(samples) if s.batch_size == batch]
        out[index] = model.predict_many([samples[i].tables for i in index], batch)
    return out


def evaluate_all(
    model: NeuralCostModel, splits: Splits, traces: TraceSet, extra: dict[str, Sequence[Labelled]] | None = None
) -> dict[str, Any]:
    """Every estimator on the held-out splits, side by side, plus the noise floor of each split;
    on split (c), plan sets, also how often the model picks the faster of two plans. ``extra``:
    more named held-out splits (e.g. ``fresh_pool``, sets of a pool drawn with a fresh seed),
    scored the same way; the sum of singles only where every table was measured alone."""
    cap = model.row_cap_bytes
    singles = SumOfSingles(traces.singles)
    fitted = [LinearAggregate(cap).fit(splits.train), BandwidthEstimator(cap).fit(splits.train)]
    report: dict[str, Any] = {}
    named = {name: getattr(splits, name) for name in ("unseen_sets", "unseen_tables", "plan_sets")} | (extra or {})
    for split_name, samples in named.items():
        if not samples:
            continue
        true = np.array([s.total_ms for s in samples])
        sets, batches = [s.tables for s in samples], [s.batch_size for s in samples]
        estimators = fitted if not all(singles.covers(t) for t in sets) else [singles, *fitted]
        results = {e.name: scores(e.predict(sets, batches), true) for e in estimators}
        predicted = predict_labelled(model, samples)
        results["neural"] = scores(predicted, true)
        floor = noise_floor(samples)
        report[split_name] = {
            "estimators": results,
            "noise_floor": floor,
            "neural_beats_all": all(
                results["neural"]["mape"] < r["mape"] and results["neural"]["ranking_accuracy"] > r["ranking_accuracy"]
                for k, r in results.items()
                if k != "neural"
            ),
        }
        if split_name == "plan_sets":
            report[split_name]["plan_choices"] = plan_choices(samples, predicted)
    return report
