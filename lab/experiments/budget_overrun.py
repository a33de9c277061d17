"""A request past its time budget, then small ones: does the service answer at the budget, with
which planners' plans, and how long do its planning workers stay busy after the answer?

Starts the service of the checkout the script is run in (its working directory), with the
shipped models, then sends ``benchmarks/tight_memory.py``'s workload (3,000 tables, memory
binding, column splits allowed, every default planner) with ``time_budget_s``, and right after
its answer ``--small`` requests of the load test (80 tables x 8 devices), one after the other;
then it watches the workers' CPU time until they idle (less than 0.1 s of CPU in a second):

    python benchmarks/budget_overrun.py --out /tmp/new.json
    (cd /tmp/base && python /path/to/benchmarks/budget_overrun.py --out /tmp/base.json)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "benchmarks")]  # tight_memory; load_test

from load_test import Config, _children, cpu_seconds, request_body, start_service, stop_service  # noqa: E402
from tight_memory import workload  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=3000)
    parser.add_argument("--devices", type=int, default=512)
    parser.add_argument("--memory-gb", type=float, default=80.0)
    parser.add_argument("--budget", type=float, default=5.0)
    parser.add_argument("--small", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    root = Path.cwd()
    sys.path.insert(0, str(root))
    from autoshard.core.workload_file import workload_to_dict

    server, url = start_service(root, root / "data" / "models")
    try:
        big = {"workload": workload_to_dict(workload(args.tables, 0)), "allow_column_split": True,
               "topology": {"num_devices": args.devices, "device_memory_gb": args.memory_gb},
               "time_budget_s": args.budget}
        with httpx.Client(base_url=url, timeout=600) as client:
            started = time.perf_counter()
            answer = client.post("/v1/plans", json=big)
            big_s = time.perf_counter() - started
            found = answer.json() if answer.status_code == 200 else {}
            plans = {p["planner"]: {"partial": p.get("partial"), "max_cost_ms": p.get("max_cost_ms")}
                     for p in found.get("plans", [])}
            named = ", ".join(name + (" (partial)" if plan["partial"] else "") for name, plan in plans.items())
            answered = time.perf_counter()
            print(f"big request: HTTP {answer.status_code} in {big_s:.2f} s (budget {args.budget:g} s); plans: {named}",
                  flush=True)
            small = []
            for draw in range(1, args.small + 1):
                started = time.perf_counter()
                reply = client.post("/v1/plans", json=request_body(Config(), draw))
                small.append({"status": reply.status_code, "seconds": time.perf_counter() - started})
                print(f"small request {draw}: HTTP {reply.status_code} in {small[-1]['seconds']:.2f} s", flush=True)
        busy_s = busy_after(server.pid, answered)
        print(f"the planning workers idle {busy_s:.1f} s after the big request's answer", flush=True)
        args.out.write_text(json.dumps({"command": sys.argv, "checkout": str(root), "budget_s": args.budget,
                                        "big": {"status": answer.status_code, "seconds": big_s, "plans": plans},
                                        "small": small, "workers_busy_after_answer_s": busy_s}, indent=1))
    finally:
        stop_service(server)


def busy_after(server: int, answered: float, limit_s: float = 300.0) -> float:
    """Seconds from ``answered`` until the server's planning workers use less than 0.1 s of CPU
    in a second (at most ``limit_s``)."""
    used = lambda: sum(cpu_seconds(c) for c in _children(server))  # noqa: E731
    before = used()
    while time.perf_counter() - answered < limit_s:
        time.sleep(1.0)
        now = used()
        if now - before < 0.1:
            return time.perf_counter() - answered - 1.0
        before = now
    return limit_s


if __name__ == "__main__":
    main()
