"""What the cost model's head arithmetic alone costs a distinct load-test request: a floor under
any faster implementation of the planners that keep today's cost model.

    python benchmarks/head_floor.py --requests 60 --out docs/figures/service_floor/head_floor.json

It plans the load test's ``--fresh`` bodies as a planning worker does (``benchmarks/request_cpu.py``'s
planner tasks: every default planner of the default profile), counts every call of the split
head (``cost_model.accumulator.SplitHead.log_total``: greedy placement's candidates, local search's
neighbourhoods, the rl planners' rollouts) and its rows, then times the head alone on calls of
those sizes (random inputs, one thread, process CPU) and sums them per request. Two floors come
out: the calls as the planners make them (most of them 8 rows, one per device), and the same
rows priced at the best per-row cost any call size reached (every row in one large batch). The
heuristics' plans, scored through the torch network, are not counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per distinct call size")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()

    import numpy as np
    import request_cpu

    from cost_model import accumulator
    from autoshard.profiles import load_models

    calls: list[int] = []
    log_total = accumulator.SplitHead.log_total

    def counted(head, first, largest):
        calls.append(first.shape[0])
        return log_total(head, first, largest)

    accumulator.SplitHead.log_total = counted  # type: ignore[method-assign]
    work = request_cpu.bodies(argparse.Namespace(tables=80, devices=8, same_names=False, warmup=args.warmup,
                                                 requests=args.requests))
    plan = request_cpu.planning(ROOT, ROOT / "data" / "models")
    per_request, planning_ms = [], []
    for i, (body, seed) in enumerate(work):
        calls.clear()
        answer = plan(body, seed)
        if i >= args.warmup:
            per_request.append(list(calls))
            planning_ms.append(answer["cpu_ms"])
    accumulator.SplitHead.log_total = log_total  # type: ignore[method-assign]

    head = load_models(ROOT / "data" / "models").resolve(None).model.split_head
    rng = np.random.default_rng(0)
    sizes = Counter(n for request in per_request for n in request)
    call_ms = {}
    for n in sorted(sizes):
        first = (rng.standard_normal((n, head.hidden)) * 0.1).astype(np.float32)
        largest = rng.standard_normal((n, head.w_max.shape[0])).astype(np.float32)
        for _ in range(20):
            head.log_total(first, largest)
        started = time.process_time()
        for _ in range(args.repeats):
            head.log_total(first, largest)
        call_ms[n] = (time.process_time() - started) / args.repeats * 1e3
    best_row_ms = min(ms / n for n, ms in call_ms.items())
    as_called = [sum(call_ms[n] for n in request) for request in per_request]
    batched = [sum(request) * best_row_ms for request in per_request]
    figures = {
        "requests": len(per_request), "tables": 80, "devices": 8,
        "head_calls_per_request_median": statistics.median(len(r) for r in per_request),
        "head_rows_per_request_median": statistics.median(sum(r) for r in per_request),
        "call_sizes_most_common": sizes.most_common(8),
        "us_per_row_at_8_rows": call_ms.get(8, float("nan")) / 8 * 1e3,
        "us_per_row_best": best_row_ms * 1e3, "best_at_rows": min(call_ms, key=lambda n: call_ms[n] / n),
        "head_ms_per_request_as_called": {"median": statistics.median(as_called), "min": min(as_called),
                                          "max": max(as_called)},
        "head_ms_per_request_batched": {"median": statistics.median(batched), "min": min(batched),
                                        "max": max(batched)},
        "planning_cpu_ms_per_request_median": statistics.median(planning_ms),
    }
    print(json.dumps(figures, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
