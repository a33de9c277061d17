"""Does a table get cheaper with company? The cost model's floor, checked on this machine.

Plans a synthetic task with greedy placement, then looks, on every device, for the sets a local
search would reach by swapping the costliest table of the max device in (device's tables minus
one, plus it). Where the network predicts such a set below the costly table alone, the table
alone and the first ``--sets`` such sets are measured (FBGEMM TBE forward + backward + update,
``--rounds`` interleaved rounds, allocator settings of the CLI), and predicted and measured
ratios to "alone" are printed and written to ``--out``.

    python benchmarks/floor_check.py                  # 1,000 tables x 128 devices, 5 rounds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoshard.cli.support import DEFAULT_MODEL, ensure_malloc_settings, load_profile_or_exit, one_thread  # noqa: E402
from autoshard.core.communication import WithCommunication  # noqa: E402
from autoshard.core.task import memory_for  # noqa: E402
from autoshard.planners.placement import PlacementState, place_workload  # noqa: E402
from autoshard.planners.placing import cheapest_after
from autoshard.planners.task_units import TaskUnits
from autoshard.planners.units import model_costs  # noqa: E402
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.types import Topology  # noqa: E402
from cost_model.bench.harness import BenchConfig, measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=128)
    parser.add_argument("--sets", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "floor_check.json")
    args = parser.parse_args()
    ensure_malloc_settings()
    one_thread()
    profile = load_profile_or_exit(DEFAULT_MODEL)
    model, batch = profile.model, None
    pool = generate_pool(PoolConfig(size=12_500, seed=7)).all
    workload = sample_task(pool, args.tables, np.random.default_rng(args.tables), name=str(args.tables))
    batch = workload.batch_size
    topology = Topology(args.devices, memory_for(workload, args.devices, 1.3))
    priced = WithCommunication(model, profile.communication, args.devices)
    devices = place_workload(TaskUnits(workload, topology, model_costs(priced, batch)), False, cheapest_after,
                             lambda units: PlacementState(units, topology, priced.accumulator(args.devices, batch),
                                                          lookahead=True)).devices
    costly = max(max(devices, key=lambda s: s.load).tables, key=lambda t: model.predict([t], batch))
    alone = float(model._network_detail([[costly]], batch)[0, 2])
    company = []
    for state in devices:
        for j in range(len(state.units)):
            rest = [t for k, t in enumerate(state.tables) if k != j and t != costly]
            if rest:
                company.append((float(model._network_detail([[costly, *rest]], batch)[0, 2]), rest))
    cheaper = sorted((c for c in company if c[0] < alone), key=lambda c: c[0])
    print(f"{costly.name}: network {alone:.3f} ms alone; {len(cheaper)} of {len(company)} sets with company "
          f"predicted cheaper", flush=True)
    sets = {"alone": [costly], **{f"company{i}": [costly, *rest] for i, (_, rest) in enumerate(cheaper[:args.sets])}}
    predicted = {"alone": alone, **{f"company{i}": c for i, (c, _) in enumerate(cheaper[:args.sets])}}
    config = BenchConfig(batch_size=batch)
    measured: dict[str, list[float]] = {name: [] for name in sets}
    for round_ in range(args.rounds):
        for name, tables in sets.items():
            measured[name].append(measure(tables, config, seed=round_).total.median)
    base = statistics.median(measured["alone"])
    rows = [{"set": name, "tables": len(sets[name]), "network_ms": predicted[name],
             "floored_ms": float(model.predict(sets[name], batch)),
             "predicted_vs_alone": predicted[name] / alone,
             "measured_median_ms": statistics.median(measured[name]),
             "measured_iqr_ms": [float(np.percentile(measured[name], 25)), float(np.percentile(measured[name], 75))],
             "measured_vs_alone": statistics.median(measured[name]) / base} for name in sets]
    for row in rows:
        print(json.dumps(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "table": costly.name,
                                    "batch_size": batch, "rounds": args.rounds, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
