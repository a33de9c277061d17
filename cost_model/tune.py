"""Choosing the network and its learning rate on the validation split, never on a held-out one.

Each candidate trains with the same seed and early stopping. The choice follows the one-standard-
error rule: of the candidates whose validation MAPE is within one standard error of the best
one's, the one with the fewest parameters wins (every planner evaluates the network in its inner
loop, so a smaller one plans faster; differences inside the validation noise are not evidence).
The held-out splits (a), (b), (c) and a fresh pool are scored only after the choice, so the
headline they give was not tuned on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from cost_model.accuracy import predict_labelled
from cost_model.dataset import Splits
from cost_model.network import NetworkConfig
from cost_model.profile import DeviceProfile
from cost_model.train import TrainConfig, TrainResult, train_cost_model


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    network: NetworkConfig
    learning_rate: float


GRID = (
    Candidate("default", NetworkConfig(), 2e-3),
    Candidate("narrow", NetworkConfig(table_hidden=128, table_code=64, head_hidden=128), 2e-3),
    Candidate("wide", NetworkConfig(table_hidden=384, table_code=128, head_hidden=384), 2e-3),
    Candidate("no_dropout", NetworkConfig(dropout=0.0), 2e-3),
    Candidate("slow", NetworkConfig(), 1e-3),
)
# Trainable by name (``autoshard cost train --network``), not candidates of the tuning: a grouped
# network prices every TBE op of a device on every incremental add, which takes planning 1,000
# tables on 128 devices past the planners' 1 s target (docs/decisions.md, 8).
SLOW_TO_PLAN = (
    Candidate("grouped", NetworkConfig(grouped=True), 2e-3),
    Candidate("narrow_grouped", NetworkConfig(table_hidden=128, table_code=64, head_hidden=128, grouped=True), 2e-3),
)


def tune(
    splits: Splits,
    profile: DeviceProfile,
    row_cap_bytes: int,
    base: TrainConfig,
    grid: tuple[Candidate, ...] = GRID,
    log_dir: Path | None = None,
    on_candidate: Callable[[Candidate, TrainResult], None] = lambda c, r: None,
) -> tuple[TrainResult, Candidate, list[dict]]:
    """Train every candidate (each one's per-epoch log in ``log_dir/<name>.csv``); return the
    chosen one's result (see the module docstring), its candidate, and one row per candidate
    (name, network, learning rate, parameters, validation MAPE and its standard error, best
    epoch, seconds)."""
    true = np.array([s.total_ms for s in splits.validation])
    rows, results = [], []
    for candidate in grid:
        config = replace(base, network=candidate.network, learning_rate=candidate.learning_rate)
        log = None if log_dir is None else log_dir / f"{candidate.name}.csv"
        result = train_cost_model(splits, profile, row_cap_bytes, config, log)
        on_candidate(candidate, result)
        errors = np.abs(predict_labelled(result.model, splits.validation) - true) / true
        params = sum(p.numel() for p in result.model.network.parameters())
        results.append(
            (result, candidate, float(errors.mean()), float(errors.std(ddof=1) / np.sqrt(len(errors))), params)
        )
        rows.append(
            {
                "name": candidate.name,
                "network": asdict(candidate.network),
                "learning_rate": candidate.learning_rate,
                "parameters": params,
                "validation_mape": round(results[-1][2], 4),
                "standard_error": round(results[-1][3], 4),
                "best_epoch": result.best_epoch,
                "seconds": round(result.seconds, 1),
            }
        )
    if not results:
        raise ValueError("an empty grid")
    best = min(results, key=lambda r: r[2])
    close = [r for r in results if r[2] <= best[2] + best[3]]
    chosen = min(close, key=lambda r: (r[4], r[2]))
    return chosen[0], chosen[1], rows
