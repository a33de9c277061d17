"""`autoshard evaluate --dmp` (and `plan --verify dmp`): every plan run end to end under TorchRec's
DMP on 2 gloo CPU ranks; the JSON carries each plan's ``verify`` and the three judges."""

import json

import pytest

pytest.importorskip("torchrec")

from typer.testing import CliRunner  # noqa: E402

from autoshard.cli import app  # noqa: E402

runner = CliRunner()
SUITE = {
    "name": "dmp_tiny",
    "tasks": [
        {
            "name": "syn6_2ranks",
            "synthetic": {"pool_size": 200, "pool_seed": 0, "split": "test", "num_tables": 6, "seed": 1},
            "num_devices": 2,
            "memory_slack": 1.5,
        }
    ],
}


def _check_verify(verify: dict) -> None:
    assert verify["method"] == "dmp" and verify["world_size"] == 2 and verify["outputs_match"] is True
    assert [r["rank"] for r in verify["ranks"]] == [0, 1]
    for rank in verify["ranks"]:
        assert rank["predicted_ms"] > 0 and rank["measured_ms"] > 0
        assert {p["part"] for p in rank["parts"]} == {"input_dist", "lookup", "output_dist", "allreduce"}
        assert rank["pipeline_ms"] > 0  # the whole step, in TrainPipelineSparseDist


@pytest.mark.timeout(300)
def test_evaluate_dmp_runs_every_plan_and_judges_them(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    args = ["evaluate", str(suite), "--dmp", "--rounds", "1", "--planners", "size_greedy,round_robin"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    (task,) = json.loads(result.stdout[result.stdout.index("{") :])["tasks"]
    verified = {row["planner"]: row["verify"] for row in task["planners"] if "verify" in row}
    assert set(verified) == {"size_greedy", "round_robin"}
    for verify in verified.values():
        _check_verify(verify)
    judges = task["judges"]
    assert [j["judge"] for j in judges["judges"]] == JUDGES  # the default profile measured its links
    assert all(j["prefers"] in judges["plans"] for j in judges["judges"])
    assert task["verification"]["method"] == "dmp" and task["verification"]["chosen"]


def test_evaluate_dmp_refuses_resume(tmp_path):
    result = runner.invoke(app, ["evaluate", "default", "--dmp", "--resume", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--resume" in result.output and "--dmp" in result.output


WORKLOAD = {
    "batch_size": 512,
    "tables": [
        {"name": f"t{i}", "num_embeddings": 2000 * (i + 1), "embedding_dim": 16 * (1 + i % 3), "pooling_factor": 2.0}
        for i in range(5)
    ],
}
PLAN = ["--devices", "2", "--memory-gb", "1", "--planner", "size_greedy,round_robin"]
JUDGES = ["autoshard", "torchrec_estimator", "torchrec_estimator_measured_links", "dmp"]


@pytest.mark.timeout(300)
def test_plan_verify_dmp_gives_each_verified_plan_its_report(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(WORKLOAD))
    result = runner.invoke(app, ["plan", str(path), *PLAN, "--verify", "dmp", "--verify-rounds", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    verified = [p for p in report["plans"] if "verify" in p]
    assert {p["planner"] for p in verified} == {"size_greedy", "round_robin"}
    for plan in verified:
        _check_verify(plan["verify"])
    assert report["verification"]["method"] == "dmp" and report["verification"]["chosen"]
    assert [j["judge"] for j in report["judges"]["judges"]] == JUDGES
    assert report["judges"]["judges"][-1]["prefers"] in ("size_greedy", "round_robin")  # measured


def test_plan_stats_prints_the_judges_and_points_to_dmp_where_they_disagree(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(WORKLOAD))
    result = runner.invoke(app, ["plan", str(path), *PLAN, "--stats"])
    assert result.exit_code == 0, result.output
    assert "three judges" in result.output and "torchrec_estimator" in result.output
    data = runner.invoke(app, ["plan", str(path), *PLAN, "--stats", "--json"])
    judges = json.loads(data.stdout[data.stdout.index("{") :])["judges"]
    assert judges["plans"] == ["size_greedy", "round_robin"]
    assert [j["judge"] for j in judges["judges"]] == JUDGES
    assert "torchrec_estimator_measured_links" in result.output
    if not judges["agree"]:
        assert "--verify dmp" in judges["disagreement"] and "disagree" in result.output


def test_an_unknown_verify_method_is_refused():
    result = runner.invoke(app, ["plan", "criteo_kaggle", "--verify", "gpu"])
    assert result.exit_code == 2 and "gpu" in result.output
