"""Training the set network on traces: seeded, early-stopped on validation, logged to CSV."""

from __future__ import annotations

import copy
import csv
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from autoshard.core.errors import InputError
from autoshard.core.types import Table
from cost_model.dataset import Labelled, Splits
from cost_model.features import NUM_FEATURES, op_key, table_features
from cost_model.network import NetworkConfig, OpIndex, SetCostNetwork
from cost_model.predictor import NeuralCostModel
from cost_model.profile import DeviceProfile
from cost_model.ranges import TrainedRanges

LOSS_WEIGHTS = (0.25, 0.25, 0.5)  # forward, backward+update, total (log ms)
CONSTANT_FEATURE_STD = 1e-4  # a feature whose training std is below this did not vary in training


def feature_scale(std: torch.Tensor) -> torch.Tensor:
    """Standardisation divisors: 1 for a feature constant in training (e.g. bytes per element when
    every table was fp32), so that an unseen value shifts its input by a unit, not by ~1e6.
    Training inputs are unaffected: a constant feature minus its mean is 0 whatever the divisor."""
    return torch.where(std < CONSTANT_FEATURE_STD, torch.ones_like(std), std)


@dataclass(frozen=True, slots=True)
class TrainConfig:
    network: NetworkConfig = field(default_factory=NetworkConfig)
    seed: int = 0
    max_epochs: int = 300
    patience: int = 60
    batch_sets: int = 64
    learning_rate: float = 2e-3
    weight_decay: float = 1e-5


@dataclass(frozen=True, slots=True)
class TrainResult:
    model: NeuralCostModel
    best_epoch: int
    epochs_run: int
    best_validation_mape: float
    first_validation_loss: float
    best_validation_loss: float
    seconds: float


class _Packed:
    """Sets as one flat feature matrix plus offsets, for fast minibatching; each table's features
    at its sample's batch size, the first ``num_features`` of them, and its op within its set."""

    def __init__(self, samples: Sequence[Labelled], row_cap_bytes: int, num_features: int = NUM_FEATURES) -> None:
        cache: dict[tuple[Table, int], np.ndarray] = {}
        for key in {(t, s.batch_size) for s in samples for t in s.tables}:
            cache[key] = table_features(*key, row_cap_bytes)[:num_features]
        rows = [cache[(t, s.batch_size)] for s in samples for t in s.tables]
        self.features = torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, num_features)
        self.sizes = torch.tensor([len(s.tables) for s in samples])
        self.starts = torch.cumsum(self.sizes, 0) - self.sizes
        self.targets = torch.log(
            torch.tensor([[s.forward_ms, s.backward_ms, s.total_ms] for s in samples], dtype=torch.float32)
        )
        local_op, num_ops = [], []
        for s in samples:
            ops: dict = {}
            local_op += [ops.setdefault(op_key(t), len(ops)) for t in s.tables]
            num_ops.append(len(ops))
        self.local_op, self.num_ops = torch.tensor(local_op, dtype=torch.long), torch.tensor(num_ops)

    def batch(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, OpIndex, torch.Tensor]:
        sizes = self.sizes[ids]
        segments = torch.repeat_interleave(torch.arange(len(ids)), sizes)
        offsets = torch.cumsum(sizes, 0) - sizes
        rows = self.starts[ids][segments] + (torch.arange(int(sizes.sum())) - offsets[segments])
        num_ops = self.num_ops[ids]
        first_op = torch.cumsum(num_ops, 0) - num_ops
        ops = OpIndex(
            first_op[segments] + self.local_op[rows],
            torch.repeat_interleave(torch.arange(len(ids)), num_ops),
            int(num_ops.sum()),
        )
        return self.features[rows], segments, ops, self.targets[ids]


def train_cost_model(
    splits: Splits,
    profile: DeviceProfile,
    row_cap_bytes: int,
    config: TrainConfig = TrainConfig(),
    log_csv: Path | None = None,
    on_epoch: Callable[[int, float], None] = lambda epoch, mape: None,
    start_from: NeuralCostModel | None = None,
) -> TrainResult:
    """Train a ``config.network`` from scratch, or fine-tune ``start_from`` (its network, feature
    normalisation and trained ranges; ``config.network`` is then ignored): a model of another
    machine adapted to this one's traces (``autoshard cost adapt``)."""
    if not splits.train or not splits.validation:
        raise InputError(
            "traces",
            f"{len(splits.train)} training and {len(splits.validation)} validation sets: "
            "too few to train and stop early",
            "collect more samples (`autoshard bench collect --samples`)",
        )
    if start_from is not None:
        config = dataclasses.replace(config, network=start_from.network.config)
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    train = _Packed(splits.train, row_cap_bytes, config.network.num_features)
    val = _Packed(splits.validation, row_cap_bytes, config.network.num_features)
    if start_from is None:
        mean, std = train.features.mean(0), feature_scale(train.features.std(0))
        network = SetCostNetwork(config.network)
    else:
        if start_from.row_cap_bytes != row_cap_bytes:
            raise InputError(
                "traces",
                f"measured with a row cap of {row_cap_bytes} bytes, the model's traces with {start_from.row_cap_bytes}",
                "collect the new traces with the model's --row-cap-mb",
            )
        mean, std = start_from.feature_mean, start_from.feature_std
        network = copy.deepcopy(start_from.network).train()
    norm = lambda x: (x - mean) / std  # noqa: E731
    optimizer = torch.optim.AdamW(network.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, config.max_epochs)
    weights = torch.tensor(LOSS_WEIGHTS)

    def val_scores() -> tuple[float, float]:
        network.eval()
        with torch.no_grad():
            feats, seg, ops, target = val.batch(torch.arange(len(splits.validation)))
            pred = network(norm(feats), seg, len(splits.validation), ops)
        network.train()
        loss = float((((pred - target) ** 2) * weights).sum(1).mean())
        mape = float((torch.exp(pred[:, 2] - target[:, 2]) - 1).abs().mean())
        return loss, mape

    first_loss, best_mape = val_scores()
    best = (first_loss, best_mape, 0, copy.deepcopy(network.state_dict()))
    writer = None
    if log_csv is not None:
        log_csv.parent.mkdir(parents=True, exist_ok=True)
        handle = open(log_csv, "w", newline="")
        writer = csv.writer(handle)
        writer.writerow(["epoch", "train_loss", "validation_loss", "validation_mape", "lr"])
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        order = torch.from_numpy(rng.permutation(len(splits.train)))
        losses = []
        for chunk in order.split(config.batch_sets):
            feats, seg, ops, target = train.batch(chunk)
            pred = network(norm(feats), seg, len(chunk), ops)
            loss = (((pred - target) ** 2) * weights).sum(1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        val_loss, val_mape = val_scores()
        if writer:
            writer.writerow(
                [
                    epoch,
                    f"{np.mean(losses):.6f}",
                    f"{val_loss:.6f}",
                    f"{val_mape:.5f}",
                    f"{scheduler.get_last_lr()[0]:.2e}",
                ]
            )
        on_epoch(epoch, val_mape)
        if val_loss < best[0]:
            best = (val_loss, val_mape, epoch, copy.deepcopy(network.state_dict()))
        elif epoch - best[2] >= config.patience:
            break
    if writer:
        handle.close()
    network.load_state_dict(best[3])
    batches = [s.batch_size for s in splits.train]
    ranges = TrainedRanges.of([s.tables for s in splits.train], batches)
    linear_beyond = None
    if start_from is not None:
        ranges = ranges if start_from.ranges is None else start_from.ranges.union(ranges)
        linear_beyond = start_from.linear_beyond
    model = NeuralCostModel(
        network, mean, std, profile, row_cap_bytes, int(np.median(batches)), ranges=ranges, linear_beyond=linear_beyond
    )
    return TrainResult(model, best[2], epoch, best[1], first_loss, best[0], time.perf_counter() - start)
