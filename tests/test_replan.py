"""Re-planning a deployed plan (`autoshard.planners.incremental`, `autoshard replan`): kept shards
stay, new tables are placed, at most --max-moves kept shards move, and bad input is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.errors import InputError, PlannerError
from autoshard.core.types import GIB, ShardingPlan, Table, Topology, Workload
from autoshard.core.workload_file import save_workload
from autoshard.planners.incremental import (
    CurrentPlacement,
    KeptShard,
    MoveBudget,
    moves_from,
    replan,
)
from autoshard.planners.validate import validate_plan
from tests.cost_models import AnalyticalTestCostModel

runner = CliRunner()
MODEL = AnalyticalTestCostModel()


def _four_tables() -> tuple[Workload, CurrentPlacement]:
    """t0, t1 (100 lookups a sample) on device 0 and t2 (50) on device 1 today; t3 (50) is new."""
    tables = tuple(Table(f"t{i}", 1000, 16, pooling) for i, pooling in enumerate((100, 100, 50, 50)))
    current = CurrentPlacement((KeptShard("t0", 0, 0, 16), KeptShard("t1", 0, 0, 16), KeptShard("t2", 1, 0, 16)), 2)
    return Workload(tables, batch_size=1000), current


def _sets(plan: ShardingPlan) -> list[list[str]]:
    return [[s.table.name for s in d.shards] for d in plan.devices]


def test_without_moves_the_kept_tables_stay_and_the_new_one_goes_where_it_costs_least():
    """The analytical model: a set costs (lookup bytes / 1e7) (1 + 0.05 (n - 1)) + 0.1 n; a table
    of 100 lookups is 0.64 of lookup bytes, of 50 0.32. t3 on device 0: 1.60 x 1.10 + 0.3 = 2.06;
    on device 1: 0.64 x 1.05 + 0.2 = 0.872: it goes to device 1, and device 0 keeps 1.28 x 1.05 +
    0.2 = 1.544."""
    workload, current = _four_tables()
    found = replan(workload, Topology(2, 1.0), MODEL, current, MoveBudget(0))
    assert _sets(found.plan) == [["t0", "t1"], ["t2", "t3"]]
    assert [d.cost_ms for d in found.plan.devices] == pytest.approx([1.544, 0.872])
    assert found.moves == () and found.dropped == () and found.replaced == ()


@pytest.mark.parametrize("max_moves", [1, 2])
def test_one_kept_table_moves_where_a_swap_with_the_new_one_balances_the_devices(max_moves):
    """No move lowers device 0 (t1 onto device 1 makes it 1.28 x 1.10 + 0.3 = 1.708); a swap of a
    100-lookup table with a 50-lookup one makes both devices 0.96 x 1.05 + 0.2 = 1.208. Of those
    swaps, the one with the new t3 moves one kept table and the one with t2 two: one move is taken,
    even with a budget of two."""
    workload, current = _four_tables()
    found = replan(workload, Topology(2, 1.0), MODEL, current, MoveBudget(max_moves))
    assert _sets(found.plan) == [["t1", "t3"], ["t2", "t0"]]
    assert [d.cost_ms for d in found.plan.devices] == pytest.approx([1.208, 1.208])
    assert [(m.shard, m.from_rank, m.to_rank) for m in found.moves] == [("t0", 0, 1)]


def test_a_plan_from_scratch_counts_every_kept_shard_it_puts_elsewhere_and_nothing_for_new_tables():
    workload, current = _four_tables()
    kept = replan(workload, Topology(2, 1.0), MODEL, current, MoveBudget(0)).plan
    scratch = ShardingPlan("scratch", kept.devices[::-1])
    assert sorted((m.shard, m.from_rank, m.to_rank) for m in moves_from(current, scratch, workload)) == [
        ("t0", 0, 1),
        ("t1", 0, 1),
        ("t2", 1, 0),
    ]


def test_tables_gone_are_dropped_and_tables_whose_columns_changed_are_placed_anew():
    tables = (Table("a", 1000, 16, 10.0), Table("b", 1000, 32, 10.0), Table("c", 1000, 8, 10.0))
    current = CurrentPlacement((KeptShard("a", 0, 0, 16), KeptShard("b", 1, 0, 16), KeptShard("gone", 1, 0, 8)), 2)
    found = replan(Workload(tables, batch_size=1000), Topology(2, 1.0), MODEL, current, MoveBudget(0))
    assert found.dropped == ("gone",) and found.replaced == ("b",)  # b had 16 columns, now 32
    validate_plan(found.plan, Workload(tables, batch_size=1000), Topology(2, 1.0))
    assert "a" in _sets(found.plan)[0] and found.moves == ()


def test_column_shards_are_kept_as_they_are():
    table = Table("wide", 1000, 64, 40.0)
    current = CurrentPlacement((KeptShard("wide", 1, 0, 32), KeptShard("wide", 0, 32, 32)), 2)
    found = replan(
        Workload((table, Table("new", 1000, 16, 5.0)), batch_size=1000), Topology(2, 1.0), MODEL, current, MoveBudget(0)
    )
    shards = {
        (s.column_offset, s.width): rank
        for rank, d in enumerate(found.plan.devices)
        for s in d.shards
        if s.table.name == "wide"
    }
    assert shards == {(0, 32): 1, (32, 32): 0} and found.moves == ()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), min_size=3, max_size=12),
    st.integers(0, 5),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_every_table_is_placed_once_within_memory_and_at_most_the_budget_of_kept_shards_moves(
    spec, max_moves, new, gone
):
    """Tables of 1-40 lookups a sample on devices 0-2 today; ``new`` tables added and the first
    ``gone`` removed: the plan is valid, kept shards off their device are at most ``max_moves``,
    and its max is no higher than keeping every shard where it is."""
    topology = Topology(3, 1.0)
    current = CurrentPlacement(tuple(KeptShard(f"k{i}", rank, 0, 16) for i, (_, rank) in enumerate(spec)), 3)
    tables = tuple(Table(f"k{i}", 2000, 16, float(p)) for i, (p, _) in enumerate(spec))[gone:]
    tables += tuple(Table(f"n{i}", 2000, 16, 10.0 + i) for i in range(new))
    if not tables:
        return
    workload = Workload(tables, batch_size=1000)
    found = replan(workload, topology, MODEL, current, MoveBudget(max_moves))
    validate_plan(found.plan, workload, topology)
    assert len(found.moves) <= max_moves
    kept = replan(workload, topology, MODEL, current, MoveBudget(0)).plan
    assert found.plan.max_cost_ms <= kept.max_cost_ms * (1 + 1e-9)
    moved = {m.shard for m in found.moves}
    homes = {s.table: s.rank for s in current.shards}
    for rank, device in enumerate(found.plan.devices):
        for shard in device.shards:
            name = shard.table.name
            if name in homes and name not in moved:
                assert homes[name] == rank


def test_a_new_table_that_fits_nowhere_beside_the_kept_shards_says_to_plan_from_scratch():
    current = CurrentPlacement((KeptShard("a", 0, 0, 16), KeptShard("b", 1, 0, 16)), 2)
    rows = int(0.6 * GIB) // 64  # 0.6 GiB each at 16 x 4 bytes
    tables = (Table("a", rows, 16), Table("b", rows, 16), Table("c", rows, 16))
    with pytest.raises(PlannerError, match="beside the current placement") as error:
        replan(Workload(tables), Topology(2, 1.0), MODEL, current, MoveBudget(4))
    assert any("from scratch" in fix for fix in error.value.fixes)


def test_the_current_placement_must_fit_the_topology():
    current = CurrentPlacement((KeptShard("a", 0, 0, 16), KeptShard("b", 0, 0, 16), KeptShard("c", 3, 0, 16)), 4)
    rows = int(0.6 * GIB) // 64
    tables = tuple(Table(n, rows, 16) for n in "abc")
    with pytest.raises(InputError, match="rank 3") as error:
        replan(Workload(tables), Topology(2, 1.0), MODEL, current, MoveBudget(0))
    assert error.value.field == "num_devices"
    with pytest.raises(InputError, match="device 0 would hold 1.2 GiB") as error:
        replan(Workload(tables), Topology(4, 1.0), MODEL, current, MoveBudget(0))
    assert error.value.field == "device_memory_gb"


@pytest.mark.parametrize(
    "data, field",
    [
        ([], "tables"),
        ({"world_size": 2}, "tables"),
        ({"world_size": 0, "tables": {}}, "world_size"),
        ({"world_size": 2, "tables": {"a": {"shards": []}}}, "shards"),
        ({"world_size": 2, "tables": {"a": {"shards": [{"rank": 0, "column_offset": 0}]}}}, "shards"),
        ({"world_size": 2, "tables": {"a": {"shards": [{"rank": 2, "column_offset": 0, "columns": 4}]}}}, "rank"),
    ],
)
def test_an_export_that_is_not_a_plan_names_the_field(data, field):
    with pytest.raises(InputError) as error:
        CurrentPlacement.from_export(data, "plan.json")
    assert error.value.field == field and error.value.where == "plan.json"


def _export(tmp_path: Path, workload: str, *options: str) -> Path:
    out = tmp_path / "current.json"
    result = runner.invoke(
        app, ["plan", workload, "--planner", "cost_greedy", "--format", "torchrec", "--out", str(out), *options]
    )
    assert result.exit_code == 0, result.output
    return out


def test_replan_reads_the_plans_export_places_new_tables_and_writes_an_export_it_reads_again(tmp_path):
    """The shipped profile: Criteo Kaggle planned on 4 devices, then two tables gone and two new."""
    current = _export(tmp_path, "criteo_kaggle", "--devices", "4", "--memory-gb", "8")
    from autoshard.core.presets import load_workload_or_preset

    kaggle, _ = load_workload_or_preset("criteo_kaggle")
    changed = Workload(
        kaggle.tables[2:] + (Table("new_a", 2_000_000, 16, 1.0), Table("new_b", 50_000, 16, 1.0)),
        kaggle.batch_size,
        "kaggle_v2",
    )
    save_workload(tmp_path / "v2.json", changed)
    out = tmp_path / "next.json"
    result = runner.invoke(
        app,
        [
            "replan",
            str(tmp_path / "v2.json"),
            "--from",
            str(current),
            "--memory-gb",
            "8",
            "--max-moves",
            "2",
            "--json",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    keep, moved, scratch = report["plans"]
    assert (keep["plan"], moved["plan"], scratch["plan"]) == ("keep", "replan (<= 2 moves)", "cost_greedy")
    assert keep["shards_moved"] == 0 and moved["shards_moved"] <= 2
    assert moved["max_cost_ms"] <= keep["max_cost_ms"] * (1 + 1e-9)
    assert report["dropped"] == ["C1", "C2"] and report["new_tables"] == ["new_a", "new_b"]
    placed = sorted(t for d in moved["devices"] for t in d["tables"])
    assert placed == sorted(t.name for t in changed.tables)
    assert json.loads(out.read_text())["world_size"] == 4
    again = runner.invoke(
        app, ["replan", str(tmp_path / "v2.json"), "--from", str(out), "--memory-gb", "8", "--max-moves", "0", "--json"]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["plans"][0]["max_cost_ms"] == pytest.approx(moved["max_cost_ms"])
    capped = runner.invoke(
        app,
        [
            "replan",
            str(tmp_path / "v2.json"),
            "--from",
            str(current),
            "--memory-gb",
            "8",
            "--max-moves",
            "8",
            "--max-move-gb",
            "0",
            "--json",
        ],
    )
    assert capped.exit_code == 0, capped.output
    capped_report = json.loads(capped.stdout)
    assert (
        capped_report["max_moved_bytes"] == 0 and capped_report["plans"][1]["plan"] == "replan (<= 8 moves, <= 0 GiB)"
    )
    assert capped_report["plans"][1]["shards_moved"] == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "missing.json"], "no such file"),
        (["--from", "not_json.json"], "not valid JSON"),
        (["--from", "current.json", "--devices", "2"], "--devices"),
        (["--from", "current.json", "--memory-gb", "0.001"], "--memory-gb"),
        (["--from", "current.json", "--model", "none"], "--model"),
    ],
)
def test_replan_errors_name_the_option_and_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    _export(tmp_path, "criteo_kaggle", "--devices", "4", "--memory-gb", "8")
    (tmp_path / "not_json.json").write_text("{")
    result = runner.invoke(app, ["replan", "criteo_kaggle", "--memory-gb", "8", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_byte_budget_keeps_the_big_tables_home():
    """t0 (100 lookups a sample) is large, t1 (100) small, on device 0; t2 (50) on device 1 and the
    new t3 (50). Swapping either 100-lookup table with t3 balances the devices alike (1.208 each):
    without a byte budget the first such swap moves t0's 6.4 MB; with 1 MiB, only t1 may go."""
    tables = (
        Table("t0", 100_000, 16, 100.0),
        Table("t1", 1000, 16, 100.0),
        Table("t2", 1000, 16, 50.0),
        Table("t3", 1000, 16, 50.0),
    )
    current = CurrentPlacement((KeptShard("t0", 0, 0, 16), KeptShard("t1", 0, 0, 16), KeptShard("t2", 1, 0, 16)), 2)
    workload = Workload(tables, batch_size=1000)
    free = replan(workload, Topology(2, 1.0), MODEL, current, MoveBudget(1))
    capped = replan(workload, Topology(2, 1.0), MODEL, current, MoveBudget(1, max_bytes=2**20))
    assert [m.shard for m in free.moves] == ["t0"]  # the first of the equal swaps: 6.4 MB
    assert [m.shard for m in capped.moves] == ["t1"] and capped.moves[0].memory_bytes <= 2**20
    assert [d.cost_ms for d in capped.plan.devices] == pytest.approx([1.208, 1.208])
    none = replan(workload, Topology(2, 1.0), MODEL, current, MoveBudget(1, max_bytes=1000))
    assert none.moves == () and none.plan.max_cost_ms == pytest.approx(1.544)


def test_a_table_the_model_cannot_answer_names_the_file_and_the_field(tmp_path):
    current = _export(tmp_path, "criteo_kaggle", "--devices", "4", "--memory-gb", "8")
    from autoshard.core.presets import load_workload_or_preset

    kaggle, _ = load_workload_or_preset("criteo_kaggle")
    tables = (Table("fp64", 1000, 16, bytes_per_element=8), *kaggle.tables)
    save_workload(tmp_path / "bad.json", Workload(tables, kaggle.batch_size, "bad"))
    result = runner.invoke(app, ["replan", str(tmp_path / "bad.json"), "--from", str(current), "--memory-gb", "8"])
    assert result.exit_code == 2 and "bad.json tables[0]: bytes_per_element" in " ".join(result.output.split())
