"""Choosing the network and its learning rate on the validation split, never on a held-out one.

Each candidate trains with the same seed and early stopping; the one with the lowest validation
MAPE wins. The held-out splits (a), (b), (c) and a fresh pool are scored only after the choice,
so the headline they give was not tuned on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

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


def tune(splits: Splits, profile: DeviceProfile, row_cap_bytes: int, base: TrainConfig,
         grid: tuple[Candidate, ...] = GRID, log_dir: Path | None = None,
         on_candidate: Callable[[Candidate, TrainResult], None] = lambda c, r: None
         ) -> tuple[TrainResult, Candidate, list[dict]]:
    """Train every candidate (each one's per-epoch log in ``log_dir/<name>.csv``); return the best
    by validation MAPE, its candidate, and one row per candidate (name, network, learning rate,
    validation MAPE, best epoch, seconds)."""
    rows, best = [], None
    for candidate in grid:
        config = replace(base, network=candidate.network, learning_rate=candidate.learning_rate)
        log = None if log_dir is None else log_dir / f"{candidate.name}.csv"
        result = train_cost_model(splits, profile, row_cap_bytes, config, log)
        on_candidate(candidate, result)
        rows.append({"name": candidate.name, "network": asdict(candidate.network),
                     "learning_rate": candidate.learning_rate,
                     "validation_mape": round(result.best_validation_mape, 4),
                     "best_epoch": result.best_epoch, "seconds": round(result.seconds, 1)})
        if best is None or result.best_validation_mape < best[0].best_validation_mape:
            best = (result, candidate)
    assert best is not None, "an empty grid"
    return best[0], best[1], rows
