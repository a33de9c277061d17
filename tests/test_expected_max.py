"""A profile's measured device errors and the expected max they give each plan: `autoshard cost
errors` records them from measured evaluations, `autoshard plan` and the service report each
plan's expected max beside its predicted one, and a profile without them (or with a broken file)
still plans, without it."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.model_error import DEVICE_ERRORS_FILE, DeviceErrors, expected_max
from tests.service_support import SHIPPED_PROFILE, copy_shipped_profile, plan_body

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "tests" / "data" / "evaluation_session40_f25m1"  # the shipped profile's plans, on its own host
runner = CliRunner()


def model_only(folder: Path) -> Path:
    """A profile folder holding the shipped cost model alone."""
    folder.mkdir(parents=True)
    shutil.copyfile(SHIPPED_PROFILE / "cost_model.pt", folder / "cost_model.pt")
    return folder


def test_cost_errors_records_the_models_error_and_plans_report_their_expected_max(tmp_path):
    """From the measured reports: one centred error per distinct device set of each task (each
    task's median 0); then every plan of `plan --json` carries its expected max under them,
    recomputable from its device costs, and the table shows the column. Without the file, null."""
    profile = model_only(tmp_path / "p")
    run = runner.invoke(app, ["cost", "errors", "--model", str(profile), "--measured", str(MEASURED), "--json"])
    assert run.exit_code == 0, run.output
    summary = json.loads(run.stdout)
    found = DeviceErrors.load(profile / DEVICE_ERRORS_FILE)
    assert summary["sets"] == len(found.errors) >= 100 and summary["tasks"] == found.tasks == 11
    assert len(found.reports) == 2 and 0.03 < found.spread < 0.3
    assert abs(float(np.median(found.errors))) < 0.02  # centred per task

    args = [
        "plan",
        "criteo_kaggle",
        "--devices",
        "4",
        "--memory-gb",
        "8",
        "--planner",
        "cost_greedy,size_greedy",
        "--no-communication",
    ]
    report = json.loads(runner.invoke(app, [*args, "--model", str(profile), "--json"]).stdout)
    assert report["model_error"] == found.summary()
    for plan in report["plans"]:
        costs = [d["cost_ms"] for d in plan["devices"]]
        assert plan["expected_max_ms"] == pytest.approx(expected_max(costs, found.errors), rel=1e-9)
        assert plan["expected_max_ms"] > 0.9 * plan["max_cost_ms"]
    assert "expected max" in runner.invoke(app, [*args, "--model", str(profile)]).output

    bare = model_only(tmp_path / "bare")
    report = json.loads(runner.invoke(app, [*args, "--model", str(bare), "--json"]).stdout)
    assert report["model_error"] is None and all(p["expected_max_ms"] is None for p in report["plans"])
    assert "expected max" not in runner.invoke(app, [*args, "--model", str(bare)]).output
    (bare / DEVICE_ERRORS_FILE).write_text('{"errors": []}')  # broken: plans still come, with a note saying why
    run = runner.invoke(app, [*args, "--model", str(bare), "--json"])
    assert run.exit_code == 0 and all(p["expected_max_ms"] is None for p in json.loads(run.stdout)["plans"])
    assert "note:" in run.output and DEVICE_ERRORS_FILE in run.output.replace("\n", "")  # rich wraps long paths


def test_cost_errors_refuses_bad_input_by_name(tmp_path):
    profile = model_only(tmp_path / "p")
    cases = [
        (["--model", str(tmp_path / "nothing"), "--measured", str(MEASURED)], "--model"),
        (["--model", str(profile), "--measured", str(tmp_path / "missing")], "--measured"),
        (["--model", str(profile), "--measured", str(profile)], "no report.json"),
    ]
    report = json.loads((MEASURED / "default" / "report.json").read_text())
    task = report["tasks"][0]
    one_plan = {**report, "tasks": [{**task, "planners": [p for p in task["planners"] if p["measured_device_ms"]][:1]}]}
    (tmp_path / "one" / "x").mkdir(parents=True)
    (tmp_path / "one" / "x" / "report.json").write_text(json.dumps(one_plan))
    cases.append((["--model", str(profile), "--measured", str(tmp_path / "one")], "too few"))
    other = tmp_path / "f25m17"  # a profile of another host (family 25 model 17) than the reports' (model 1)
    other.mkdir()
    shutil.copyfile(
        ROOT / "data" / "models" / "cpu-amd-epyc-f25m17-fbgemm_tbe-t1" / "cost_model.pt", other / "cost_model.pt"
    )
    cases.append((["--model", str(other), "--measured", str(MEASURED)], "family 25 model 1, not on the profile's"))
    for args, says in cases:
        run = runner.invoke(app, ["cost", "errors", *args])
        assert run.exit_code == 2 and says in " ".join(run.output.split()), (args, run.output)
        assert "Traceback" not in run.output
    assert not (profile / DEVICE_ERRORS_FILE).exists() and not (other / DEVICE_ERRORS_FILE).exists()


@pytest.mark.parametrize("errors", [True, b"{not json", False], ids=["shipped", "corrupt", "missing"])
def test_the_service_reports_expected_maxima_and_survives_a_broken_errors_file(tmp_path, errors):
    """With the shipped profile's device errors, every plan of the answer carries its expected
    max and the answer their summary; a corrupt file is a reason at /readyz and null figures, never
    a failed profile; a missing one, null figures alone."""
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings

    copy_shipped_profile(tmp_path, device_errors=errors)
    with TestClient(create_app(Settings(model_dir=tmp_path, pool="thread"))) as client:
        answer = client.post("/v1/plans", json=plan_body(40))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        expected = [p["expected_max_ms"] for p in body["plans"]]
        reasons = client.get("/readyz").json()["reasons"]
        if errors is True:
            shipped = DeviceErrors.load(SHIPPED_PROFILE / DEVICE_ERRORS_FILE)
            assert body["model_error"] == shipped.summary()
            assert all(e is not None and e > 0.9 * p["max_cost_ms"] for e, p in zip(expected, body["plans"]))
            assert not any("device errors" in r for r in reasons)
        else:
            assert body["model_error"] is None and expected == [None] * len(expected)
            assert any("device errors" in r for r in reasons) == (errors is not False), reasons
        assert {p["planner"] for p in body["plans"]} >= {"cost_greedy", "rl"}
