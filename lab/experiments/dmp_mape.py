"""Issue 61: cost_greedy's plans of every sharding type run end to end under TorchRec's DMP on 2
CPU ranks; the model's per-rank step time against the measurement, part by part.

    nice python lab/experiments/dmp_mape.py                      # ~5 min on 2 cores
    nice python lab/experiments/dmp_mape.py --quick              # smoke run: 1 workload, 1 round

For each of three synthetic workloads (one table too large for a device, medium tables, tiny
ones), cost_greedy plans 2 ranks under several sharding-type limits and per-table constraints,
on 2 emulated hosts x 1 device (the issue's topology: each host's rank in its own network
namespace, a veth shaped to 10 Gbit/s between them, where this runs as root) and on 1 host x 2 (where table-row-wise
and grid shards are real row splits). Distinct plans of a workload run in one DMP world,
interleaved, each twice (the second copy measures the noise floor). Reports:

- per-rank step MAPE of our model: the product's price (``predicted``: DMP's batch, a sharded
  shard at B x W bags, a replica at its own B with its full pooling factor; ``autoshard.core
  .dmp_batch``), and, for before/after on the same measurements, the two earlier conventions
  (``legacy_ranks``: every shard at the per-rank B, a replica at B bags of L / W lookups; and
  every shard at B x W, a replica at B x W bags of L / W; and ``ids_once_per_tier``: the ids'
  fixed cost once per (collective, tier), as before it was paid once per sharding-type group);
- the noise floor: the same plan's two copies against each other;
- pairs of plans DMP measures more than 10% apart: how often each judge names the faster one
  (our model in each convention, TorchRec's estimator);
- per part (lookup, output dist, all-reduce, input dist): measured over predicted, and the
  lookups of ranks with and without replicas apart (DMP runs replicas with the dense kernel).

Writes ``lab/results/dmp_mape/summary.json`` (small) and prints it. ``--reprice RESULT.json``
prices a result's measurements again with the current model (the same plans, made again and
checked against the result's lookups and output dist) and writes ``RESULT.repriced.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autoshard.core.constraints import constraints_from_dict  # noqa: E402
from autoshard.core.sharding import ShardingType as S  # noqa: E402
from autoshard.core.types import GIB, ShardingPlan, Table, Topology, Workload  # noqa: E402

BATCH = 2048  # per rank
GAP = 0.10  # pairs DMP measures more than this apart


def workloads() -> list[Workload]:
    """Three workloads: one table over a device's memory, medium tables, tiny ones (rows, dim, pooling, zipf)."""
    specs = {
        "w_mixed": [
            (400_000, 64, 20, 1.0),
            (50_000, 32, 5, 0.8),
            (50_000, 128, 10, 1.1),
            (2_000, 16, 1, 0.5),
            (100_000, 64, 30, 1.2),
            (1_000, 32, 3, 0.9),
            (80_000, 64, 8, 1.0),
            (500, 16, 2, 0.6),
        ],
        "w_wide": [
            (200_000, 128, 12, 1.05),
            (30_000, 64, 25, 0.9),
            (60_000, 96, 6, 1.2),
            (4_000, 32, 4, 0.7),
            (20_000, 128, 15, 1.0),
            (800, 64, 2, 0.5),
        ],
        "w_many": [
            (300_000, 32, 40, 1.1),
            *[(5_000 * (i + 1), 16 * (1 + i % 4), 2 + 3 * i, 0.6 + 0.08 * i) for i in range(9)],
            (600, 16, 1, 0.5),
            (1_500, 32, 2, 0.7),
        ],
    }
    return [
        Workload(tuple(Table(f"t{i}", r, d, float(pf), a) for i, (r, d, pf, a) in enumerate(rows)), BATCH, name)
        for name, rows in specs.items()
    ]


@dataclass(frozen=True)
class Variant:
    name: str
    hosts: int  # 2 x 1 or 1 x 2
    types: frozenset[S]
    forced: dict  # table role -> sharding types


ALL = frozenset(S)
VARIANTS = [
    Variant("all", 2, ALL, {}),
    Variant("tw_cw", 2, frozenset({S.TABLE_WISE, S.COLUMN_WISE}), {}),
    Variant("rw_only", 2, frozenset({S.ROW_WISE}), {}),
    Variant("dp_tiny", 2, ALL, {"tiny": ["data_parallel"]}),
    Variant("giant_cw_dp", 2, ALL, {"giant": ["column_wise"], "tiny": ["data_parallel"]}),
    Variant("medium_rw", 2, ALL, {"medium": ["row_wise"]}),
    Variant("twrw", 1, frozenset({S.TABLE_WISE, S.TABLE_ROW_WISE}), {}),
    Variant("twcw_dp", 1, ALL, {"giant": ["table_column_wise"], "tiny": ["data_parallel"]}),
]


def roles(workload: Workload, cap_bytes: int) -> dict[str, list[str]]:
    big = [t.name for t in workload.tables if t.memory_bytes > cap_bytes]
    tiny = [t.name for t in workload.tables if t.num_embeddings <= 2_000]
    medium = [t.name for t in workload.tables if t.name not in big and t.name not in tiny]
    return {"giant": big, "tiny": tiny, "medium": medium[:2]}


def topology(workload: Workload, hosts: int) -> Topology:
    """2 ranks whose memory holds the tables but not the largest alone; the links' bandwidths
    TorchRec's defaults, so that the profile's communication model prices both tiers as measured."""
    largest = max(t.memory_bytes for t in workload.tables)
    cap = max(0.55 * workload.memory_bytes, 0.9 * largest) / GIB
    return Topology.cluster(hosts, 2 // hosts, cap)


def plan_variants(workload: Workload, profile: Any) -> list[tuple[str, ShardingPlan, Topology]]:
    """cost_greedy's plan of each variant (distinct placements only, per topology)."""
    from dataclasses import replace

    from autoshard.planners.context import PlannerContext
    from autoshard.planning.compare import compare_planners

    out: list[tuple[str, ShardingPlan, Topology]] = []
    seen: set[tuple] = set()
    for v in VARIANTS:
        topo = topology(workload, v.hosts)
        role = roles(workload, topo.device_memory_bytes)
        forced = {name: {"sharding_types": kinds} for r, kinds in v.forced.items() for name in role[r]}
        constrained = replace(
            workload, constraints=constraints_from_dict(forced, [], {t.name for t in workload.tables})
        )
        context = PlannerContext(profile.model, None, 0, True, 10.0, sharding_types=v.types)
        result = compare_planners(constrained, topo, ["cost_greedy"], context, profile.communication)
        if not result.plans:
            print(f"{workload.name}/{v.name}: no plan ({result.skipped})", flush=True)
            continue
        plan = replace(result.plans[0], planner=f"{workload.name}/{v.name}")
        key = (v.hosts, tuple(sorted(d.set_key for d in plan.devices)))
        if key in seen:
            print(f"{workload.name}/{v.name}: same placement as an earlier variant", flush=True)
            continue
        seen.add(key)
        out.append((v.name, plan, topo))
    base = next(((p, t) for n, p, t in out if n == "twrw"), None)
    if base is not None:
        out.append(("grid_by_hand", grid_variant(workload, *base, profile), base[1]))
    return out


def grid_variant(workload: Workload, plan: ShardingPlan, topo: Topology, profile: Any) -> ShardingPlan:
    """cost_greedy does not choose grid on 2 ranks (one host of 2, or 2 hosts of 1: a grid there
    is a table-row- or column-wise split): ``plan`` with its largest table made a grid by hand,
    two column blocks each row-sharded over the host's 2 ranks, priced by the model."""
    from autoshard.core.communication import WithCommunication
    from autoshard.core.types import DevicePlan, row_shards

    big = max(workload.tables, key=lambda t: t.memory_bytes)
    half = big.embedding_dim // 2
    devices = [[s for s in d.shards if s.table.name != big.name] for d in plan.devices]
    for offset in (0, half):
        for j, shard in enumerate(row_shards(big, 2, S.GRID_SHARD, offset, half)):
            devices[j].append(shard)
    model = WithCommunication(profile.model, profile.communication, topo)
    costs = model.predict_many([[s.as_table for s in d] for d in devices], workload.batch_size)
    name = f"{workload.name}/grid_by_hand"
    return ShardingPlan(name, tuple(DevicePlan(tuple(d), c) for d, c in zip(devices, costs)))


def types_of(plan: ShardingPlan) -> list[str]:
    return sorted({s.sharding_type.value for d in plan.devices for s in d.shards})


def measure_workload(workload: Workload, profile: Any, rounds: int, steps: int) -> list[dict]:
    """Every variant's plan of ``workload`` (twice) in one DMP world per topology; rows per plan."""
    from dataclasses import replace

    from autoshard.torchrec.dmp_run import DistributedConfig
    from autoshard.torchrec.dmp_verify import DmpVerifyConfig, measure_plans_dmp
    from autoshard.torchrec.judges import predict_ranks, torchrec_estimate_ms
    from cost_model.bench.netns import missing_privilege

    variants = plan_variants(workload, profile)
    rows = []
    for hosts in (2, 1):
        group = [(n, p, t) for n, p, t in variants if t.num_hosts == hosts]
        if not group:
            continue
        topo = group[0][2]
        twice = [p for _, p, _ in group] + [replace(p, planner=p.planner + "#2") for _, p, _ in group]
        config = DmpVerifyConfig(
            DistributedConfig(
                world_size=2,
                local_world_size=2 // hosts,
                steps=steps,
                warmups=2,
                batch_size=workload.batch_size,
                row_cap_bytes=128 * 2**20,
            ),
            rounds=rounds,
            namespaces=hosts == 2 and missing_privilege() is None,  # 2 emulated hosts: a namespace each
        )
        started = time.perf_counter()
        measured = measure_plans_dmp(twice, workload, config)
        print(
            f"{workload.name} {hosts}x{2 // hosts}: {len(twice)} runs in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        for k, (_, plan, _) in enumerate(group):
            first, second = measured[k], measured[k + len(group)]
            ours = predict_ranks(plan, workload.batch_size, topo, profile.model, profile.communication)
            per_rank = legacy_ranks(plan, workload.batch_size, topo, profile)
            ids_once = ids_once_per_tier(plan, workload.batch_size, topo, profile)
            bxw_all = legacy_ranks(plan, workload.batch_size * 2, topo, profile)
            try:
                estimate = torchrec_estimate_ms(plan, workload, topo, "cuda")
            except Exception as error:  # noqa: BLE001
                estimate = None
                print(f"  estimator failed on {plan.planner}: {error}", flush=True)
            rows.append(
                {
                    "plan": plan.planner,
                    "workload": workload.name,
                    "topology": f"{hosts}x{2 // hosts}",
                    "network": first.network,
                    "types": types_of(plan),
                    "outputs_match": first.outputs_match,
                    "planned_max_ms": round(plan.max_cost_ms, 4),
                    "torchrec_estimate_ms": None if estimate is None else [round(e, 4) for e in estimate],
                    "has_replicas": [any(s.sharding_type is S.DATA_PARALLEL for s in d.shards) for d in plan.devices],
                    "ranks": [_rank(*r) for r in zip(first.ranks, second.ranks, ours, per_rank, bxw_all, ids_once)],
                }
            )
    return rows


def legacy_ranks(plan: ShardingPlan, bags: int, topo: Topology, profile: Any) -> list:
    """The product's prices before DMP's batch (lab only, for before/after): every shard, a
    replica too, at ``bags`` (a replica at L / W lookups a bag, its ``as_table``), compute and
    collectives alike. The communication model now takes the per-rank batch and carries B x W,
    so it is asked at ``bags / W``."""
    from autoshard.core.costing import predict_nonempty
    from autoshard.torchrec.judges import _rank_prediction

    sets = [[s.as_table for s in d.shards] for d in plan.devices]
    compute = predict_nonempty(profile.model, sets, bags)
    per_rank = bags // topo.num_devices
    return [
        _rank_prediction(k, compute[k], tables, per_rank, topo, profile.communication) for k, tables in enumerate(sets)
    ]


def ids_once_per_tier(plan: ShardingPlan, batch_size: int, topo: Topology, profile: Any) -> list:
    """The product's price before the ids were priced per group (lab only, for before/after):
    each ids collective's fixed cost (``CALLS`` x latency) once per tier its ids cross, however
    many sharding-type groups of the rank use it."""
    from dataclasses import replace

    from autoshard.core.collectives import CALLS, IDS, Tier, ids_collective
    from autoshard.torchrec.judges import predict_ranks

    comm = profile.communication
    crossed = [t for t, on in ((Tier.INTRA, topo.local_world_size > 1), (Tier.INTER, topo.num_hosts > 1)) if on]
    out = []
    for rank, device in zip(predict_ranks(plan, batch_size, topo, profile.model, comm), plan.devices):
        groups = {(s.sharding_type, s.table.pooled) for s in device.shards if s.sharding_type is not S.DATA_PARALLEL}
        extra = 0.0
        for collective in IDS:
            used = sum(ids_collective(kind) is collective for kind, _ in groups)
            extra += sum(
                max(0, used - 1) * CALLS[collective] * comm.fit(collective, t, topo).latency_ms for t in crossed
            )
        out.append(replace(rank, input_dist_ms=(rank.input_dist_ms or 0.0) - extra))
    return out


def _rank(first: Any, second: Any, ours: Any, per_rank: Any, bxw_all: Any, ids_once: Any) -> dict:
    parts = dict(first.parts)
    return {
        "rank": first.rank,
        "measured_ms": round(first.busy_ms, 4),
        "measured_again_ms": round(second.busy_ms, 4),
        "wall_ms": round(first.wall_ms, 4),
        "parts_ms": {k: round(v, 4) for k, v in parts.items()},
        "cpu_parts_ms": {k: round(v, 4) for k, v in first.cpu_parts},
        "predicted": _parts(ours),
        "predicted_per_rank_batch": _parts(per_rank),
        "predicted_bxw_all": _parts(bxw_all),
        "predicted_ids_once_per_tier": _parts(ids_once),
    }


def _parts(p: Any) -> dict:
    return {
        "input_dist": p.input_dist_ms,
        "lookup": p.lookup_ms,
        "output_dist": p.output_dist_ms,
        "allreduce": p.allreduce_ms,
    }


# --- the summary ----------------------------------------------------------------------------------


def _ape(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured


def _total(pred: dict) -> float:
    return pred["lookup"] + pred["output_dist"] + pred["allreduce"] + (pred["input_dist"] or 0.0)


def _lookup(r: dict) -> float:
    return r["parts_ms"]["lookup_forward"] + r["parts_ms"]["lookup_backward"]


def _output(r: dict) -> float:
    return r["parts_ms"]["output_dist_forward"] + r["parts_ms"]["output_dist_backward"]


CONVENTIONS = {
    "ours": "predicted",  # the product's price: DMP's batch
    "ours_before_per_rank_batch": "predicted_per_rank_batch",
    "ours_before_bxw_all": "predicted_bxw_all",
    "ours_before_ids_once_per_tier": "predicted_ids_once_per_tier",
}
PARTS_PRICED = {
    "lookup": _lookup,
    "output_dist": _output,
    "allreduce": lambda r: r["parts_ms"]["allreduce"],
    "input_dist": lambda r: r["parts_ms"]["input_dist"],
}


def summarise(rows: list[dict]) -> dict:
    ranks = [r for row in rows for r in row["ranks"]]
    busy = [r for r in ranks if r["measured_ms"] > 0]
    with_replicas = {id(r) for row in rows for r, has in zip(row["ranks"], row["has_replicas"]) if has}
    replicated = [r for r in busy if id(r) in with_replicas]
    sharded_only = [r for r in busy if id(r) not in with_replicas]
    conventions = {name: key for name, key in CONVENTIONS.items() if all(key in r for r in ranks)}
    total = {name: (lambda r, k=key: _total(r[k])) for name, key in conventions.items()}

    def mape(pred: Any, meas: Any, of: list[dict] = busy) -> float | None:
        return round(statistics.mean(_ape(pred(r), meas(r)) for r in of), 4) if of else None

    def ratio(meas: Any, pred: Any, of: list[dict]) -> float | None:
        found = [meas(r) / pred(r) for r in of if (pred(r) or 0) > 0]
        return round(statistics.median(found), 3) if found else None

    summary = {
        "plans": len(rows),
        "ranks": len(busy),
        "plans_per_type": {k: sum(k in row["types"] for row in rows) for k in sorted(s.value for s in S)},
        "outputs_match_all": all(row["outputs_match"] for row in rows),
        "mape_step": {
            **{name: mape(price, lambda r: r["measured_ms"]) for name, price in total.items()},
            "noise_floor_same_plan_twice": mape(lambda r: r["measured_again_ms"], lambda r: r["measured_ms"]),
        },
        "median_measured_over_predicted": {
            name: {part: ratio(meas, lambda r, k=key, p=part: r[k][p], busy) for part, meas in PARTS_PRICED.items()}
            for name, key in conventions.items()
        },
        "lookup_measured_over_predicted_by_replicas": {
            name: {
                "ranks_with_replicas": ratio(_lookup, lambda r, k=key: r[k]["lookup"], replicated),
                "ranks_without": ratio(_lookup, lambda r, k=key: r[k]["lookup"], sharded_only),
            }
            for name, key in conventions.items()
        },
        "mape_by_type": {
            kind: mape(lambda r: _total(r["predicted"]), lambda r: r["measured_ms"], of)
            for kind in sorted(k.value for k in S)
            if (of := [r for row in rows if kind in row["types"] for r in row["ranks"] if r["measured_ms"] > 0])
        },
        "input_dist_share_of_step": round(
            statistics.median(r["parts_ms"]["input_dist"] / r["measured_ms"] for r in busy), 3
        ),
        "pairs": pairs(rows),
    }
    return summary


def pairs(rows: list[dict]) -> dict:
    """Pairs of plans of one workload that DMP measures more than ``GAP`` apart (slowest rank):
    how often each judge names the faster one."""
    present = [(n, k) for n, k in CONVENTIONS.items() if all(k in r for row in rows for r in row["ranks"])]
    judges: dict[str, Any] = {
        **{name: (lambda row, k=key: max(_total(r[k]) for r in row["ranks"])) for name, key in present},
        "ours_as_planned": lambda row: row["planned_max_ms"],
        "torchrec_estimator": lambda row: max(row["torchrec_estimate_ms"]) if row["torchrec_estimate_ms"] else None,
        "noise_floor_second_measurement": lambda row: max(r["measured_again_ms"] for r in row["ranks"]),
    }
    measured = lambda row: max(r["measured_ms"] for r in row["ranks"])  # noqa: E731
    found = {name: [0, 0] for name in judges}
    misses: list[dict] = []
    count = 0
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if a["workload"] != b["workload"]:
                continue
            ma, mb = measured(a), measured(b)
            if max(ma, mb) / min(ma, mb) - 1 <= GAP:
                continue
            count += 1
            for name, judge in judges.items():
                ja, jb = judge(a), judge(b)
                if ja is None or jb is None:
                    continue
                found[name][1] += 1
                right = (ja < jb) == (ma < mb)
                found[name][0] += right
                if name == "ours" and not right:
                    fast, slow = (a, b) if ma < mb else (b, a)
                    misses.append({"faster": _where(fast), "slower": _where(slow)})
    return {
        "gap": GAP,
        "pairs": count,
        "named_faster": {
            k: {"right": v[0], "of": v[1], "share": round(v[0] / v[1], 3) if v[1] else None} for k, v in found.items()
        },
        "misses_ours": misses,
    }


def _where(row: dict) -> dict:
    """A plan's slowest rank, measured and predicted per part (where a miss comes from)."""
    r = max(row["ranks"], key=lambda r: r["measured_ms"])
    measured = {"input_dist": r["parts_ms"]["input_dist"], "lookup": _lookup(r), "output_dist": _output(r)}
    measured["allreduce"] = r["parts_ms"]["allreduce"]
    return {
        "plan": row["plan"],
        "rank": r["rank"],
        "measured_ms": r["measured_ms"],
        "predicted_ms": round(_total(r["predicted"]), 4),
        "parts_measured_ms": {k: round(v, 3) for k, v in measured.items()},
        "parts_predicted_ms": {k: None if v is None else round(v, 3) for k, v in r["predicted"].items()},
    }


def reprice(path: Path, profile: Any) -> None:
    """``path``'s measurements priced by the current model (every convention), its summary made
    again; rows whose plan is not made again alike (lookups or output dist priced otherwise than
    recorded) are left out and named."""
    from autoshard.torchrec.judges import predict_ranks

    result = json.loads(path.read_text())
    plans = {p.planner: (p, t) for w in workloads() for _, p, t in plan_variants(w, profile)}
    kept, dropped = [], []
    for row in result["plans"]:
        plan, topo = plans.get(row["plan"], (None, None))
        if plan is None or topo is None:
            dropped.append(row["plan"])
            continue
        ours = predict_ranks(plan, BATCH, topo, profile.model, profile.communication)
        same = all(
            abs(o.lookup_ms - r["predicted"]["lookup"]) < 1e-6 * max(1.0, o.lookup_ms)
            and abs(o.output_dist_ms - r["predicted"]["output_dist"]) < 1e-6 * max(1.0, o.output_dist_ms)
            for o, r in zip(ours, row["ranks"])
        )
        if not same:
            dropped.append(row["plan"])
            continue
        ids_once = ids_once_per_tier(plan, BATCH, topo, profile)
        for r, o, b in zip(row["ranks"], ours, ids_once):
            r["predicted"], r["predicted_ids_once_per_tier"] = _parts(o), _parts(b)
        kept.append(row)
    result["plans"] = kept
    result["repriced"] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "communication_model": profile.communication.describe() if profile.communication else None,
        "plans_not_made_again_alike": dropped,
    }
    result["summary"] = summarise(kept)
    out = path.with_suffix(".repriced.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result["summary"].items() if k != "pairs"}, indent=1))
    print(json.dumps({k: v for k, v in result["summary"]["pairs"].items() if k != "misses_ours"}, indent=1))


def main() -> None:
    from autoshard.profiles import load_profile_or_exit
    from cost_model.profile import MALLOC_SETTINGS, malloc_settings_active

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 workload, 1 round, 3 steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "lab" / "results" / "dmp_mape")
    parser.add_argument("--reprice", type=Path, help="a result to price again with the current model")
    args = parser.parse_args()
    if not malloc_settings_active():  # the ranks inherit them; set before Python starts
        os.environ.update(MALLOC_SETTINGS)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    profile = load_profile_or_exit(None)
    if args.reprice:
        reprice(args.reprice, profile)
        return
    rounds, steps = (1, 3) if args.quick else (args.rounds, args.steps)
    chosen = workloads()[:1] if args.quick else workloads()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load = os.getloadavg()[0]
    rows = [row for w in chosen for row in measure_workload(w, profile, rounds, steps)]
    report = {
        "command": " ".join(["python", "lab/experiments/dmp_mape.py", *sys.argv[1:]]),
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_1min_start_end": [round(load, 2), round(os.getloadavg()[0], 2)],
        "cores": os.cpu_count(),
        "note": "2 CPU cores shared with other engineers' jobs: figures taken under load",
        "profile": profile.profile,
        "communication_model": profile.communication.describe() if profile.communication else None,
        "batch_size_per_rank": BATCH,
        "rounds": rounds,
        "steps_per_round": steps,
        "summary": summarise(rows),
        "plans": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / ("quick.json" if args.quick else "summary.json")).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
