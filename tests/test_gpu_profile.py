"""The shipped GPU profile (measured on an NVIDIA H200, docs/profiles.md): it plans on a machine
without a GPU, refuses to measure there, refuses what it was not trained on, and the plans its
measured run read back from a report are the plans the report holds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from autoshard.cli import app

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "data" / "models" / "cuda-nvidia-h200-embedding_bag-t1"
runner = CliRunner()


def plan(*args: str):
    return runner.invoke(app, ["plan", *args], catch_exceptions=False)


def test_the_gpu_profile_plans_every_planner_here_and_the_model_planners_lead_predicted():
    result = plan(
        "criteo_kaggle", "--devices", "4", "--memory-gb", "2", "--model", str(GPU), "--planner", "all", "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    plans = {p["planner"]: p for p in report["plans"]}
    assert {"cost_greedy", "rl", "rl+refine", "round_robin"} <= set(plans)
    heuristics = [p["max_cost_ms"] for name, p in plans.items() if name not in ("cost_greedy",) and "rl" not in name]
    assert plans["cost_greedy"]["max_cost_ms"] <= min(heuristics) * (1 + 1e-6)
    assert plans["rl+refine"]["max_cost_ms"] <= plans["cost_greedy"]["max_cost_ms"] * (1 + 1e-6)
    assert plans["rl+refine_raw"]["max_cost_ms"] <= plans["rl"]["max_cost_ms"] * (1 + 1e-6)
    assert report["profile"] == GPU.name


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: it can measure the profile's plans")
def test_measuring_the_gpu_profiles_plans_without_a_gpu_exits_2_saying_why():
    result = plan("criteo_kaggle", "--devices", "4", "--memory-gb", "2", "--model", str(GPU), "--verify")
    assert result.exit_code == 2
    assert "no GPU" in result.output and "cuda-nvidia-h200" in result.output


def test_fp16_tables_are_refused_by_the_fp32_gpu_profile_naming_the_field():
    result = plan("criteo_terabyte_fp16_rowwise", "--devices", "8", "--memory-gb", "24", "--model", str(GPU))
    assert result.exit_code == 2
    assert "bytes_per_element" in result.output and "fp32" in result.output


def test_the_measured_runs_plans_read_back_from_its_report_are_the_reports_plans():
    spec = importlib.util.spec_from_file_location("measure_report", ROOT / "benchmarks" / "gpu" / "measure_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = json.loads((ROOT / "tests" / "data" / "gpu_h200" / "report.json").read_text())
    for task in report["tasks"]:
        plans, batch = module.task_plans(task)
        assert batch == task["workload"]["batch_size"]
        tables = {t["name"] for t in task["workload"]["tables"]}
        for plan_, row in zip(plans, task["planners"]):
            names = [[s.as_table.name for s in d.shards] for d in plan_.devices]
            assert names == row["devices"]
            placed = [s.table.name for d in plan_.devices for s in d.shards]
            assert sorted(placed) == sorted(tables)  # every table once (no splits in this run)


def test_evaluate_refuses_a_task_the_profile_cannot_price_before_planning_any(tmp_path):
    """The default suite's last task is fp16: the fp32 profile must stop before the first task,
    not after planning (or measuring) the seven before it."""
    result = runner.invoke(
        app,
        ["evaluate", "default", "--model", str(GPU), "--planners", "round_robin", "--out", str(tmp_path)],
        catch_exceptions=False,
    )
    assert result.exit_code == 2
    assert "criteo_terabyte_fp16_rowwise" in result.output and "fp32.json" in result.output
    assert not list(tmp_path.rglob("*.md"))  # no task was planned


def test_the_fp32_suite_plans_with_the_gpu_profile(tmp_path):
    result = runner.invoke(
        app,
        [
            "evaluate",
            str(ROOT / "autoshard" / "core" / "suites" / "fp32.json"),
            "--model",
            str(GPU),
            "--planners",
            "round_robin,cost_greedy",
            "--no-communication",
            "--json",
            "--out",
            str(tmp_path),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "fp32" / "report.json").read_text())
    assert len(report["tasks"]) == 10 and report["settings"]["profile"] == GPU.name
