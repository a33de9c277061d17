"""Evaluation: suites, measured (interleaved) plan costs with a CI, and the written outputs."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.errors import InputError
from autoshard.core.model_error import GRID, DeviceErrors, expected_max
from autoshard.core.task import Task, load_suite, memory_for
from autoshard.core.types import (
    DevicePlan,
    ShardingPlan,
    Table,
    TableShard,
    Topology,
    Workload,
)
from autoshard.evaluation.measure_plan import MeasuredPlan, measure_plans
from autoshard.evaluation.suite import (
    OTHER_TASKS,
    PROFILE_ERRORS,
    TaskResult,
    against_best_heuristic,
    against_held_out_heuristic,
    evaluate_task,
    expected_against_best_heuristic,
    expected_summary,
    suite_summary,
    task_rows,
    write_task_outputs,
)
from autoshard.planners.context import DEPARTURE_MARGIN, PlannerContext
from autoshard.planning.compare import Comparison
from autoshard.planning.registry import make_planner
from autoshard.profiles import DEFAULT_MODEL, default_profile_path
from cost_model.profile import ExecutionMode
from cost_model.traces.records import BenchConfig
from tests.cost_models import AnalyticalTestCostModel

TINY = Workload(tuple(Table(f"t{i}", 100 * (i + 1), 8 * (1 + i % 2), 1.0 + i) for i in range(4)), 64, "tiny")
CONFIG = BenchConfig(batch_size=64, warmups=1, repeats=3, mode=ExecutionMode.EMBEDDING_BAG)


def test_two_tiny_plans_measure_finite_costs_and_a_ci():
    topology = Topology(2, 1.0)
    plans = [make_planner(n).plan(TINY, topology) for n in ("round_robin", "lookup_greedy")]
    measured = measure_plans(plans, 64, CONFIG, rounds=3, reference=0)
    assert [m.planner for m in measured] == ["round_robin", "lookup_greedy"]
    for m in measured:
        assert len(m.device_ms) == 2 and all(math.isfinite(v) and v > 0 for v in m.device_ms)
        assert m.max_ms == pytest.approx(m.max_ms) and m.max_ms >= max(m.device_ms) * 0.5
        low, high = m.ratio_ci95
        assert math.isfinite(low) and low <= m.ratio_to_reference <= high
    assert measured[0].ratio_to_reference == pytest.approx(1.0)


def test_evaluate_task_writes_table_csv_and_chart(tmp_path):
    task = Task("tiny", TINY, Topology(2, 1.0))
    measurer = lambda plans, batch, ref: measure_plans(plans, batch, CONFIG, 2, ref)  # noqa: E731
    result = evaluate_task(task, ["round_robin", "cost_greedy"], PlannerContext(AnalyticalTestCostModel()), measurer)
    assert result.reference == "cost_greedy"
    files = write_task_outputs(result, tmp_path)
    md = (tmp_path / "tiny.md").read_text()
    assert "| cost_greedy |" in md and "ratio to cost_greedy" in md
    assert (tmp_path / "tiny.csv").read_text().count("\n") == 3
    assert (tmp_path / "tiny.png").read_bytes()[:4] == b"\x89PNG"
    assert set(files) == {"markdown", "csv", "chart"}


def test_bundled_suite_and_memory_rule():
    name, tasks = load_suite("default")
    assert name == "default" and len(tasks) >= 5
    synthetic = [t for t in tasks if t.name.startswith("syn80_")]
    assert len(synthetic) >= 3 and all(len(t.workload.tables) == 80 for t in synthetic)
    for t in synthetic:
        largest = max(x.memory_bytes for x in t.workload.tables)
        assert t.topology.device_memory_bytes >= largest
        assert t.topology.device_memory_gb == memory_for(t.workload, 8, 1.5)
    by_name = {t.name: t for t in tasks}
    assert by_name["criteo_kaggle_b8192"].workload.batch_size == 8192  # a preset at another batch size
    assert by_name["criteo_kaggle_b8192"].workload.tables == by_name["criteo_kaggle"].workload.tables
    assert by_name["syn80x4"].topology.num_devices == 4


BUNDLED_SUITES = sorted(
    p.stem for p in (Path(__file__).resolve().parents[1] / "autoshard" / "core" / "suites").glob("*.json")
)


@pytest.mark.parametrize("suite", BUNDLED_SUITES)
def test_every_bundled_suite_loads_and_each_task_fits_its_devices(suite, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # workload files are named from the repository root
    name, tasks = load_suite(suite)
    assert name == suite and tasks
    for task in tasks:
        assert task.workload.tables and task.topology.num_devices >= 1
        assert task.topology.device_memory_bytes * task.topology.num_devices >= task.workload.memory_bytes


def test_the_row_cap_suite_draws_from_a_pool_of_smaller_tables():
    name, tasks = load_suite("row_cap")
    small = {t.name: t for t in tasks}["syn40x4_small"]
    assert name == "row_cap" and len(small.workload.tables) == 40
    assert max(t.num_embeddings for t in small.workload.tables) <= 10**6.3
    assert max(t.num_embeddings for t in load_suite("default")[1][0].workload.tables) > 10**6.3  # the default pool


def test_bad_suite_is_a_clear_error(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"tasks": [{"name": "x", "workload": "criteo_kaggle"}]}))
    with pytest.raises(InputError, match=r"tasks\[0\].*num_devices"):
        load_suite(path)
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "nope.json")])
    assert result.exit_code == 2 and "no suite file" in result.output


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"tasks": [', "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"name": "x"}', "tasks: must be a non-empty list"),
        ('{"tasks": [1]}', "tasks[0]: task: must be a JSON object"),
        ('{"tasks": {"a": 1}}', "tasks: must be a non-empty list"),
        ('{"tasks": [{"synthetic": [1], "num_devices": 2}]}', "synthetic: must be a JSON object"),
        ('{"tasks": [{"synthetic": {"pool_size": 500}, "num_devices": 2}]}', "synthetic.num_tables: is required"),
        (
            '{"tasks": [{"synthetic": {"num_tables": 999}, "num_devices": 2}]}',
            "synthetic.num_tables: the pool's test split",
        ),
        (
            '{"tasks": [{"synthetic": {"num_tables": 8, "max_log10_rows": "x"}, "num_devices": 2}]}',
            "synthetic.max_log10_rows",
        ),
        (
            '{"tasks": [{"synthetic": {"num_tables": 8}, "num_devices": 2, "memory_slack": "x"}]}',
            "memory_slack: must be a number",
        ),
        (
            '{"tasks": [{"synthetic": {"num_tables": 8}, "num_devices": 0}]}',
            "num_devices: must be an integer >= 1, got 0",
        ),
        (
            '{"tasks": [{"workload": "criteo_kaggle", "num_devices": "4"}]}',
            "num_devices: must be an integer >= 1, got '4'",
        ),
        (
            '{"name": "../escape", "tasks": [{"workload": "criteo_kaggle", "num_devices": 4}]}',
            "name: must be a plain folder name",
        ),
    ],
)
def test_a_malformed_suite_names_the_task_and_the_field(tmp_path, content, expected):
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(InputError) as error:
        load_suite(path)
    assert expected in str(error.value)
    result = CliRunner().invoke(app, ["evaluate", str(path), "--planners", "size_greedy", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_suite_task_takes_its_workload_file_s_topology_and_tiny_workloads_keep_their_memory(tmp_path):
    from autoshard.core.workload_file import save_workload

    save_workload(tmp_path / "w.json", TINY, Topology(2, 4.0))
    tiny = Workload((Table("one", 10, 8),), 64, "one")  # 320 bytes: GiB rounded to 6 places would be 0
    save_workload(tmp_path / "one.json", tiny)
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "tasks": [
                    {"workload": str(tmp_path / "w.json")},
                    {"workload": str(tmp_path / "one.json"), "num_devices": 2},
                ]
            }
        )
    )
    (from_file, small), name = load_suite(path)[1], load_suite(path)[0]
    assert name == "s" and from_file.topology == Topology(2, 4.0)
    assert 0 < small.topology.device_memory_bytes and small.topology.device_memory_bytes >= 320


def test_evaluate_with_no_planner_named_is_an_error(tmp_path):
    result = CliRunner().invoke(app, ["evaluate", "default", "--planners", ",", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--planners" in result.output


def test_cli_evaluate_json(tmp_path):
    suite = tmp_path / "s.json"
    suite.write_text(
        json.dumps(
            {
                "name": "s",
                "tasks": [{"name": "kaggle", "workload": "criteo_kaggle", "num_devices": 4, "device_memory_gb": 2}],
            }
        )
    )
    result = CliRunner().invoke(
        app, ["evaluate", str(suite), "--planners", "round_robin,size_greedy", "--out", str(tmp_path / "out"), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert [p["planner"] for p in report["tasks"][0]["planners"]] == ["round_robin", "size_greedy"]
    assert (tmp_path / "out" / "s" / "kaggle.md").exists()
    # the report holds what was planned: the task's workload and topology, and each plan's devices
    from autoshard.core.presets import load_preset
    from autoshard.core.workload_file import workload_from_dict

    workload, topology = workload_from_dict(report["tasks"][0]["workload"])
    assert workload == load_preset("criteo_kaggle")[0] and (topology.num_devices, topology.device_memory_gb) == (4, 2)
    for row in report["tasks"][0]["planners"]:  # every table on exactly one of the 4 devices
        assert len(row["devices"]) == 4
        assert sorted(name for device in row["devices"] for name in device) == sorted(t.name for t in workload.tables)
    assert report["tasks"][0]["planners"][0]["devices"][0] == ["C1", "C5", "C9", "C13", "C17", "C21", "C25"]


def test_evaluate_task_runs_plans_distributed(tmp_path):
    pytest.importorskip("torchrec")
    from autoshard.torchrec.dmp_run import (
        DistributedConfig,
        compare_distributed,
    )

    task = Task("tiny", TINY, Topology(2, 1.0))
    config = DistributedConfig(world_size=2, steps=2, warmups=1, batch_size=32)
    result = evaluate_task(
        task,
        ["round_robin", "size_greedy"],
        PlannerContext(),
        distributed=lambda plans, w: compare_distributed(plans, w, config, rounds=1),
    )
    rows = {r.planner: r.to_dict() for r in task_rows(result)}
    for name in ("round_robin", "size_greedy"):
        assert rows[name]["distributed_iteration_ms"] > 0
    write_task_outputs(result, tmp_path)
    assert "distributed iteration" in (tmp_path / "tiny.md").read_text()


def test_measuring_order_balances_positions_over_pairs_of_rounds():
    """Rotated each round and backwards every other round: over rounds 2k and 2k + 1 every plan's
    positions add up to the same, so a drift within a round biases no plan."""
    from autoshard.evaluation.measure_plan import measuring_order

    for count in (2, 5, 12):
        for start in (0, 2):
            positions = [0] * count
            for r in (start, start + 1):
                for position, plan in enumerate(measuring_order(count, r)):
                    positions[plan] += position
                assert sorted(measuring_order(count, r)) == list(range(count))
            assert len(set(positions)) == 1


def test_identical_plans_are_measured_once_and_read_the_same():
    topology = Topology(2, 1.0)
    plan = make_planner("round_robin").plan(TINY, topology)
    twin = make_planner("round_robin").plan(TINY, topology)
    other = make_planner("lookup_greedy").plan(TINY, topology)
    measured = measure_plans([plan, other, twin], 64, CONFIG, rounds=2, reference=0)
    assert measured[2].device_ms == measured[0].device_ms and measured[2].ratio_to_reference == pytest.approx(1.0)
    assert measured[1].planner == "lookup_greedy"


def test_a_device_set_two_plans_share_is_measured_once_a_round_and_read_by_both(monkeypatch):
    import autoshard.evaluation.measure_plan as measure_plan
    from autoshard.core.types import DevicePlan, ShardingPlan, TableShard

    def plan(name, *devices):
        return ShardingPlan(name, tuple(DevicePlan(tuple(TableShard(TINY.tables[i]) for i in d), 0.0) for d in devices))

    a = plan("a", (0,), (1, 2, 3))
    b = plan("b", (1, 2, 3), (0,))  # a's sets on the other devices
    c = plan("c", (0,), (1, 2), (3,))  # shares {t0} with a and b only
    measured_sets, real_measure = [], measure_plan.measure

    def counting(tables, *args):
        measured_sets.append(tuple(t.name for t in tables))
        return real_measure(tables, *args)

    monkeypatch.setattr(measure_plan, "measure", counting)
    measured = measure_plans([a, b, c], 64, CONFIG, rounds=2, reference=0)
    assert sorted(measured_sets) == sorted(
        [("t0",), ("t1", "t2", "t3"), ("t1", "t2"), ("t3",)] * 2
    )  # 4 sets x 2 rounds
    assert measured[1].device_ms == measured[0].device_ms[::-1] and measured[1].ratio_to_reference == pytest.approx(1.0)
    assert measured[2].device_ms[0] == measured[0].device_ms[0]


def test_a_measured_evaluation_records_the_machine_s_drift_before_and_after(tmp_path, monkeypatch):
    from autoshard.core.workload_file import save_workload

    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")  # no re-exec of pytest for the allocator settings
    save_workload(tmp_path / "tiny.json", TINY)
    suite = tmp_path / "s.json"
    suite.write_text(
        json.dumps(
            {
                "name": "s",
                "tasks": [
                    {"name": name, "workload": str(tmp_path / "tiny.json"), "num_devices": 2, "device_memory_gb": 1}
                    for name in ("tiny", "tiny_again")
                ],
            }
        )
    )
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(suite),
            "--planners",
            "round_robin,cost_greedy",
            "--measure",
            "--rounds",
            "2",
            "--drift-samples",
            "1",
            "--no-communication",
            "--out",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "s" / "report.json").read_text())
    (against,) = report["tasks"][0]["against_best_heuristic"]  # cost_greedy against round_robin, the one heuristic
    assert against["planner"] == "cost_greedy" and against["heuristic"] == "round_robin"
    assert against["ci95"][0] <= against["ratio"] <= against["ci95"][1]
    assert report["against_best_heuristic"]["cost_greedy"]["tasks"] == 2
    # each task's ratio expected under the model's errors on the other task's measured devices
    assert against["predicted_ratio"] > 0 and against["expected_ratio"] > 0
    summary = report["against_best_heuristic"]["cost_greedy"]
    assert summary["geomean_predicted"] > 0 and summary["geomean_expected"] > 0
    assert "predicted / expected under the model's errors" in Path(report["tasks"][0]["files"]["markdown"]).read_text()
    drift = report["machine_drift"]
    profile = default_profile_path()[0].resolve().name  # the host's profile: its traces re-measured
    assert drift["traces"].endswith(f"{profile}.jsonl.gz")
    for when in ("before", "after"):
        low, high = drift[when]["ratio_range"]
        assert 0 < low <= drift[when]["median_ratio"] <= high
        assert drift[when]["holds"] == (
            0.8 <= drift[when]["median_ratio"] <= 1.25 and drift[when]["same_device"] and drift[when]["sets_alike"]
        )
        assert drift[when]["traced_device"] and drift[when]["this_device"]
    assert "machine before measuring" in result.output
    settings = report["settings"]  # what the figures were made with, recorded with them
    assert settings["planners"] == ["round_robin", "cost_greedy"] and settings["rounds"] == 2
    for row in report["tasks"][0]["planners"]:  # each round, device by device, and each device's prediction
        rounds = row["measured_round_device_ms"]
        assert len(rounds) == 2 and all(len(r) == len(row["devices"]) for r in rounds)
        assert row["measured_device_ms"] == pytest.approx([float(np.median(d)) for d in zip(*rounds)], abs=1e-3)
        assert max(row["predicted_device_ms"]) == pytest.approx(row["predicted_max_ms"], abs=1e-3)
    # as if the run had died after its first task: --resume measures the second only, and the
    # first task's verdict, read back from its rows, is what it was
    path = tmp_path / "out" / "s" / "report.json"
    path.write_text(json.dumps(report | {"tasks": report["tasks"][:1], "complete": False}))
    resumed = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(suite),
            "--planners",
            "round_robin,cost_greedy",
            "--measure",
            "--rounds",
            "2",
            "--drift-samples",
            "0",
            "--no-communication",
            "--out",
            str(tmp_path / "out"),
            "--resume",
        ],
    )
    assert resumed.exit_code == 0, resumed.output
    assert "tiny: taken from the unfinished run" in resumed.output
    hint = f"autoshard cost errors --model {DEFAULT_MODEL} --measured {tmp_path / 'out' / 's'}"
    assert "".join(hint.split()) in "".join(resumed.output.split())  # how to record the model's error on these plans
    again = json.loads(path.read_text())
    assert again["complete"] is True and [t["task"] for t in again["tasks"]] == ["tiny", "tiny_again"]
    assert again["tasks"][0]["planners"] == report["tasks"][0]["planners"]  # its plans and rounds, as they were
    assert again["against_best_heuristic"]["cost_greedy"]["tasks"] == 2
    (read_back,) = [a for a in again["tasks"][0]["against_best_heuristic"]]
    assert read_back["ratio"] == pytest.approx(against["ratio"], rel=1e-3)

    assert settings["communication"] is False and settings["column_split"] == "auto"  # the cost-model planners split
    assert settings["profile"] == profile and len(settings["model_sha256"]) == 64
    assert settings["departure_margin"] == DEPARTURE_MARGIN and "search_iterations" not in settings


def _measured(planner: str, rounds: tuple[float, ...]) -> MeasuredPlan:
    return MeasuredPlan(planner, (max(rounds),), sorted(rounds)[len(rounds) // 2], 0.0, 1.0, (1.0, 1.0), rounds)


def test_against_the_best_heuristic_pairs_rounds_and_says_faster_tie_or_slower():
    """Hand-computed: the best heuristic is the lowest measured max (lookup_greedy, 10.0 ms);
    cost_greedy is 0.9x it in every round (an interval of width 0: faster); rl is 1.1x in two
    rounds and 0.9x in two (geometric mean 0.995, interval about 1: a tie); torchrec 1.2x, 1.3x
    (slower); the heuristics themselves are not compared."""
    heuristic = (10.0, 11.0, 9.0, 10.0)
    measured = (
        _measured("round_robin", (12.0, 13.0, 11.0, 12.0)),
        _measured("lookup_greedy", heuristic),
        _measured("cost_greedy", tuple(0.9 * h for h in heuristic)),
        _measured("rl", tuple(f * h for f, h in zip((1.1, 0.9, 1.1, 0.9), heuristic))),
        _measured("torchrec", tuple(f * h for f, h in zip((1.2, 1.3, 1.2, 1.3), heuristic))),
    )
    result = TaskResult(Task("t", TINY, Topology(2, 1.0)), None, measured, "cost_greedy")  # type: ignore[arg-type]
    rows = {a.planner: a for a in against_best_heuristic(result)}
    assert set(rows) == {"cost_greedy", "rl", "torchrec"} and {a.heuristic for a in rows.values()} == {"lookup_greedy"}
    assert rows["cost_greedy"].ratio == pytest.approx(0.9) and rows["cost_greedy"].verdict == "faster"
    assert rows["rl"].ratio == pytest.approx(math.sqrt(1.1 * 0.9)) and rows["rl"].verdict == "tie"
    assert rows["rl"].ci95[0] < 1 < rows["rl"].ci95[1]
    assert rows["torchrec"].ratio == pytest.approx(math.sqrt(1.2 * 1.3)) and rows["torchrec"].verdict == "slower"
    summary = suite_summary([list(rows.values()), [rows["cost_greedy"]]])
    assert summary["cost_greedy"].to_dict() == {
        "geomean_vs_best_heuristic": 0.9,
        "tasks": 2,
        "faster": 2,
        "tie": 0,
        "slower": 0,
    }
    assert summary["rl"].tie == 1 and summary["torchrec"].slower == 1


def test_the_held_out_heuristic_is_chosen_on_the_other_pairs_of_rounds():
    """Hand-computed, 6 rounds = 3 pairs. dim_greedy is lowest over all rounds (median 10 against
    10.2) only thanks to pair 0 (8 ms): the best heuristic chosen on every round compares pair 0
    with those 8 ms. Held out, pair 0 is compared with the heuristic lowest over pairs 1 and 2
    (dim_greedy's median 11 there, lookup_greedy 10.2: lookup_greedy), pairs 1 and 2 with the one
    lowest over the other two pairs (dim_greedy, medians 9 and 10 against 10.2)."""
    a = (8.0, 8.0, 12.0, 12.0, 10.0, 10.0)
    b = (10.2,) * 6
    measured = (_measured("dim_greedy", a), _measured("lookup_greedy", b), _measured("cost_greedy", (9.5,) * 6))
    result = TaskResult(Task("t", TINY, Topology(2, 1.0)), None, measured, "cost_greedy")  # type: ignore[arg-type]
    (best,) = against_best_heuristic(result)
    assert best.heuristic == "dim_greedy"
    assert best.ratio == pytest.approx(math.exp((math.log(9.5 / 8) + math.log(9.5 / 12) + math.log(9.5 / 10)) / 3))
    (held,) = against_held_out_heuristic(result)
    assert held.heuristic == "lookup_greedy/dim_greedy"
    assert held.ratio == pytest.approx(math.exp((math.log(9.5 / 10.2) + math.log(9.5 / 12) + math.log(9.5 / 10)) / 3))
    assert held.ratio < best.ratio  # the flattery removed
    # with 2 rounds (one pair) there is nothing to hold out
    short = TaskResult(
        result.task, None, tuple(_measured(m.planner, m.round_max_ms[:2]) for m in measured), "cost_greedy"
    )
    assert against_held_out_heuristic(short) == []


def test_the_expected_max_of_a_plan_under_device_errors_is_hand_computed():
    """Errors +a and -a, drawn independently per device: one device of 10 ms expects 10 E[e^e];
    two devices of 10 ms expect 10 (3 e^a + e^-a) / 4 (the max is the lower draw only when both
    draw -a); a device with no work counts for nothing; no errors: the predicted max. Within
    (hi - lo) / (2 GRID) of it by construction (the range the max can take, over 512): 4e-4 here."""
    a = 0.1
    errors = np.array([a, -a])
    assert expected_max([10.0], errors) == pytest.approx(10 * (math.exp(a) + math.exp(-a)) / 2, rel=5e-4)
    assert expected_max([10.0, 10.0, 0.0], errors) == pytest.approx(10 * (3 * math.exp(a) + math.exp(-a)) / 4, rel=5e-4)
    assert expected_max([10.0, 4.0], np.zeros(3)) == 10.0 and expected_max([10.0, 4.0], np.zeros(0)) == 10.0
    # 10 and 9.5 ms: the max is 10 e^a, 10 e^-a (9.5 e^a = 10.499 is above 10 e^-a = 9.048 only then), or 9.5 e^a
    both = [10 * math.exp(a), 9.5 * math.exp(a), 10 * math.exp(a), 10 * math.exp(-a)]  # (+,+), (-,+), (+,-), (-,-)
    assert expected_max([10.0, 9.5], errors) == pytest.approx(sum(both) / 4, rel=5e-4)


def test_the_expected_max_is_what_sampling_the_errors_finds():
    """Against 400,000 Monte Carlo draws of every device's error, on plans of 1 to 64 devices and
    errors of either sign and skew: within 0.2% (the draws' own noise is ~0.05%)."""
    rng = np.random.default_rng(5)
    for devices, spread in ((1, 0.1), (8, 0.09), (8, 0.3), (64, 0.05)):
        costs = rng.uniform(5, 10, devices)
        errors = np.concatenate([rng.normal(0, spread, 300), rng.exponential(spread, 40)])  # a heavy upper tail
        drawn = rng.choice(errors, size=(400_000, devices))
        sampled = float((costs * np.exp(drawn)).max(1).mean())
        assert expected_max(costs, errors) == pytest.approx(sampled, rel=2e-3)


@settings(max_examples=200, deadline=None)
@given(
    costs=st.lists(st.floats(0.1, 100.0), min_size=1, max_size=40),
    errors=st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=50),
    device=st.integers(0, 39),
    raise_by=st.floats(0.0, 50.0),
)
def test_the_expected_max_stays_in_its_range_and_rises_with_any_device_s_cost(costs, errors, device, raise_by):
    """Whatever the costs and errors: the expected max lies between the max at the lowest and at
    the highest error, and raising one device's cost never lowers it (beyond the integral's
    (hi - lo) / (2 GRID) of each)."""
    top, low, high = max(costs), math.exp(min(errors)), math.exp(max(errors))
    tolerance = top * (high - low) / (2 * GRID) * 1.001 + 1e-9
    found = expected_max(costs, errors)
    assert top * low - tolerance <= found <= top * high + tolerance
    raised = list(costs)
    raised[device % len(costs)] += raise_by
    slack = max(raised) * (high - low) / (2 * GRID) * 1.001 + 1e-9
    assert expected_max(raised, errors) >= found - tolerance - slack


def test_device_errors_round_trip_and_refuse_a_broken_file(tmp_path):
    """What ``autoshard cost errors`` writes reads back; a file that is not a list of finite
    errors is an ``InputError`` naming the file, which the service and the CLI report."""
    found = DeviceErrors((0.1, -0.05, 0.0), 2, ("runs/a/report.json",))
    found.save(tmp_path / "e.json")
    assert DeviceErrors.load(tmp_path / "e.json") == found
    assert found.summary() == {"sets": 3, "tasks": 2, "spread": round(float(np.std([0.1, -0.05, 0.0])), 4)}
    for text in ("{", '{"errors": []}', '{"errors": [0.1, "nan"]}', '{"sets": 3}', "[1, 2]"):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(InputError) as raised:
            DeviceErrors.load(tmp_path / "bad.json")
        assert "bad.json" in str(raised.value) and raised.value.field == "errors"


def _plan(planner: str, device_tables: list[list[int]], costs: list[float]) -> ShardingPlan:
    return ShardingPlan(
        planner,
        tuple(
            DevicePlan(tuple(TableShard(TINY.tables[i]) for i in tables), cost)
            for tables, cost in zip(device_tables, costs)
        ),
    )


def test_a_task_s_expected_ratio_comes_from_the_other_tasks_device_errors_alone():
    """Two tasks of the same plans: the heuristic's devices predicted 10 and 6 ms, cost_greedy's
    8 and 8 (predicted ratio 0.8). Task "exact" measured every device as predicted (errors 0);
    task "noisy" 10% off (+-). The noisy task expects what the exact one's errors say, none: 0.8.
    The exact task expects under the noisy one's: cost_greedy's two devices at the max each draw
    an error, so its max rises by about 5% (draws of e^0.095 or e^-0.1 and e^-0.095: 8 x 1.051),
    the heuristic's by about 0.2% (its 6 ms device never passes its 10 ms one): about 0.839."""
    heuristic = _plan("lookup_greedy", [[0, 1], [2, 3]], [10.0, 6.0])
    greedy = _plan("cost_greedy", [[0, 2], [1, 3]], [8.0, 8.0])
    comparison = Comparison((heuristic, greedy), (), (), (), ("lookup_greedy", "cost_greedy"))

    def measured(heuristic_ms: tuple[float, float], greedy_ms: tuple[float, float]) -> tuple[MeasuredPlan, ...]:
        return (
            MeasuredPlan("lookup_greedy", heuristic_ms, max(heuristic_ms), 0.0, 1.0, (1.0, 1.0), (max(heuristic_ms),)),
            MeasuredPlan("cost_greedy", greedy_ms, max(greedy_ms), 0.0, 1.0, (1.0, 1.0), (max(greedy_ms),)),
        )

    exact = TaskResult(
        Task("exact", TINY, Topology(2, 1.0)), comparison, measured((10.0, 6.0), (8.0, 8.0)), "cost_greedy"
    )
    noisy = TaskResult(
        Task("noisy", TINY, Topology(2, 1.0)), comparison, measured((11.0, 5.4), (8.8, 8.0 / 1.1)), "cost_greedy"
    )
    (on_exact,), (on_noisy,) = expected_against_best_heuristic([exact, noisy])
    assert on_exact.heuristic == on_noisy.heuristic == "lookup_greedy"
    assert on_noisy.predicted == on_exact.predicted == pytest.approx(0.8)
    assert on_noisy.expected == pytest.approx(0.8)
    assert on_exact.expected == pytest.approx(0.839, abs=0.005)
    assert expected_against_best_heuristic([exact]) == [[]]  # a suite of one: no other task's errors
    # ... unless the profile ships its measured device errors: +-0.1 here. cost_greedy's two 8 ms
    # devices expect 8 (3 e^0.1 + e^-0.1) / 4, the heuristic's max is its 10 ms device's, 10 E[e^e]
    ((alone,),) = expected_against_best_heuristic([exact], profile_errors=np.array([0.1, -0.1]))
    greedy_expects = 8 * (3 * math.exp(0.1) + math.exp(-0.1)) / 4
    assert alone.expected == pytest.approx(greedy_expects / (10 * (math.exp(0.1) + math.exp(-0.1)) / 2), rel=1e-3)
    assert (alone.errors_from, on_exact.errors_from) == (PROFILE_ERRORS, OTHER_TASKS)
    assert expected_against_best_heuristic([exact, noisy], np.array([0.5]))[0] == [on_exact]  # other tasks first
    summary = expected_summary([[on_exact], [on_noisy]])
    assert summary["cost_greedy"].predicted == pytest.approx(0.8)
    assert summary["cost_greedy"].expected == pytest.approx(math.sqrt(on_exact.expected * 0.8), abs=1e-4)


def test_the_drift_check_finds_the_traces_of_a_model_trained_on_one_file():
    """metrics.json names one trace file as a string and several as a list; the drift check read
    the string's first character as a path and skipped the check for the adapted profile."""
    from types import SimpleNamespace

    from autoshard.cli.evaluate import _anchor_traces

    root = Path(__file__).resolve().parents[1]
    one = "data/traces/cpu-amd-epyc-f25m17-fbgemm_tbe-t1.jsonl.gz"
    assert _anchor_traces(SimpleNamespace(metrics={"traces": one})) == root / one
    many = ["data/traces/cpu-amd-epyc-fbgemm_tbe-t1.jsonl.gz", one]
    assert _anchor_traces(SimpleNamespace(metrics={"traces": many})) == root / many[0]
    assert _anchor_traces(SimpleNamespace(metrics={})) is None


def test_a_run_stopped_after_its_first_task_keeps_that_task_and_resume_plans_only_the_rest(tmp_path, monkeypatch):
    """report.json is written after every task (``complete: false``), then once more at the end:
    a run that dies part-way keeps what it did, and ``--resume`` takes those tasks as they are."""
    import autoshard.evaluation.suite

    planned = []

    def evaluate_then_die(task, *args, **kwargs):
        if planned:
            raise KeyboardInterrupt  # the second task: as a kill would
        planned.append(task.name)
        return evaluate_task(task, *args, **kwargs)

    monkeypatch.setattr(autoshard.evaluation.suite, "evaluate_task", evaluate_then_die)
    out = tmp_path / "o"
    options = ["--model", "none", "--planners", "size_greedy,round_robin", "--out", str(out)]
    result = CliRunner().invoke(app, ["evaluate", "default", *options])
    assert result.exit_code == 130  # interrupted: progress so far is saved
    report = json.loads((out / "default" / "report.json").read_text())
    assert report["complete"] is False and [t["task"] for t in report["tasks"]] == planned == ["syn80_s1"]
    first = report["tasks"][0]
    assert {p["planner"] for p in first["planners"]} == {"size_greedy", "round_robin"}

    other = CliRunner().invoke(app, ["evaluate", "default", *options[:3], "size_greedy", *options[4:], "--resume"])
    assert other.exit_code == 2 and "planners" in other.output  # made with other options: refused

    resumed = []
    monkeypatch.setattr(
        autoshard.evaluation.suite,
        "evaluate_task",
        lambda task, *args, **kwargs: resumed.append(task.name) or evaluate_task(task, *args, **kwargs),
    )
    finished = CliRunner().invoke(app, ["evaluate", "default", *options, "--resume"])
    assert finished.exit_code == 0, finished.output
    report = json.loads((out / "default" / "report.json").read_text())
    assert report["complete"] is True and len(report["tasks"]) == 8 and report["tasks"][0] == first
    assert "syn80_s1" not in resumed and len(resumed) == 7
    again = CliRunner().invoke(app, ["evaluate", "default", *options, "--resume"])
    assert again.exit_code == 2 and "finished" in again.output


def test_mad_sigma_by_hand_ignores_the_far_off_value():
    from autoshard.core.stats import mad_sigma

    # median 3, absolute deviations 2, 1, 0, 1, 97: their median 1
    assert mad_sigma([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(1.4826)
    assert mad_sigma(np.array([5.0, 5.0, 5.0])) == 0.0
