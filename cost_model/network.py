"""The set network: a per-table encoder, permutation-invariant pooling, and a cost head.

tables --MLP--> per-table codes --(sum | mean | max over the set) + log(set size)--> MLP head
--> log milliseconds of forward, backward+update and total. Sets of any size share one flat
batch: ``segments[i]`` says which set table ``i`` belongs to (no padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cost_model.features import NUM_FEATURES

OUTPUTS = ("forward", "backward", "total")


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    num_features: int = NUM_FEATURES
    table_hidden: int = 256
    table_code: int = 96
    head_hidden: int = 256
    dropout: float = 0.1


def _mlp(sizes: list[int], dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.SiLU())
            if dropout:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class SetCostNetwork(nn.Module):
    def __init__(self, config: NetworkConfig = NetworkConfig()) -> None:
        super().__init__()
        self.config = config
        c = config
        self.encoder = _mlp([c.num_features, c.table_hidden, c.table_hidden, c.table_code], c.dropout)
        self.head = _mlp([3 * c.table_code + 1, c.head_hidden, c.head_hidden // 2, len(OUTPUTS)], c.dropout)

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """Per-table codes; they depend on the table alone, so callers may cache them."""
        return self.encoder(features)

    def pool_and_predict(self, codes: torch.Tensor, segments: torch.Tensor, num_sets: int) -> torch.Tensor:
        """Log-ms predictions ``[num_sets, 3]`` from per-table codes and their set ids."""
        width = codes.shape[1]
        index = segments.unsqueeze(1).expand(-1, width)
        total = codes.new_zeros(num_sets, width).scatter_add_(0, index, codes)
        count = codes.new_zeros(num_sets).scatter_add_(0, segments, codes.new_ones(len(segments)))
        largest = codes.new_full((num_sets, width), -1e9).scatter_reduce_(0, index, codes, "amax")
        return self.predict_pooled(total, count, largest)

    def predict_pooled(self, total: torch.Tensor, count: torch.Tensor, largest: torch.Tensor) -> torch.Tensor:
        """Log-ms predictions from each set's pooled codes: their sum, the set size, their max."""
        clamped = count.clamp(min=1)
        pooled = torch.cat([total / 8.0, total / clamped.unsqueeze(1), largest, torch.log(clamped).unsqueeze(1)], dim=1)
        return self.head(pooled)

    def forward(self, features: torch.Tensor, segments: torch.Tensor, num_sets: int) -> torch.Tensor:
        return self.pool_and_predict(self.encode(features), segments, num_sets)
