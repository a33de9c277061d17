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
    assert [j["judge"] for j in judges["judges"]] == ["autoshard", "torchrec_estimator", "dmp"]
    assert all(j["prefers"] in judges["plans"] for j in judges["judges"])
    assert task["verification"]["method"] == "dmp" and task["verification"]["chosen"]


def test_evaluate_dmp_refuses_resume(tmp_path):
    result = runner.invoke(app, ["evaluate", "default", "--dmp", "--resume", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--resume" in result.output and "--dmp" in result.output
