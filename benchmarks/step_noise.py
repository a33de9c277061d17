"""How much one device set's measured step moves from one call to the next on this machine: the
floor under every measured comparison (`evaluate --measure`, `plan --verify`).

    python benchmarks/step_noise.py --tables 7 --repeats 60 --calls 20     # Criteo Kaggle's first 7 tables

Builds the set's FBGEMM TBE step once, then makes ``--calls`` calls of ``--repeats`` timed steps
(forward + backward + update, thread time, after 2 warm-ups), ``--pause`` seconds apart, and
prints, for each statistic of a call's steps (median, min, 10th percentile, mean), its mean over
calls, coefficient of variation and range. Run it with the allocator settings
(``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 MALLOC_TOP_PAD_=1073741824``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.presets import load_workload_or_preset  # noqa: E402
from cost_model.bench.harness import BenchConfig, _build_tbe, _Timer, make_batch  # noqa: E402
from cost_model.process import one_thread  # noqa: E402
from cost_model.profile import default_mode  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="criteo_kaggle")
    parser.add_argument("--tables", type=int, default=7, help="the workload's first N tables, as one device set")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.2)
    args = parser.parse_args()
    one_thread()
    workload, _ = load_workload_or_preset(args.workload)
    tables = list(workload.tables)[: args.tables]
    config = BenchConfig(mode=default_mode(), batch_size=args.batch_size)
    forward, backward = _build_tbe(tables, config)
    rng = np.random.default_rng(0)
    batches = [make_batch(tables, config, rng) for _ in range(2)]
    timer = _Timer("cpu")
    calls = []
    for _ in range(args.calls):
        steps = []
        for step in range(2 + args.repeats):
            indices, offsets = batches[step % 2]
            out, f_ms = timer.run(lambda: forward(indices, offsets))
            _, b_ms = timer.run(lambda: backward(out))
            if step >= 2:
                steps.append(f_ms + b_ms)
        calls.append(steps)
        time.sleep(args.pause)
    print(
        f"{args.workload}, first {len(tables)} tables, batch {args.batch_size}: {args.calls} calls of "
        f"{args.repeats} steps, {args.pause} s apart"
    )
    for name, statistic in (
        ("median", statistics.median),
        ("min", min),
        ("p10", lambda v: float(np.percentile(v, 10))),
        ("mean", statistics.fmean),
    ):
        values = [statistic(steps) for steps in calls]
        mean = statistics.fmean(values)
        print(
            f"{name:>6}: mean {mean:.3f} ms, call-to-call cv {statistics.stdev(values) / mean:.1%}, "
            f"range {min(values):.3f}-{max(values):.3f} ms"
        )


if __name__ == "__main__":
    main()
