"""Re-planning a plan of every sharding type, and under ``--model torchrec`` one whose tables run in
host memory (``autoshard.planners.current_placement``, ``autoshard.planning.replan_fit``): a kept
table keeps its kernel and cache, memory is TorchRec's count, a row-wise, table-row-wise, grid or
data-parallel table stays where it is while its layout holds on the topology (else it is placed
anew), and the CLI and the service agree."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autoshard.core.constraints import Constraints, TableConstraints
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.sharding import ShardingType
from autoshard.core.types import Table, Topology, Workload
from autoshard.core.workload_file import save_workload, workload_to_dict
from autoshard.planners.incremental import CurrentPlacement, MoveBudget, moves_from, replan
from tests.cost_models import AnalyticalTestCostModel

# --- every sharding type, under any model -------------------------------------------------------


ROW_BLOCKS = [(0, 334), (334, 334), (668, 332)]
"""TorchRec's row blocks of 1000 rows on 3 devices: ceil(1000 / 3) rows each, the rest last."""


def _spread_export() -> dict:
    """``wide`` row-wise over 3 devices, ``dense`` data parallel, ``a`` table-wise on device 1."""
    rows = ROW_BLOCKS
    return {
        "world_size": 3,
        "tables": {
            "wide": {
                "sharding_type": "row_wise",
                "shards": [
                    {"rank": r, "row_offset": o, "rows": n, "column_offset": 0, "columns": 16}
                    for r, (o, n) in enumerate(rows)
                ],
            },
            "dense": {
                "sharding_type": "data_parallel",
                "compute_kernel": "dense",
                "shards": [{"rank": r, "column_offset": 0, "columns": 8} for r in range(3)],
            },
            "a": {"sharding_type": "table_wise", "shards": [{"rank": 1, "column_offset": 0, "columns": 16}]},
        },
    }


def _spread_workload(*extra: Table) -> Workload:
    tables = (Table("wide", 1000, 16, 100.0), Table("dense", 100, 8, 5.0), Table("a", 1000, 16, 50.0), *extra)
    return Workload(tables, batch_size=1000)


def test_row_wise_and_data_parallel_tables_stay_where_they_are_and_table_wise_ones_may_move():
    current = CurrentPlacement.from_export(_spread_export(), "plan.json")
    workload = _spread_workload(Table("new", 1000, 16, 50.0))
    found = replan(workload, Topology(3, 1.0), AnalyticalTestCostModel(), current, MoveBudget(4))
    placed = {
        (s.table.name, rank, s.row_offset, s.height, s.sharding_type)
        for rank, d in enumerate(found.plan.devices)
        for s in d.shards
    }
    assert {p for p in placed if p[0] == "wide"} == {
        ("wide", r, o, n, ShardingType.ROW_WISE) for r, (o, n) in enumerate(ROW_BLOCKS)
    }
    assert {p[1] for p in placed if p[0] == "dense"} == {0, 1, 2}
    assert found.replaced == () and all(m.shard not in ("wide", "dense") for m in found.moves)
    assert moves_from(current, found.plan, workload, Topology(3, 1.0)) == found.moves


def test_a_kept_table_its_constraints_allow_row_wise_only_is_kept_and_one_to_place_is_refused():
    only_rows = Constraints((("wide", TableConstraints(frozenset({ShardingType.ROW_WISE}))),))
    workload = replace(_spread_workload(), constraints=only_rows)
    current = CurrentPlacement.from_export(_spread_export(), "plan.json")
    found = replan(workload, Topology(3, 1.0), AnalyticalTestCostModel(), current, MoveBudget(1))
    assert found.replaced == () and all(s.sharding_type is ShardingType.ROW_WISE for s in _shards(found, "wide"))
    with pytest.raises(PlannerError, match="'wide'") as refused:  # 4 devices: it is to be placed anew
        replan(workload, Topology(4, 1.0), AnalyticalTestCostModel(), current, MoveBudget(1))
    assert refused.value.kind is PlannerErrorKind.CONSTRAINTS_CONFLICT


def _shards(found, name: str) -> list:
    return [s for d in found.plan.devices for s in d.shards if s.table.name == name]


def test_a_spread_layout_the_topology_no_longer_has_is_placed_anew():
    current = CurrentPlacement.from_export(_spread_export(), "plan.json")
    found = replan(_spread_workload(), Topology(4, 1.0), AnalyticalTestCostModel(), current, MoveBudget(0))
    assert found.replaced == ("wide", "dense")  # row_wise and data parallel span every device: 3 of 4 now
    assert all(s.sharding_type in (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE) for d in found.plan.devices
               for s in d.shards)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t["a"].update(sharding_type="diagonal"), "sharding_type"),
        (lambda t: t["a"].update(compute_kernel="key_value"), "compute_kernel"),
        (lambda t: t["a"].update(compute_kernel="fused_uvm_caching", cache_params={"load_factor": 2}), "cache_params"),
        (lambda t: t["wide"]["shards"][0].pop("rows"), "shards"),
    ],
)
def test_a_layout_that_is_not_torchrecs_names_the_table_and_the_field(change, field):
    data = _spread_export()
    change(data["tables"])
    with pytest.raises(InputError) as error:
        CurrentPlacement.from_export(data, "plan.json")
    assert error.value.field == field and error.value.where == "plan.json"


# --- over HBM under --model torchrec ------------------------------------------------------------

torchrec = pytest.importorskip("torchrec")
pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")

from typer.testing import CliRunner  # noqa: E402

from autoshard.torchrec.cost_model import OVER_MEMORY_MS  # noqa: E402
from tests.test_torchrec_ddr_cap import TIGHT, TWO_HALF_GIB, over_hbm  # noqa: E402

TORCHREC = ("--model", "torchrec")


def _cli(*args: str) -> tuple[int, str, str]:
    from autoshard.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, " ".join(result.output.split())


def _grown(workload: Workload, pooling: float = 5.0) -> Workload:
    """The workload with one more 244 MiB table, ``new``."""
    return Workload((*workload.tables, Table("new", 2_000_000, 32, pooling)), workload.batch_size, "grown")


def _planned(tmp_path: Path, workload: Workload, topology: Topology, *options: str) -> tuple[Path, dict]:
    """``workload`` planned by cost_greedy under TorchRec's model, exported: the file and its JSON."""
    source, out = tmp_path / f"{workload.name}.json", tmp_path / f"{workload.name}_plan.json"
    save_workload(source, workload, topology)
    code, _, shown = _cli(
        "plan", str(source), *TORCHREC, "--planner", "cost_greedy", *options, "--format", "torchrec", "--out", str(out)
    )
    assert code == 0, shown
    return out, json.loads(out.read_text())


def _kept_as_exported(export: dict, placement: dict) -> None:
    """Every table of the export is in the placement as it was: type, kernel, cache and shards."""
    for name, entry in export["tables"].items():
        table = placement["tables"][name]
        assert (table["sharding_type"], table["compute_kernel"]) == (entry["sharding_type"], entry["compute_kernel"])
        assert table.get("cache_params") == entry.get("cache_params"), name
        shards = [
            {k: s[k] for k in ("rank", "row_offset", "rows", "column_offset", "columns")} for s in entry["shards"]
        ]
        key = lambda s: (s["column_offset"], s["row_offset"], s["rank"])  # noqa: E731
        assert sorted(table["shards"], key=key) == sorted(shards, key=key), name


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> tuple[Path, dict]:
    """over_hbm on 2 x 0.5 GiB: two tables table-row-wise, two in host memory (UVM caching)."""
    return _planned(tmp_path_factory.mktemp("over_hbm"), over_hbm(), Topology(2, 0.5))


def test_the_deployed_over_hbm_plan_runs_uvm_caching_and_table_row_wise(deployed):
    _, export = deployed
    kinds = {(e["sharding_type"], e["compute_kernel"]) for e in export["tables"].values()}
    assert ("table_row_wise", "fused") in kinds and any(k == "fused_uvm_caching" for _, k in kinds)


def test_cli_replans_an_over_hbm_plan_keeping_kernels_and_spread_tables_and_reads_its_own_out(deployed, tmp_path):
    current, export = deployed
    grown = tmp_path / "grown.json"
    save_workload(grown, _grown(over_hbm()), Topology(2, 0.5))
    out = tmp_path / "next.json"
    code, stdout, shown = _cli("replan", str(grown), "--from", str(current), *TORCHREC, "--json", "--out", str(out))
    assert code == 0, shown
    report = json.loads(stdout)
    assert report["new_tables"] == ["new"] and report["replaced"] == [] and report["profile"] == "torchrec (cuda)"
    keep, searched, scratch = report["plans"]
    assert keep["shards_moved"] == 0 and searched["max_cost_ms"] <= keep["max_cost_ms"] * (1 + 1e-9)
    for row in (keep, searched):
        assert row["max_cost_ms"] < OVER_MEMORY_MS  # within TorchRec's storage estimate of every device
        assert row["placement"]["tables"]["new"]["compute_kernel"] != "fused"  # HBM is full: host memory
    _kept_as_exported(export, keep["placement"])
    assert scratch["shards_moved"] > 0  # its kernels and types differ: moves, though on the same ranks
    code, stdout, shown = _cli("replan", str(grown), "--from", str(out), *TORCHREC, "--json", "--max-moves", "0")
    assert code == 0, shown
    again = json.loads(stdout)
    assert again["new_tables"] == [] and again["plans"][0]["max_cost_ms"] == pytest.approx(searched["max_cost_ms"])


def test_cli_replan_on_a_third_device_places_the_table_row_wise_tables_anew(deployed, tmp_path):
    current, export = deployed
    source = tmp_path / "over_hbm.json"
    save_workload(source, over_hbm(), Topology(2, 0.5))
    code, stdout, shown = _cli("replan", str(source), "--from", str(current), *TORCHREC, "--devices", "3", "--json")
    assert code == 0, shown
    report = json.loads(stdout)
    spread = sorted(n for n, e in export["tables"].items() if e["sharding_type"] == "table_row_wise")
    assert report["replaced"] == spread  # one host of 3 devices: TorchRec's table_row_wise has 3 blocks
    keep = report["plans"][0]["placement"]["tables"]
    uvm = {n: e["cache_params"] for n, e in export["tables"].items() if e["compute_kernel"] == "fused_uvm_caching"}
    assert {n: keep[n].get("cache_params") for n in uvm} == uvm


def test_cli_replan_past_the_host_memory_is_refused_naming_ddr_cap(deployed, tmp_path):
    current, _ = deployed
    source = tmp_path / "over_hbm.json"
    save_workload(source, over_hbm(), Topology(2, 0.5))
    code, _, shown = _cli("replan", str(source), "--from", str(current), *TORCHREC, "--ddr-cap-gb", str(TIGHT))
    assert code == 2 and "Traceback" not in shown
    assert "ddr_cap of 107,374,182 bytes" in shown and "replan (<= 4 moves)" in shown and "--ddr-cap-gb" in shown


def test_cli_replans_a_table_row_wise_plan_on_two_hosts(tmp_path):
    hosts = Topology.cluster(2, 2, 0.5)
    tables = tuple(Table(f"t{i}", 2_000_000, 32, p) for i, p in enumerate((20.0, 1.0) * 5))
    workload = Workload(tables, 512, "hosts")
    current, export = _planned(tmp_path, workload, hosts, "--sharding-types", "table_wise,column_wise,table_row_wise")
    rows = {n: {s["rank"] // 2 for s in e["shards"]} for n, e in export["tables"].items()}
    spread = [n for n, e in export["tables"].items() if e["sharding_type"] == "table_row_wise"]
    assert spread and all(len(rows[n]) == 1 for n in spread)  # each on one host's two devices
    grown = tmp_path / "grown.json"
    save_workload(grown, _grown(workload), hosts)
    code, stdout, shown = _cli("replan", str(grown), "--from", str(current), *TORCHREC, "--json")
    assert code == 0, shown
    report = json.loads(stdout)
    assert report["replaced"] == [] and report["topology"]["num_hosts"] == 2
    for row in report["plans"][:2]:
        _kept_as_exported({"tables": {n: export["tables"][n] for n in spread}}, row["placement"])


# --- the service ----------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings

    with TestClient(create_app(Settings(model_dir=tmp_path, pool="thread"))) as served:
        yield served


def test_service_replans_the_over_hbm_plan_and_its_placement_chains(client, deployed):
    _, export = deployed
    body = {
        "workload": workload_to_dict(_grown(over_hbm())),
        "topology": TWO_HALF_GIB,
        "current_plan": export,
        "max_moves": [2],
        "profile": "torchrec",
    }
    answer = client.post("/v1/replans", json=body)
    assert answer.status_code == 200, answer.text
    keep, searched, _ = answer.json()["plans"]
    _kept_as_exported(export, keep["placement"])
    assert searched["max_cost_ms"] < OVER_MEMORY_MS
    chained = client.post("/v1/replans", json={**body, "current_plan": searched["placement"], "max_moves": [0]})
    assert chained.status_code == 200, chained.text
    assert chained.json()["plans"][0]["max_cost_ms"] == pytest.approx(searched["max_cost_ms"])
    _kept_as_exported(searched["placement"], chained.json()["plans"][0]["placement"])


def test_service_names_a_sharding_type_it_does_not_know_at_the_current_plan(client, deployed):
    _, export = deployed
    current = json.loads(json.dumps(export))
    current["tables"]["t0"]["sharding_type"] = "diagonal"
    body = {"workload": workload_to_dict(over_hbm()), "topology": TWO_HALF_GIB, "current_plan": current}
    answer = client.post("/v1/replans", json={**body, "profile": "torchrec"})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "current_plan", "sharding_type"] and "'t0'" in detail["msg"]
