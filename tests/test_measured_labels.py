"""Learning from measured plans: labels relative to their task, read back from `evaluate`'s
reports, and `autoshard cost adapt --measured` end to end."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from autoshard.cli import app
from autoshard.core.presets import load_preset
from autoshard.core.types import DeviceSet, MeasuredDeviceSet
from autoshard.core.workload_file import save_workload
from autoshard.evaluation.measured_reports import measured_device_sets
from cost_model.checkpoint import load_cost_model
from cost_model.relative_labels import relative_labels
from tests.conftest import SHIPPED_PROFILE as SHIPPED_MODEL
from tests.test_evaluation import TINY


def test_a_set_s_label_is_its_cost_relative_to_its_task_averaged_over_runs(shipped_model):
    # three sets of one task: run A measures them at 1, 2 and 4 times their prediction, run B (a
    # host 1.5x slower) at 3, 6 and 12 times. Relative to the task's median set: 0.5, 1 and 2 in
    # both runs, so the labels are 0.5, 1 and 2 times the predictions, whatever each run's speed.
    model = shipped_model
    tables = load_preset("criteo_kaggle")[0].tables
    sets = [DeviceSet(("kaggle", "p", k), tuple(tables[3 * k : 3 * k + 3]), 2048) for k in range(3)]
    predicted = model.predict_many([s.tables for s in sets], 2048)
    measured = [
        MeasuredDeviceSet(run, s, p * factor * scale)
        for run, scale in (("A", 1.0), ("B", 3.0))
        for s, p, factor in zip(sets, predicted, (1, 2, 4))
    ]
    labels = relative_labels(model, measured)
    assert [l.total_ms / p for l, p in zip(labels, predicted)] == pytest.approx([0.5, 1.0, 2.0])
    for label, (forward, backward, total) in zip(labels, model.predict_detail_many([s.tables for s in sets], 2048)):
        assert (label.forward_ms / label.total_ms, label.backward_ms / label.total_ms) == pytest.approx(
            (forward / total, backward / total)
        )  # forward and backward scaled with the total
    # a run that saw only some of the task's sets counts for those, relative to its own median
    once = MeasuredDeviceSet("C", sets[0], predicted[0] * 7.0)
    alone = relative_labels(model, measured + [once])
    assert alone[0].total_ms / predicted[0] == pytest.approx(math.exp((2 * math.log(0.5) + 0.0) / 3))


def _measured_run(tmp_path, monkeypatch) -> tuple:
    monkeypatch.setenv("AUTOSHARD_NO_REEXEC", "1")  # no re-exec of pytest for the allocator settings
    save_workload(tmp_path / "tiny.json", TINY)
    suite = tmp_path / "s.json"
    suite.write_text(
        json.dumps(
            {
                "name": "s",
                "tasks": [
                    {
                        "name": name,
                        "workload": str(tmp_path / "tiny.json"),
                        "num_devices": devices,
                        "device_memory_gb": 1,
                    }
                    for name, devices in (("two", 2), ("three", 3))
                ],
            }
        )
    )
    run = CliRunner().invoke(
        app,
        [
            "evaluate",
            str(suite),
            "--planners",
            "round_robin,size_greedy,dim_greedy,cost_greedy",
            "--measure",
            "--rounds",
            "2",
            "--drift-samples",
            "0",
            "--no-communication",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
    )
    assert run.exit_code == 0, run.output
    return tmp_path / "run", json.loads((tmp_path / "run" / "s" / "report.json").read_text())


def test_cost_adapt_fine_tunes_on_the_device_sets_of_measured_plans(tmp_path, monkeypatch):
    folder, report = _measured_run(tmp_path, monkeypatch)
    found = measured_device_sets([folder])
    distinct = {
        (t["task"], tuple(sorted(names)))
        for t in report["tasks"]
        for p in t["planners"]
        for names in p["devices"]
        if names
    }
    assert len(found) == sum(1 for t in report["tasks"] for p in t["planners"] for names in p["devices"] if names)
    assert {(m.device.member[0], tuple(sorted(x.name for x in m.device.tables))) for m in found} == distinct
    out = tmp_path / "adapted"
    run = CliRunner().invoke(
        app,
        [
            "cost",
            "adapt",
            "--model",
            str(SHIPPED_MODEL),
            "--measured",
            str(folder),
            "--out",
            str(out),
            "--max-epochs",
            "5",
        ],
    )
    assert run.exit_code == 0, run.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["measured_sets"] == len(distinct) and metrics["adapted_from"]["measured"] == [str(folder)]
    assert metrics["profile"]["id"] == load_cost_model(SHIPPED_MODEL).profile.id
    assert metrics["traces"]  # the base's anchor traces stand for the profile (drift checks)
    assert load_cost_model(out).predict(list(TINY.tables), TINY.batch_size) > 0


def test_cost_adapt_refuses_reports_without_their_plans_and_nothing_to_learn_from(tmp_path, monkeypatch):
    folder, report = _measured_run(tmp_path, monkeypatch)
    for task in report["tasks"]:
        del task["workload"]  # as reports before 2026-12-04
    old = tmp_path / "old.json"
    old.write_text(json.dumps(report))
    cases = [
        (["--measured", str(old)], ["--measured", "does not hold its plans", "evaluate"]),
        (["--measured", str(tmp_path / "none")], ["--measured", "does not exist"]),
        ([], ["--traces", "--measured", "nothing to adapt on"]),
    ]
    for args, words in cases:
        run = CliRunner().invoke(
            app, ["cost", "adapt", "--model", str(SHIPPED_MODEL), "--out", str(tmp_path / "o"), *args]
        )
        said = " ".join(run.output.split())  # the message as one line, however the console wrapped it
        assert run.exit_code == 2 and all(w in said for w in words), run.output
