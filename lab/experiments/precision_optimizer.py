"""Precision and optimizer on this machine: one 8-table set in fp32 / fp16 with SGD / row-wise
Adagrad, measured interleaved (A B C D, A B C D, ...) beside the shipped model's predictions.

    python lab/experiments/precision_optimizer.py   # writes tests/data/precision_optimizer.json

Which of fp16 and fp32, or SGD and row-wise Adagrad, is dearer depends on the machine (the CPU
kernels convert fp16 on every access; row-wise Adagrad reads and writes one state per row), so
the test of the shipped model (tests/test_audit_gaps.py) checks the order measured here.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.profiles import DEFAULT_MODEL, load_profile_or_exit  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from autoshard.core.types import Optimizer, Table  # noqa: E402
from cost_model.bench.harness import BenchConfig, measure  # noqa: E402
from cost_model.profile import default_mode, malloc_settings_active  # noqa: E402

BATCH, ROUNDS = 4096, 5
BASE = tuple(Table(f"t{i}", 10**(3 + i % 4), 64, 8.0, 0.5) for i in range(8))


def main() -> None:
    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    variants = {f"{'fp32' if b == 4 else 'fp16'} {o.value}": tuple(replace(t, bytes_per_element=b, optimizer=o)
                                                                    for t in BASE)
                for b in (4, 2) for o in (Optimizer.SGD, Optimizer.ROWWISE_ADAGRAD)}
    config = BenchConfig(mode=default_mode(), batch_size=BATCH)
    measured: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(ROUNDS):
        for name, tables in variants.items():
            measured[name].append(measure(list(tables), config, seed=r).total.median)
    rows = [{"variant": name, "measured_ms_median": statistics.median(ms), "measured_ms_rounds": ms,
             "predicted_ms": profile.model.predict(list(variants[name]), BATCH)} for name, ms in measured.items()]
    out = ROOT / "tests" / "data" / "precision_optimizer.json"
    out.write_text(json.dumps({"command": "python benchmarks/precision_optimizer.py", "batch_size": BATCH,
                               "rounds": ROUNDS, "malloc_settings": malloc_settings_active(),
                               "tables": [t.name for t in BASE], "rows": rows}, indent=1) + "\n")
    for row in rows:
        print(f"{row['variant']:22s} measured {row['measured_ms_median']:7.2f} ms  predicted {row['predicted_ms']:7.2f} ms")


if __name__ == "__main__":
    main()
