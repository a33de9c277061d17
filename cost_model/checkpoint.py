"""Saving and loading the cost model: weights, constructor config, feature normalisation, the
device profile, the trained input ranges and the set size past which it prices linearly, in one
file that loads with ``torch.load(..., weights_only=True)``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from autoshard.core.errors import ModelError
from cost_model.network import NetworkConfig, SetCostNetwork
from cost_model.predictor import NeuralCostModel
from cost_model.profile import DeviceProfile
from cost_model.ranges import TrainedRanges
from cost_model.train import feature_scale

FORMAT_VERSION = 1
CHECKPOINT_NAME = "cost_model.pt"


def save_checkpoint(model: NeuralCostModel, directory: Path, metrics: dict[str, Any] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT_NAME
    torch.save(
        {
            "format_version": FORMAT_VERSION,
            "network_config": asdict(model.network.config),
            "state_dict": model.network.state_dict(),
            "feature_mean": model.feature_mean,
            "feature_std": model.feature_std,
            "profile": model.profile.to_dict(),
            "row_cap_bytes": model.row_cap_bytes,
            "trained_batch_size": model.trained_batch_size,
            "metrics": metrics or {},
            "trained_ranges": None if model.ranges is None else model.ranges.to_dict(),
            "linear_beyond": model.linear_beyond,
        },
        path,
    )
    return path


def add_trained_ranges(directory: Path, traces_paths: Sequence[Path], seed: int = 0) -> TrainedRanges:
    """Re-save the checkpoint in ``directory`` with the ranges of its training split of the trace
    files it was trained on (``traces_paths``, merged as ``autoshard cost train`` merges them; the
    split of ``--seed``), and with constant features' divisors fixed (``train.feature_scale``);
    weights and predictions on in-range tables unchanged."""
    from cost_model.dataset import make_splits
    from cost_model.traces.store import merge_traces, read_traces

    model = load_cost_model(directory)
    traces = merge_traces([read_traces(p) for p in traces_paths])
    if traces.profile.id != model.profile.id:
        raise ModelError(
            f"{', '.join(map(str, traces_paths))} are from device profile {traces.profile.id!r}, the model "
            f"from {model.profile.id!r}; pass the traces the model was trained on"
        )
    train = make_splits(traces, seed).train
    model.ranges = TrainedRanges.of([s.tables for s in train], [s.batch_size for s in train])
    save_checkpoint(model, directory, model.metrics)
    return model.ranges


def trace_sources(metrics: dict[str, Any] | None) -> list[str]:
    """The trace files a model's metrics.json names, first the anchor (the random sets): one path
    when it was trained on one file, a list when on several."""
    sources = (metrics or {}).get("traces", [])
    return [sources] if isinstance(sources, str) else list(sources)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_cost_model(path: str | Path, expected_profile: str | None = None) -> NeuralCostModel:
    """Load a checkpoint (a file, or a folder holding ``cost_model.pt``).

    Raises ``ModelError`` when it is missing, corrupt, of another format version, or measured on
    another device profile than ``expected_profile``.
    """
    path = Path(path)
    file = path / CHECKPOINT_NAME if path.is_dir() else path
    if not file.exists():
        raise ModelError(f"no cost model at {file}; train one with `autoshard cost train`")
    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch raises many types for a bad file
        raise ModelError(
            f"{file} is not a readable cost-model checkpoint ({type(error).__name__}); "
            "retrain it with `autoshard cost train`"
        ) from None
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
        found = data.get("format_version") if isinstance(data, dict) else None
        raise ModelError(
            f"{file} has checkpoint format {found!r}, this autoshard reads {FORMAT_VERSION}; "
            "retrain it with `autoshard cost train`"
        )
    profile = DeviceProfile.from_dict(data["profile"])
    if expected_profile is not None and profile.id != expected_profile:
        raise ModelError(
            f"{file} was trained on device profile {profile.id!r}, not {expected_profile!r}; "
            "use a model trained on traces from this device"
        )
    try:
        network = SetCostNetwork(NetworkConfig(**data["network_config"]))
        network.load_state_dict(data["state_dict"])
        ranges = data.get("trained_ranges")  # absent in checkpoints saved before ranges existed
        ranges = None if ranges is None else TrainedRanges.from_dict(ranges)
    except (TypeError, RuntimeError, KeyError) as error:
        raise ModelError(f"{file} does not match the cost-model network: {error}") from None
    return NeuralCostModel(
        network,
        data["feature_mean"],
        feature_scale(torch.as_tensor(data["feature_std"])),
        profile,
        int(data["row_cap_bytes"]),
        int(data["trained_batch_size"]),
        metrics=data.get("metrics", {}),
        ranges=ranges,
        linear_beyond=data.get("linear_beyond"),
    )  # absent from older checkpoints: the largest trained set


def set_linear_beyond(directory: Path, tables: int | None) -> NeuralCostModel:
    """Re-save the checkpoint in ``directory`` pricing sets of more than ``tables`` tables linearly
    in their size (``NeuralCostModel.size_limit``; None: past the largest trained set); weights,
    ranges and predictions of smaller sets unchanged."""
    model = load_cost_model(directory)
    model.linear_beyond = tables
    save_checkpoint(model, directory, model.metrics)
    return model
