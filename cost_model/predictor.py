"""The trained cost model behind the project's ``CostModel`` interface, built for hot loops.

Per-table codes depend on the table alone, so they are computed once per (table, batch size) and
cached; a prediction for many sets is then one pooling + one head call over a flat batch.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from autoshard.types import Table
from cost_model.features import FeatureCache
from cost_model.network import SetCostNetwork
from cost_model.profile import DeviceProfile


class NeuralCostModel:
    """Predicts a device's milliseconds per iteration for the set of tables it holds."""

    def __init__(self, network: SetCostNetwork, feature_mean: Any, feature_std: Any,
                 profile: DeviceProfile, row_cap_bytes: int, trained_batch_size: int,
                 metrics: dict[str, Any] | None = None, max_cached: int = 200_000) -> None:
        self.network = network.eval()
        self.feature_mean = torch.as_tensor(feature_mean, dtype=torch.float32)
        self.feature_std = torch.as_tensor(feature_std, dtype=torch.float32)
        self.profile, self.row_cap_bytes = profile, row_cap_bytes
        self.trained_batch_size, self.metrics = trained_batch_size, metrics or {}
        self.features = FeatureCache(row_cap_bytes)
        self._codes: dict[tuple[Table, int], torch.Tensor] = {}
        self._max_cached = max_cached

    def normalise(self, raw: np.ndarray) -> torch.Tensor:
        return (torch.from_numpy(raw) - self.feature_mean) / self.feature_std

    def codes(self, tables: Sequence[Table], batch_size: int) -> torch.Tensor:
        missing = list({t for t in tables if (t, batch_size) not in self._codes})
        if missing:
            if len(self._codes) + len(missing) > self._max_cached:
                self._codes.clear()
            with torch.inference_mode():
                fresh = self.network.encode(self.normalise(self.features(missing, batch_size)))
            for table, code in zip(missing, fresh):
                self._codes[(table, batch_size)] = code
        return torch.stack([self._codes[(t, batch_size)] for t in tables])

    def predict_detail_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> np.ndarray:
        """``[len(table_sets), 3]`` milliseconds: forward, backward+update, total (0 for an empty set)."""
        out = np.zeros((len(table_sets), 3))
        nonempty = [i for i, s in enumerate(table_sets) if len(s)]
        if not nonempty:
            return out
        flat = [t for i in nonempty for t in table_sets[i]]
        segments = torch.repeat_interleave(torch.arange(len(nonempty)),
                                           torch.tensor([len(table_sets[i]) for i in nonempty]))
        with torch.inference_mode():
            log_ms = self.network.pool_and_predict(self.codes(flat, batch_size), segments, len(nonempty))
        out[nonempty] = torch.exp(log_ms).double().numpy()
        return out

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        return self.predict_detail_many(table_sets, batch_size)[:, 2].tolist()

    def predict(self, tables: Sequence[Table], batch_size: int) -> float:
        return self.predict_many([tables], batch_size)[0]
