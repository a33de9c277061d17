"""Workload constraints: TorchRec's ParameterConstraints per table and placement constraints (pin,
co-locate, apart), read from workload files, honoured by every planner (a property test), and
conflicts refused with typed errors that name them (CLI exit 2, HTTP 422)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.constraints import Apart, Colocate, Constraints, Pin, TableConstraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import GIB, DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload
from autoshard.core.workload_file import workload_from_dict, workload_to_dict
from autoshard.planners.context import PlannerContext
from autoshard.planners.validate import validate_plan
from autoshard.planning.registry import make_planner
from tests.cost_models import AnalyticalTestCostModel

PLANNERS = ("cost_greedy", "size_greedy", "lookup_greedy", "round_robin", "random")


def where(plan: ShardingPlan) -> dict[str, dict]:
    """Per table: its ranks and its sharding types."""
    out: dict[str, dict] = {}
    for rank, device in enumerate(plan.devices):
        for s in device.shards:
            entry = out.setdefault(s.table.name, {"ranks": set(), "types": set()})
            entry["ranks"].add(rank)
            entry["types"].add(s.sharding_type)
    return out


def check_honoured(plan: ShardingPlan, workload: Workload, topology: Topology) -> None:
    validate_plan(plan, workload, topology)
    placed = where(plan)
    host = topology.host_of
    for name, own in workload.constraints.tables:
        if own.sharding_types is not None:
            assert placed[name]["types"] <= own.sharding_types, (name, placed[name]["types"])
    for c in workload.constraints.placement:
        if isinstance(c, Pin):
            allowed = set(c.ranks) if c.ranks else {r for r in range(topology.num_devices) if host(r) in c.hosts}
            assert placed[c.table]["ranks"] <= allowed, (c, placed[c.table]["ranks"])
        elif isinstance(c, Colocate):
            ranks = set().union(*(placed[t]["ranks"] for t in c.tables))
            assert len({host(r) for r in ranks} if c.level == "host" else ranks) == 1, (c, ranks)
        else:
            for i, a in enumerate(c.tables):
                for b in c.tables[i + 1 :]:
                    assert not placed[a]["ranks"] & placed[b]["ranks"], (c, a, b)


# --- the workload file ---------------------------------------------------------------------------

FILE = {
    "name": "ranking",
    "tables": [
        {"name": "user", "num_embeddings": 100_000, "embedding_dim": 64},
        {"name": "item", "num_embeddings": 50_000, "embedding_dim": 32, "pooling_factor": 3},
        {"name": "a", "num_embeddings": 1000, "embedding_dim": 16},
        {"name": "b", "num_embeddings": 1000, "embedding_dim": 16},
        {"name": "c", "num_embeddings": 1000, "embedding_dim": 16},
    ],
    "constraints": {
        "user": {"sharding_types": ["row_wise", "table_row_wise"], "compute_kernels": ["fused"]},
        "item": {"pooling_factors": [10.0, 20.0], "num_poolings": [1, 3]},
    },
    "placement": [
        {"pin": {"table": "item", "ranks": [0, 1]}},
        {"colocate": ["a", "b"]},
        {"apart": ["b", "c"]},
    ],
    "topology": {"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": 1},
}


def test_constraints_are_read_from_the_workload_file_and_written_back():
    workload, topology = workload_from_dict(FILE)
    c = workload.constraints
    assert c.of("user").sharding_types == {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE}
    item = next(t for t in workload.tables if t.name == "item")
    assert item.pooling_factor == pytest.approx(10 * 1 + 20 * 3)  # the constraints' lookups per sample win
    assert c.placement == (Pin("item", (0, 1)), Colocate(("a", "b")), Apart(("b", "c")))
    again, _ = workload_from_dict(workload_to_dict(workload, topology))
    assert again.constraints == c


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"constraints": {"user": {"compute_kernels": ["key_value"]}}}, "compute_kernels"),
        ({"constraints": {"user": {"cache_params": {"load_factor": 1.5}}}}, "cache_params.load_factor"),
        (
            {"constraints": {"user": {"compute_kernels": ["fused"], "cache_params": {"load_factor": 0.1}}}},
            "cache_params",
        ),
        ({"constraints": {"user": {"sharding_types": ["rowwise"]}}}, "sharding_types"),
        ({"constraints": {"nope": {}}}, "table"),
        ({"constraints": {"user": {"colour": 1}}}, "colour"),
        ({"placement": [{"pin": {"table": "item", "ranks": [0], "hosts": [0]}}]}, "pin"),
        ({"placement": [{"colocate": ["a"]}]}, "colocate"),
        ({"placement": [{"apart": ["a", "zzz"]}]}, "table"),
        ({"placement": [{"colocate": ["a", "b"], "level": "rack"}]}, "level"),
    ],
)
def test_bad_constraints_name_the_field(change, field):
    with pytest.raises(InputError) as info:
        workload_from_dict({**FILE, **change})
    assert info.value.field == field


# --- every planner honours them --------------------------------------------------------------------


@pytest.mark.parametrize("planner", PLANNERS)
def test_every_planner_honours_the_files_constraints(planner):
    workload, topology = workload_from_dict(FILE)
    plan = make_planner(planner, PlannerContext(AnalyticalTestCostModel())).plan(workload, topology)
    check_honoured(plan, workload, topology)


@st.composite
def constrained_tasks(draw):
    hosts, local = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    world = hosts * local
    n = draw(st.integers(2, 9))
    tables = tuple(
        Table(f"t{i}", draw(st.integers(world, 5000)), draw(st.sampled_from((4, 8, 16))), draw(st.floats(1.0, 10.0)))
        for i in range(n)
    )
    names = [t.name for t in tables]
    per_table = []
    for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=3)):
        kinds = draw(st.sets(st.sampled_from(list(ShardingType)), min_size=1))
        per_table.append((name, TableConstraints(sharding_types=frozenset(kinds))))
    placement: list = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(("pin", "colocate", "apart")))
        if kind == "pin":
            ranks = draw(st.lists(st.integers(0, world - 1), min_size=1, max_size=world, unique=True))
            placement.append(Pin(draw(st.sampled_from(names)), tuple(sorted(ranks))))
        else:
            group = tuple(draw(st.lists(st.sampled_from(names), min_size=2, max_size=3, unique=True)))
            level = draw(st.sampled_from(("device", "host")))
            placement.append(Colocate(group, level) if kind == "colocate" else Apart(group))
    workload = Workload(tables, 256, "c", Constraints(tuple(per_table), tuple(placement)))
    capacity = max(64, int(draw(st.floats(1.0, 3.0)) * workload.memory_bytes / world))
    return workload, Topology.cluster(hosts, local, capacity / GIB)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=constrained_tasks(), planner=st.sampled_from(PLANNERS))
def test_plans_honour_random_constraints_or_say_why_not(task, planner):
    workload, topology = task
    try:
        plan = make_planner(planner, PlannerContext(AnalyticalTestCostModel())).plan(workload, topology)
    except PlannerError as error:
        assert error.kind in (
            PlannerErrorKind.CONSTRAINTS_CONFLICT,
            PlannerErrorKind.TABLE_DOES_NOT_FIT,
            PlannerErrorKind.INSUFFICIENT_MEMORY,
        )
        return
    check_honoured(plan, workload, topology)


def test_torchrec_is_skipped_with_the_reason_under_placement_constraints():
    workload, topology = workload_from_dict(FILE)
    with pytest.raises(PlannerError) as info:
        make_planner("torchrec", PlannerContext()).plan(workload, topology)
    assert info.value.kind is PlannerErrorKind.UNAVAILABLE and "co-locate" in info.value.message


# --- conflicts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        # a pin onto one device too small for the table (and it may not be row-sharded there)
        ({"placement": [{"pin": {"table": "user", "ranks": [0]}}]}, "pin of 'user'"),
        # a co-located group larger than a device
        ({"placement": [{"colocate": ["user", "item"]}]}, "colocate"),
        # sharding types that cannot fit the table
        ({"constraints": {"user": {"sharding_types": ["table_wise"]}}}, "sharding_types"),
    ],
)
def test_conflicting_constraints_get_a_typed_error_with_fixes(change, named):
    data = {**FILE, **change, "topology": {"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": 0.02}}
    workload, topology = workload_from_dict(data)  # user: 25.6 MB, devices of 21 MB
    for planner in ("cost_greedy", "size_greedy"):
        with pytest.raises(PlannerError) as info:
            make_planner(planner, PlannerContext(AnalyticalTestCostModel())).plan(workload, topology)
        assert info.value.kind is PlannerErrorKind.CONSTRAINTS_CONFLICT, planner
        assert named in info.value.message and info.value.fixes


def test_a_conflict_exits_2_at_the_cli_naming_it(tmp_path):
    data = {**FILE, "placement": [{"colocate": ["user", "item"]}]}
    data["topology"] = {"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": 0.02}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["plan", str(path), "--planner", "size_greedy", "--model", "none"])
    assert result.exit_code == 2, result.output
    assert "constraints_conflict" in result.output and "colocate" in result.output


def test_the_service_honours_constraints_and_answers_conflicts_with_422_at_the_field(tmp_path):
    from service.schemas.responses import ErrorResponse
    from tests.service_support import copy_shipped_profile
    from tests.test_service_api import serve

    workload = {k: v for k, v in FILE.items() if k != "topology"}
    body = {"workload": workload, "topology": FILE["topology"], "planners": ["cost_greedy", "rl", "size_greedy"]}
    with serve(model_dir=copy_shipped_profile(tmp_path)) as client:
        answer = client.post("/v1/plans?format=json", json=body)
        assert answer.status_code == 200, answer.text
        parsed, topology = workload_from_dict(FILE)
        for entry in answer.json()["plans"]:
            tables = {t.name: t for t in parsed.tables}
            devices = tuple(
                tuple(_shard(tables[s["table"]], s) for s in device["shards"]) for device in entry["devices"]
            )
            check_honoured(ShardingPlan(entry["planner"], tuple(DevicePlan(d, 0.0) for d in devices)), parsed, topology)
        clash = {**body, "workload": {**workload, "placement": [{"colocate": ["user", "item"]}]}}
        clash["topology"] = {"num_hosts": 2, "devices_per_host": 2, "device_memory_gb": 0.02}
        refused = client.post("/v1/plans", json=clash)
        assert refused.status_code == 422, refused.text
        detail = ErrorResponse.model_validate(refused.json()).detail[0]
        assert detail.loc == ["body", "workload", "placement"] and detail.type == "infeasible.constraints_conflict"
        assert "colocate" in detail.msg and detail.ctx["fixes"]


def _shard(table: Table, s: dict) -> TableShard:
    kind = ShardingType(s["sharding_type"])
    whole_rows = s["row_offset"] == 0 and s["rows"] == table.num_embeddings
    if kind is ShardingType.DATA_PARALLEL:
        return TableShard(table, sharding=kind)
    if kind in (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE) and whole_rows:
        whole = s["column_offset"] == 0 and s["columns"] == table.embedding_dim
        return TableShard(table) if whole else TableShard(table, s["column_offset"], s["columns"])
    columns = None if s["columns"] == table.embedding_dim else s["columns"]
    return TableShard(table, s["column_offset"], columns, s["row_offset"], s["rows"], kind)


def test_min_partition_bounds_the_column_split():
    hot = Table("hot", 1000, 64, 50.0)
    rest = tuple(Table(f"s{i}", 100, 8) for i in range(6))
    topology = Topology(8, 1.0)
    context = PlannerContext(
        AnalyticalTestCostModel(),
        allow_column_split=True,
        sharding_types=frozenset({ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE}),
    )
    free = make_planner("cost_greedy", context).plan(Workload((hot, *rest)), topology)
    assert min(s.width for d in free.devices for s in d.shards if s.table is hot) < 32  # it splits finer unbound
    bound = Workload((hot, *rest), constraints=Constraints((("hot", TableConstraints(min_partition=32)),)))
    plan = make_planner("cost_greedy", context).plan(bound, topology)
    assert min(s.width for d in plan.devices for s in d.shards if s.table is hot) >= 32


@pytest.mark.parametrize("planner", ["rl", "rl+refine"])
def test_the_rl_planners_honour_constraints(planner, shipped_model):
    """The policy places through the same mask, and its repair through local search, which leaves
    constrained tables: the constrained file and random constrained tasks, with the shipped
    model and policy."""
    from pathlib import Path

    from autoshard.rl.policy import OptionPolicy

    policy = OptionPolicy.load(Path(__file__).resolve().parents[1] / "data" / "models" / "default" / "policy.pt")
    context = PlannerContext(shipped_model, policy, departure_margin=0.0)
    workload, topology = workload_from_dict(FILE)
    check_honoured(make_planner(planner, context).plan(workload, topology), workload, topology)
    rng = np.random.default_rng(5)
    for seed in range(4):
        tables = tuple(
            Table(f"t{i}", int(rng.integers(1000, 50_000)), int(rng.choice([16, 32, 64])), float(rng.uniform(1, 8)))
            for i in range(12)
        )
        names = [t.name for t in tables]
        placement = (
            Pin(names[seed], (0, 1)),
            Colocate((names[4], names[5])),
            Apart((names[6], names[7], names[8])),
            Colocate((names[9], names[10]), "host"),
        )
        task = Workload(tables, 2048, f"c{seed}", Constraints(placement=placement))
        cluster = Topology.cluster(2, 2, 3 * task.memory_bytes / 4 / GIB)
        check_honoured(make_planner(planner, context).plan(task, cluster), task, cluster)


def test_a_files_kernels_decide_data_parallel_and_the_lookups_sum_over_features():
    """``dense`` alone: data parallel only; ``fused`` alone: every type but data parallel. The
    pooling factor is TorchRec's lookups per sample: the sum over features of pooling factor x
    num_poolings x batch_sizes, over the batch (as workload files and the drop-in both count)."""
    data = {
        "name": "k",
        "batch_size": 100,
        "tables": [{"name": n, "num_embeddings": 500, "embedding_dim": 8} for n in ("dense", "fused", "both")],
        "constraints": {
            "dense": {"compute_kernels": ["dense"]},
            "fused": {"compute_kernels": ["fused"], "pooling_factors": [2.0, 4.0], "batch_sizes": [100, 50]},
            "both": {"compute_kernels": ["fused", "dense"], "sharding_types": ["data_parallel", "table_wise"]},
        },
        "topology": {"num_devices": 2, "device_memory_gb": 1},
    }
    workload, topology = workload_from_dict(data)
    every = frozenset(ShardingType)
    c = workload.constraints
    assert c.allowed_types("dense", every) == {ShardingType.DATA_PARALLEL}
    assert c.allowed_types("fused", every) == every - {ShardingType.DATA_PARALLEL}
    assert c.allowed_types("both", every) == {ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE}
    assert next(t for t in workload.tables if t.name == "fused").pooling_factor == pytest.approx(2.0 + 4.0 * 50 / 100)
    for planner in ("cost_greedy", "size_greedy"):
        plan = make_planner(planner, PlannerContext(AnalyticalTestCostModel())).plan(workload, topology)
        check_honoured(plan, workload, topology)
        assert where(plan)["dense"]["types"] == {ShardingType.DATA_PARALLEL}
