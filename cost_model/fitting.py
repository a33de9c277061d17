"""Train a cost model on traces and save it as a profile's: the checkpoint, metrics.json (what it
was trained on and how it scores on the held-out splits) and train_log.csv.

``autoshard cost train`` and ``cost adapt`` run ``fit_and_save``; so do the lab's experiments
that retrain (plan-aware rounds, ablations).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ADAPT_LEARNING_RATE = 3e-4  # fine-tuning a trained model (cost adapt); training from scratch uses 2e-3
ADAPT_MAX_EPOCHS, ADAPT_PATIENCE = 150, 40  # fine-tuning on a few hundred sets stops within ~10 epochs
MAX_EPOCHS, PATIENCE = 300, 60  # training from scratch


def read_all(paths: Sequence[Path]) -> Any:
    """The trace files as one ``TraceSet`` (one device profile)."""
    from cost_model.traces.store import merge_traces, read_traces

    return merge_traces([read_traces(p) for p in paths])


@dataclass(frozen=True)
class FitRun:
    """How to train and what to record. ``tune``: choose the network and learning rate on the
    validation split first (``cost_model.tune``); else ``network`` / ``learning_rate`` (default:
    ``TrainConfig``'s); ``start_from``: fine-tune that ``NeuralCostModel`` instead (its network),
    recorded as ``adapted_from``; ``measured``: labelled sets of measured plans to add
    (``cost_model.relative_labels``). ``command`` and ``sources`` go to metrics.json."""

    seed: int = 0
    max_epochs: int = MAX_EPOCHS
    patience: int = PATIENCE
    command: str = ""
    sources: tuple[str, ...] = ()
    tune: bool = False
    network: Any = None  # cost_model.network.NetworkConfig
    learning_rate: float | None = None
    start_from: Any = None  # cost_model.predictor.NeuralCostModel
    adapted_from: dict[str, Any] | None = None
    measured: tuple[Any, ...] = ()


EpochCallback = Callable[[int, float], None]  # (epoch, validation MAPE)
CandidateCallback = Callable[[Any, Any], None]  # (tuning candidate, its TrainResult)


def fit_and_save(
    data: Any,
    out: Path,
    run: FitRun,
    on_epoch: EpochCallback = lambda epoch, mape: None,
    on_candidate: CandidateCallback = lambda candidate, result: None,
) -> dict[str, Any]:
    """Train on ``data`` (a ``TraceSet``; None when fine-tuning on ``run.measured`` alone, the
    model keeping its profile and row cap) and save the checkpoint, metrics.json and
    train_log.csv in ``out``; returns the metrics. ``on_epoch`` / ``on_candidate`` report progress."""
    import torch

    from cost_model.checkpoint import save_checkpoint
    from cost_model.dataset import Splits, make_splits, with_measured
    from cost_model.network import NetworkConfig
    from cost_model.train import TrainConfig, train_cost_model

    torch.set_num_threads(1)
    splits = make_splits(data, run.seed) if data is not None else Splits((), (), (), ())
    if run.measured:
        splits = with_measured(splits, run.measured, run.seed)
    profile = data.profile if data is not None else run.start_from.profile
    row_cap = int(data.header["bench"]["row_cap_bytes"]) if data is not None else run.start_from.row_cap_bytes
    config = TrainConfig(
        network=run.network or NetworkConfig(),
        seed=run.seed,
        max_epochs=run.max_epochs,
        patience=run.patience,
        learning_rate=run.learning_rate or TrainConfig().learning_rate,
    )
    tuning = None
    if run.tune:
        result, config, tuning = _tuned(splits, profile, row_cap, config, out, on_candidate)
    else:
        log = out / "train_log.csv"
        result = train_cost_model(splits, profile, row_cap, config, log, on_epoch, run.start_from)
    metrics = _metrics(run, data, splits, profile, result, config, tuning)
    save_checkpoint(result.model, out, metrics)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    return metrics


def _tuned(splits, profile, row_cap: int, config, out: Path, on_candidate: CandidateCallback):
    """(the chosen candidate's result, its config, the tuning record): every network of the
    grid trained on the validation split, the smallest within one standard error of the best."""
    from cost_model.tune import tune

    result, chosen, rows = tune(splits, profile, row_cap, config, log_dir=out / "tuning", on_candidate=on_candidate)
    shutil.copy2(out / "tuning" / f"{chosen.name}.csv", out / "train_log.csv")
    config = replace(config, network=chosen.network, learning_rate=chosen.learning_rate)
    record = {
        "chosen": chosen.name,
        "by": "validation MAPE, one-standard-error rule (fewest parameters)",
        "candidates": rows,
    }
    return result, config, record


def _metrics(run: FitRun, data, splits, profile, result, config, tuning) -> dict[str, Any]:
    """metrics.json: what the model was trained on, with what, and its held-out scores."""
    from cost_model.accuracy import evaluate_all

    sources = list(run.sources)
    return {
        "command": run.command,
        "traces": sources[0] if len(sources) == 1 else sources,
        "profile": profile.to_dict(),
        "split_seed": run.seed,
        "splits": splits.sizes(),
        **({"measured_sets": len(run.measured)} if run.measured else {}),
        "train_seconds": round(result.seconds, 1),
        "best_epoch": result.best_epoch,
        "epochs_run": result.epochs_run,
        "validation_mape": round(result.best_validation_mape, 4),
        "validation_loss": {
            "first": round(result.first_validation_loss, 5),
            "best": round(result.best_validation_loss, 5),
        },
        "network": asdict(result.model.network.config),
        "learning_rate": config.learning_rate,
        **({"tuning": tuning} if tuning else {}),
        **({"adapted_from": run.adapted_from} if run.adapted_from else {}),
        "evaluation": evaluate_all(result.model, splits, data).to_dict() if data is not None else {},
    }
