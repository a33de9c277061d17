"""`autoshard plan`: presets, JSON output, cost models, and clean errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.types import Table, Topology, Workload
from autoshard.core.workload_file import save_workload
from autoshard.planning.registry import HEURISTICS

runner = CliRunner()
NO_MODEL = ["--model", "none"]
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models" / "default"


def plan(*args: str):
    return runner.invoke(app, ["plan", *args])


def test_preset_plan_json_with_every_heuristic_and_cost_greedy_skipped():
    result = plan("criteo_kaggle", "--devices", "4", "--memory-gb", "1", "--json", *NO_MODEL)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["workload"]["name"] == "criteo_kaggle_dlrm" and report["workload"]["tables"] == 26
    assert report["topology"] == {"num_devices": 4, "device_memory_gb": 1.0}
    by_name = {p["planner"]: p for p in report["plans"]}
    assert set(HEURISTICS) <= set(by_name)
    assert sum(p["best"] for p in report["plans"]) == 1
    best = next(p for p in report["plans"] if p["best"])
    assert best["max_cost_ms"] == min(p["max_cost_ms"] for p in report["plans"])
    for p in report["plans"]:
        assert len(p["devices"]) == 4
        assert sorted(t for d in p["devices"] for t in d["tables"]) == sorted(f"C{i}" for i in range(1, 27))
        assert all(d["memory_bytes"] <= 1024**3 for d in p["devices"])
        assert p["max_cost_ms"] == max(d["cost_ms"] for d in p["devices"])
    skipped = {s["planner"]: s["reason"] for s in report["skipped"]}
    assert "cost model" in skipped["cost_greedy"] and "--model none" in skipped["cost_greedy"]
    assert report["cost_unit"] != "ms"


def test_a_cost_model_enables_cost_greedy_and_a_policy_the_rl_planners(tmp_path):
    shutil.copy(SHIPPED / "cost_model.pt", tmp_path)  # a profile with a cost model and no policy
    for name in ("cost_greedy", "size_greedy"):
        result = plan(
            "criteo_kaggle",
            "--devices",
            "4",
            "--memory-gb",
            "1",
            "--planner",
            name,
            "--model",
            str(tmp_path),
            "--json",
            "--column-split",
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["cost_unit"] == "ms" and report["skipped"] == []
        assert [p["planner"] for p in report["plans"]] == [name] and report["plans"][0]["best"]
    everything = json.loads(
        plan("criteo_kaggle", "--devices", "4", "--memory-gb", "1", "--model", str(tmp_path), "--json").stdout
    )
    skipped = {s["planner"]: s["reason"] for s in everything["skipped"]}
    assert "policy" in skipped["rl"] and "policy" in skipped["rl+refine"]
    shutil.copy(SHIPPED / "policy.pt", tmp_path)
    everything = json.loads(
        plan("criteo_kaggle", "--devices", "4", "--memory-gb", "1", "--model", str(tmp_path), "--json").stdout
    )
    assert {"cost_greedy", "rl", "rl+refine"} <= {p["planner"] for p in everything["plans"]}


def test_topology_from_the_file_and_a_rich_table(tmp_path):
    path = tmp_path / "w.json"
    save_workload(
        path, Workload(tuple(Table(f"t{i}", 100, 8, 1.0 + i) for i in range(6)), name="mine"), Topology(3, 1.0)
    )
    result = plan(str(path), "--planner", "lookup_greedy", *NO_MODEL)
    assert result.exit_code == 0, result.output
    assert "lookup_greedy" in result.stdout and "mine" in result.stdout and "*" in result.stdout
    assert "cost_greedy needs a model" in result.stderr


def test_the_table_marks_plans_that_tie_the_best(tmp_path):
    # two identical tables on two devices: round robin and the four proxy greedies put one on each,
    # so they tie; the first plan at the lowest max is the best (the one an export takes), every
    # other plan at it is marked as a tie
    path = tmp_path / "w.json"
    save_workload(path, Workload((Table("a", 100, 8, 2.0), Table("b", 100, 8, 2.0)), name="twins"), Topology(2, 1.0))
    result = plan(str(path), *NO_MODEL)
    assert result.exit_code == 0, result.output
    marks = {
        line.split("│")[1].strip(): line.split("│")[5].strip()
        for line in result.stdout.splitlines()
        if line.count("│") == 6 and "planner" not in line
    }
    apart = {"round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy"}
    assert apart <= set(marks) and list(marks.values()).count("*") == 1
    assert all(marks[name] in "*=" and marks[name] for name in apart)
    assert "= ties the best" in result.stdout


def test_the_table_marks_a_plan_cut_short_by_its_time_budget_as_partial():
    # cost_greedy with column splits on Criteo Kaggle takes ~10 ms; 1 ms leaves it its first placement
    result = runner.invoke(
        app,
        [
            "plan",
            "criteo_kaggle",
            "--devices",
            "4",
            "--memory-gb",
            "8",
            "--planner",
            "cost_greedy,round_robin",
            "--column-split",
            "--time-budget",
            "0.001",
        ],
    )
    assert result.exit_code == 0, result.output
    rows: list[list[str]] = []  # a row's cells, its lines wrapped by the 80-column terminal joined
    for line in result.stdout.splitlines():
        cells = line.split("│")[1:-1] or line.split("┃")[1:-1]
        if cells and (cells[0].strip() or not rows):
            rows.append(cells)
        elif cells:
            rows[-1] = [a + " " + b for a, b in zip(rows[-1], cells)]
    at = next(k for k, cell in enumerate(rows[0]) if "plan time" in cell)  # the header names the columns
    time_of = {cells[0].strip(): cells[at] for cells in rows[1:]}
    assert "partial" in time_of["cost_greedy"] and "partial" not in time_of["round_robin"]
    assert "time budget (--time-budget) ran out" in " ".join(result.stdout.split())


def test_a_plan_bound_by_one_table_suggests_column_splits_and_a_split_plan_does_not():
    # Criteo Terabyte on 8 devices: without splits its largest table alone is the slowest device
    # of every plan; by default cost_greedy splits it, round_robin not. Priced on compute (a third
    # lower split); with the profile's all-to-all per link tier the split's traffic outweighs that.
    args = ["plan", "criteo_terabyte", "--devices", "8", "--memory-gb", "24", "--planner", "cost_greedy,round_robin"]
    args += ["--sharding-types", "table_wise,column_wise", "--no-communication"]  # row-wise would split it too
    bound = runner.invoke(app, [*args, "--no-column-split"])
    assert bound.exit_code == 0, bound.output
    assert "holds one table alone" in bound.output and "--no-column-split" in " ".join(bound.output.split())
    for split in (runner.invoke(app, args), runner.invoke(app, [*args, "--column-split"])):
        assert split.exit_code == 0 and "holds one table alone" not in split.output, split.output


def test_infeasible_memory_exits_2_naming_the_bytes():
    result = plan("criteo_terabyte", "--devices", "2", "--memory-gb", "8", *NO_MODEL)
    assert result.exit_code == 2
    assert "insufficient_memory" in result.stderr and "bytes" in result.stderr
    assert "Traceback" not in result.output


def test_a_table_too_large_for_a_device_exits_2_naming_it_unless_rows_may_split():
    args = ("criteo_terabyte", "--devices", "8", "--memory-gb", "16", "--planner", "size_greedy", *NO_MODEL)
    result = plan(*args, "--sharding-types", "table_wise,column_wise")
    assert result.exit_code == 2
    assert "table_does_not_fit" in result.stderr and "'cat_" in result.stderr
    assert "column-wise" in result.stderr
    rows = plan(*args, "--json")  # every sharding type: TorchRec's rule row-shards it
    assert rows.exit_code == 0, rows.output
    labels = [t for d in json.loads(rows.stdout)["plans"][0]["devices"] for t in d["tables"]]
    assert any(t.startswith("cat_") and "[r" in t for t in labels)  # row blocks: cat_N[r0:...]
    bad = plan(*args, "--sharding-types", "table_wise,rowwise")
    assert bad.exit_code == 2 and "--sharding-types" in bad.stderr and "row_wise" in bad.stderr


def test_column_split_makes_it_fit():
    result = plan(
        "criteo_terabyte",
        "--devices",
        "8",
        "--memory-gb",
        "16",
        "--planner",
        "size_greedy",
        "--column-split",
        "--json",
        *NO_MODEL,
    )
    assert result.exit_code == 0, result.output
    tables = [t for d in json.loads(result.stdout)["plans"][0]["devices"] for t in d["tables"]]
    assert any(t.startswith("cat_0[") for t in tables)


def test_a_comma_separated_list_plans_with_those_planners_in_that_order():
    result = plan(
        "criteo_kaggle",
        "--devices",
        "4",
        "--memory-gb",
        "1",
        "--json",
        "--planner",
        "size_greedy, round_robin",
        *NO_MODEL,
    )
    assert result.exit_code == 0, result.output
    assert [p["planner"] for p in json.loads(result.stdout)["plans"]] == ["size_greedy", "round_robin"]
    empty = plan("criteo_kaggle", "--devices", "4", "--memory-gb", "1", "--planner", " , ", *NO_MODEL)
    assert empty.exit_code == 2 and "--planner" in empty.stderr and "names no planner" in empty.stderr
    one_unknown = plan(
        "criteo_kaggle", "--devices", "4", "--memory-gb", "1", "--planner", "size_greedy,nope", *NO_MODEL
    )
    assert one_unknown.exit_code == 2 and "'nope'" in one_unknown.stderr


def test_missing_file_and_missing_topology_and_unknown_planner_exit_2():
    missing = plan("no/such/workload.json", "--devices", "2", "--memory-gb", "1")
    assert missing.exit_code == 2 and "no workload file" in missing.stderr and "criteo_kaggle" in missing.stderr
    no_topology = plan("criteo_kaggle", *NO_MODEL)
    assert no_topology.exit_code == 2 and "--devices" in no_topology.stderr and "--memory-gb" in no_topology.stderr
    unknown = plan("criteo_kaggle", "--devices", "2", "--memory-gb", "1", "--planner", "nope", *NO_MODEL)
    assert unknown.exit_code == 2 and "size_greedy" in unknown.stderr
    no_model = plan("criteo_kaggle", "--devices", "2", "--memory-gb", "1", "--planner", "cost_greedy", *NO_MODEL)
    assert no_model.exit_code == 2 and "unavailable" in no_model.stderr


def test_files_that_are_not_workloads_and_options_out_of_range_exit_2_naming_what_to_fix(tmp_path):
    """A folder, a binary file, a mistyped --model and a device memory of 0: each a message
    naming the path or the option, never a traceback."""
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    cases = {
        "folder": (plan(str(tmp_path), "--devices", "2", "--memory-gb", "1"), "is a folder"),
        "binary": (plan(str(binary), "--devices", "2", "--memory-gb", "1"), "not a UTF-8 text file"),
        "model": (
            plan("criteo_kaggle", "--devices", "2", "--memory-gb", "1", "--model", str(tmp_path / "typo")),
            "--model none",
        ),
        "memory": (plan("criteo_kaggle", "--devices", "2", "--memory-gb", "0", *NO_MODEL), "--memory-gb"),
    }
    for name, (result, expected) in cases.items():
        assert result.exit_code == 2, (name, result.output)
        assert expected in " ".join(result.stderr.split()) and "Traceback" not in result.output, (name, result.stderr)


def test_a_workload_named_by_a_non_string_and_a_bool_precision_are_refused(tmp_path):
    for body, field in (
        ({"name": [1], "tables": [{"name": "a", "num_embeddings": 10, "embedding_dim": 4}]}, "name"),
        (
            {"tables": [{"name": "a", "num_embeddings": 10, "embedding_dim": 4, "bytes_per_element": True}]},
            "bytes_per_element",
        ),
    ):
        path = tmp_path / "w.json"
        path.write_text(json.dumps(body))
        result = plan(str(path), "--devices", "2", "--memory-gb", "1", *NO_MODEL)
        assert result.exit_code == 2 and field in " ".join(result.stderr.split()), result.output


def test_torchrec_output_into_a_new_folder(tmp_path):
    out = tmp_path / "new" / "plan.json"
    result = plan(
        "criteo_kaggle",
        "--devices",
        "2",
        "--memory-gb",
        "4",
        "--planner",
        "size_greedy",
        *NO_MODEL,
        "--format",
        "torchrec",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["planner"] == "size_greedy"
