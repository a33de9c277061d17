"""A cheap, deterministic, non-additive CostModel for tests (no trained network needed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from autoshard.core.costing import SetCostModel
from autoshard.core.types import Table


@dataclass
class AnalyticalTestCostModel(SetCostModel):
    """ms = (sum of lookup bytes / 1e7) x (1 + 0.05 (n - 1)) + 0.1 n for n tables: co-located
    tables slow each other down, so a set costs more than the sum of its singles.
    ``calls`` counts ``predict_many`` calls."""

    calls: int = field(default=0)

    def predict(self, tables: Sequence[Table], batch_size: int) -> float:
        n = len(tables)
        lookup_bytes = sum(batch_size * t.pooling_factor * t.embedding_dim * t.bytes_per_element for t in tables)
        return lookup_bytes / 1e7 * (1 + 0.05 * max(n - 1, 0)) + 0.1 * n

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        self.calls += 1
        return [self.predict(tables, batch_size) for tables in table_sets]


@dataclass
class FixedCostTestModel(SetCostModel):
    """ms = ``fixed`` + ``per_table`` n for a set of n >= 1 tables (0 for none): a device's fixed
    cost (kernel launches, the all-to-all's latency) is paid once, however many tables it holds."""

    fixed: float = 1.0
    per_table: float = 0.1

    def predict(self, tables: Sequence[Table], batch_size: int) -> float:
        return self.fixed + self.per_table * len(tables) if tables else 0.0

    def predict_many(self, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
        return [self.predict(tables, batch_size) for tables in table_sets]
