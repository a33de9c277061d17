"""What a microbenchmark records: its settings (``BenchConfig``) and its timings (``Measurement`` of
``Stats``). The bench writes them and the trace store reads them back, so they live with the traces."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from cost_model.profile import ExecutionMode

DEFAULT_ROW_CAP_BYTES = 128 * 1024**2


@dataclass(frozen=True, slots=True)
class BenchConfig:
    batch_size: int = 2048
    warmups: int = 2
    repeats: int = 7
    device: str = "cpu"
    mode: ExecutionMode = ExecutionMode.FBGEMM_TBE
    threads: int = 1
    row_cap_bytes: int = DEFAULT_ROW_CAP_BYTES
    learning_rate: float = 0.01


@dataclass(frozen=True, slots=True)
class Stats:
    """Median and inter-quartile range of repeated timings, in milliseconds."""

    median: float
    iqr: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        if len(values) >= 2:
            q = statistics.quantiles(values, n=4, method="inclusive")
            iqr = q[2] - q[0]
        else:
            iqr = 0.0
        return cls(statistics.median(values), iqr, len(values))

    def to_dict(self) -> dict:
        return {"median": round(self.median, 5), "iqr": round(self.iqr, 5), "n": self.n}

    @classmethod
    def from_dict(cls, data: dict) -> Stats:
        return cls(float(data["median"]), float(data["iqr"]), int(data["n"]))


@dataclass(frozen=True, slots=True)
class Measurement:
    forward: Stats
    backward: Stats  # backward + update
    total: Stats
