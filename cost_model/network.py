"""The set network: a per-table encoder, permutation-invariant pooling, and a cost head.

tables --MLP--> per-table codes --(sum | mean | max over the set) + log(set size)--> MLP head
--> log milliseconds of forward, backward+update and total. Sets of any size share one flat
batch: ``segments[i]`` says which set table ``i`` belongs to (no padding).

**Grouped** (``NetworkConfig.grouped``): a device runs one TBE op per (precision, optimizer)
group of its tables (``cost_model.features.op_key``), so the head prices each **op** from its
own tables' pooled codes, the ops' milliseconds add up, and an **interaction** head multiplies
the sum by ``exp((1 - 1/G) * interaction(pooled codes of the whole set, log G))`` for G ops. The
factor is exactly 1 for a set of one op: a homogeneous set (every table fp32 + SGD, as most
workloads are) is priced by the op head alone, which every group of every mixed training set
also trained, instead of by a set head that saw homogeneous sets of a few tables only.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from cost_model.features import NUM_FEATURES

OUTPUTS = ("forward", "backward", "total")
# Predictions are clamped to [0.1 us, 10^7 ms] in log space: far outside anything measurable, so
# in-range answers never touch it, and an extrapolation is never inf, 0 or nan.
LOG_MS_MIN, LOG_MS_MAX = math.log(1e-4), math.log(1e7)


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    num_features: int = NUM_FEATURES
    table_hidden: int = 256
    table_code: int = 96
    head_hidden: int = 256
    dropout: float = 0.1
    grouped: bool = False  # price each (precision, optimizer) op, then their interaction (module docstring)
    interaction_hidden: int = 64


@dataclass(frozen=True, slots=True)
class OpIndex:
    """For a grouped network: which op each table of a flat batch belongs to (``table_op``), and
    which set each op belongs to (``op_set``)."""

    table_op: torch.Tensor
    op_set: torch.Tensor
    num_ops: int

    @classmethod
    def of(cls, keys: Sequence[Sequence[Hashable]]) -> OpIndex:
        """From each set's per-table op keys, in flat order; ops numbered in order of first
        appearance within each set."""
        table_op: list[int] = []
        op_set: list[int] = []
        for set_index, set_keys in enumerate(keys):
            local: dict[Hashable, int] = {}
            for key in set_keys:
                if key not in local:
                    local[key] = len(op_set)
                    op_set.append(set_index)
                table_op.append(local[key])
        return cls(torch.tensor(table_op, dtype=torch.long), torch.tensor(op_set, dtype=torch.long), len(op_set))


def pool(codes: torch.Tensor, segments: torch.Tensor, num_sets: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per segment: the sum of its codes, its size, the max of its codes (-1e9 where empty)."""
    width = codes.shape[1]
    index = segments.unsqueeze(1).expand(-1, width)
    total = codes.new_zeros(num_sets, width).scatter_add_(0, index, codes)
    count = codes.new_zeros(num_sets).scatter_add_(0, segments, codes.new_ones(len(segments)))
    largest = codes.new_full((num_sets, width), -1e9).scatter_reduce_(0, index, codes, "amax")
    return total, count, largest


def _mlp(sizes: list[int], dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.SiLU())
            if dropout:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


def pooled_input(total, count, largest):
    """The head's input per set, from the sum, count and max of its table codes:
    ``[sum / 8, mean, max, log n]``. Takes torch tensors or numpy arrays (the numpy head of
    ``cost_model.accumulator``), ``total``/``largest`` ``[sets, width]``, ``count`` ``[sets]``."""
    clamped = count.clip(1)[:, None]
    parts = [
        total / 8.0,
        total / clamped,
        largest,
        clamped.log() if isinstance(clamped, torch.Tensor) else np.log(clamped),
    ]
    return torch.cat(parts, dim=1) if isinstance(total, torch.Tensor) else np.concatenate(parts, axis=1)


def linear_scale(count, size_limit: int | None):
    """Per set, ``max(1, n / size_limit)``: how many ``size_limit``-table sets' worth it holds
    (``None`` without a limit). Takes a torch tensor or a numpy array of set sizes."""
    if size_limit is None:
        return None
    return (count / float(size_limit)).clip(1.0)


class SetCostNetwork(nn.Module):
    def __init__(self, config: NetworkConfig = NetworkConfig()) -> None:
        super().__init__()
        self.config = config
        c = config
        self.encoder = _mlp([c.num_features, c.table_hidden, c.table_hidden, c.table_code], c.dropout)
        self.head = _mlp([3 * c.table_code + 1, c.head_hidden, c.head_hidden // 2, len(OUTPUTS)], c.dropout)
        if c.grouped:  # starts at a factor of 1: ops simply add up until training says otherwise
            self.interaction = _mlp([3 * c.table_code + 2, c.interaction_hidden, len(OUTPUTS)], c.dropout)
            last = self.interaction[-1]
            assert isinstance(last, nn.Linear)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """Per-table codes; they depend on the table alone, so callers may cache them."""
        return self.encoder(features)

    def pool_and_predict(
        self,
        codes: torch.Tensor,
        segments: torch.Tensor,
        num_sets: int,
        size_limit: int | None = None,
        ops: OpIndex | None = None,
    ) -> torch.Tensor:
        """Log-ms predictions ``[num_sets, 3]`` from per-table codes and their set ids (and, for
        a grouped network, their ops: ``ops`` is required then)."""
        if not self.config.grouped:
            return self.predict_pooled(*pool(codes, segments, num_sets), size_limit)
        if ops is None:
            raise ValueError("a grouped network needs each table's op (OpIndex)")
        op_ms = torch.exp(self.predict_pooled(*pool(codes, ops.table_op, ops.num_ops), size_limit))
        ms = codes.new_zeros(num_sets, len(OUTPUTS)).index_add_(0, ops.op_set, op_ms)
        num_ops = codes.new_zeros(num_sets).index_add_(0, ops.op_set, codes.new_ones(ops.num_ops))
        factor = self.interaction_log(*pool(codes, segments, num_sets), num_ops, size_limit)
        return (torch.log(ms) + factor).clamp(LOG_MS_MIN, LOG_MS_MAX)

    def interaction_log(
        self,
        total: torch.Tensor,
        count: torch.Tensor,
        largest: torch.Tensor,
        num_ops: torch.Tensor,
        size_limit: int | None = None,
    ) -> torch.Tensor:
        """The log of the factor on the ops' summed milliseconds, ``[sets, 3]``: 0 for one op."""
        scale = linear_scale(count, size_limit)
        if scale is not None:
            total, count = total / scale[:, None], count / scale
        ops = num_ops.clip(1)
        x = torch.cat([pooled_input(total, count, largest), ops.log()[:, None]], dim=1)
        return (1 - 1 / ops)[:, None] * self.interaction(x)

    def predict_pooled(
        self, total: torch.Tensor, count: torch.Tensor, largest: torch.Tensor, size_limit: int | None = None
    ) -> torch.Tensor:
        """Log-ms predictions from each set's pooled codes: their sum, the set size, their max.

        ``size_limit`` (the largest set trained on): a larger set of n tables is priced as
        ``n / size_limit`` times a ``size_limit``-table set with the same mean and max code
        (``linear_scale``), so its cost grows linearly past what was measured instead of
        following the head into a ``log n`` it never saw."""
        scale = linear_scale(count, size_limit)
        if scale is None:
            return self.head(pooled_input(total, count, largest)).clamp(LOG_MS_MIN, LOG_MS_MAX)
        log_ms = self.head(pooled_input(total / scale[:, None], count / scale, largest)) + scale.log()[:, None]
        return log_ms.clamp(LOG_MS_MIN, LOG_MS_MAX)

    def forward(
        self, features: torch.Tensor, segments: torch.Tensor, num_sets: int, ops: OpIndex | None = None
    ) -> torch.Tensor:
        return self.pool_and_predict(self.encode(features), segments, num_sets, ops=ops)
