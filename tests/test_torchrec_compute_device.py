"""``--model torchrec`` with ``--compute-device cuda|cpu`` through the CLI, the service, the
drop-in and the Python API; a policy per cost model: ``policy train`` records the model it
trained against, and ``rl`` warns when it plans with another."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

from typer.testing import CliRunner  # noqa: E402

from autoshard.core.types import Table, Topology, Workload  # noqa: E402
from autoshard.planning.options import Models, PlanOptions  # noqa: E402
from autoshard.planning.plan import plan  # noqa: E402
from autoshard.profiles import torchrec_profile  # noqa: E402
from autoshard.rl.policy import OptionPolicy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_POLICY = ROOT / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1" / "policy.pt"


def _workload() -> Workload:
    return Workload(tuple(Table(f"t{i}", 2000 * (i + 1), 32, 2.0) for i in range(8)), 256)


def _plan_json(*options: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    from autoshard.cli import app

    args = ["plan", "criteo_kaggle", "--devices", "4", "--memory-gb", "4", "--json", *options]
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


# --- the compute device, everywhere the torchrec model is selectable -------------------------


def test_cli_prices_each_compute_device_with_its_own_estimator():
    costs = {}
    for device in ("cuda", "cpu"):
        code, out = _plan_json("--model", "torchrec", "--compute-device", device, "--planner", "cost_greedy,torchrec")
        assert code == 0, out
        report = json.loads(out)
        assert report["profile"] == f"torchrec ({device})"
        plans = {p["planner"]: p["max_cost_ms"] for p in report["plans"]}
        assert plans["cost_greedy"] <= plans["torchrec"] * (1 + 1e-9)  # TorchRec's planner plans for the device too
        costs[device] = plans["cost_greedy"]
    assert costs["cpu"] > 2 * costs["cuda"]  # TorchRec's CPU perf model is far slower than its GPU's


def test_cli_refuses_an_unknown_compute_device_or_one_with_a_trained_profile():
    code, out = _plan_json("--model", "torchrec", "--compute-device", "tpu", "--planner", "cost_greedy")
    assert code != 0 and "--compute-device" in out and "cuda, cpu" in out and "Traceback" not in out
    code, out = _plan_json("--compute-device", "cpu", "--planner", "cost_greedy")  # the default, a trained profile
    assert code != 0 and "--compute-device" in out and "--model torchrec" in out


def test_the_model_name_torchrec_cpu_is_gone():
    code, out = _plan_json("--model", "torchrec_cpu", "--planner", "cost_greedy")
    assert code != 0 and "--model" in out


def test_service_plans_with_torchrec_on_either_device_and_names_a_bad_compute_device(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings
    from tests.service_support import plan_body

    with TestClient(create_app(Settings(model_dir=tmp_path, pool="thread"))) as client:
        maxima = {}
        for device in ("cuda", "cpu"):
            body = plan_body(12, planners=["cost_greedy"], profile="torchrec", compute_device=device)
            response = client.post("/v1/plans", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["profile"] == f"torchrec ({device})"
            maxima[device] = response.json()["plans"][0]["max_cost_ms"]
        assert maxima["cpu"] != maxima["cuda"]
        bad = client.post("/v1/plans", json={**body, "compute_device": "tpu"})
        assert bad.status_code == 422 and "compute_device" in json.dumps(bad.json())


def test_service_refuses_a_compute_device_with_a_trained_profile():
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings
    from tests.service_support import plan_body

    with TestClient(create_app(Settings(model_dir=ROOT / "data" / "models", pool="thread"))) as client:
        response = client.post("/v1/plans", json=plan_body(12, planners=["cost_greedy"], compute_device="cpu"))
        assert response.status_code == 422 and "compute_device" in json.dumps(response.json())


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_drop_in_plans_with_torchrec_for_the_topologys_device(device):
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import Topology as TorchRecTopology
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from autoshard.torchrec.drop_in import AutoShardShardingPlanner

    configs = [
        EmbeddingBagConfig(name=f"t{i}", num_embeddings=1000 * (i + 1), embedding_dim=32, feature_names=[f"t{i}"])
        for i in range(6)
    ]
    module = EmbeddingBagCollection(tables=configs, device=__import__("torch").device("meta"))
    memory = {"hbm_cap": 256 * 1024**2} if device == "cuda" else {"ddr_cap": 256 * 1024**2}
    topology = TorchRecTopology(world_size=4, local_world_size=2, compute_device=device, **memory)
    planner = AutoShardShardingPlanner(topology=topology, batch_size=256, model="torchrec", planner="cost_greedy")
    found = planner.plan(module, [EmbeddingBagCollectionSharder()])
    assert set(found.plan[""]) == {f"t{i}" for i in range(6)}
    assert planner.last_profile is not None and planner.last_profile[0] == f"torchrec ({device})"


def test_python_api_plans_with_torchrecs_estimator_for_a_compute_device():
    workload, topology = _workload(), Topology(4, 1.0)
    reports = {
        d: plan(workload, topology, Models.of(torchrec_profile(d)), PlanOptions(("cost_greedy",)))
        for d in ("cuda", "cpu")
    }
    assert {d: r.profile for d, r in reports.items()} == {"cuda": "torchrec (cuda)", "cpu": "torchrec (cpu)"}
    assert reports["cpu"].best_plan.max_cost_ms > reports["cuda"].best_plan.max_cost_ms


# --- a policy per cost model ----------------------------------------------------------------


def _models_with_policy(tmp_path: Path, trained_on: str) -> Path:
    """A model directory whose torchrec model, on both devices, has the shipped policy recorded
    as trained against TorchRec's estimator for ``trained_on``."""
    shipped = OptionPolicy.load(SHIPPED_POLICY)
    policy = OptionPolicy(shipped.layers, replace(shipped.info, cost_model="torchrec", compute_device=trained_on))
    for device in ("cuda", "cpu"):
        (tmp_path / "torchrec" / device).mkdir(parents=True)
        policy.save(tmp_path / "torchrec" / device / "policy.pt")
    return tmp_path


def test_rl_warns_in_the_report_when_its_policy_was_trained_against_another_model(tmp_path):
    models = _models_with_policy(tmp_path, "cuda")
    workload, topology, options = _workload(), Topology(4, 1.0), PlanOptions(("rl",))
    own = plan(workload, topology, Models.of(torchrec_profile("cuda", models=models)), options)
    assert not [w for w in own.warnings if "rl policy" in w]
    with pytest.warns(UserWarning, match="trained against"):
        other = plan(workload, topology, Models.of(torchrec_profile("cpu", models=models)), options)
    assert any(
        "trained against cost model 'torchrec (cuda)' and plans with 'torchrec (cpu)'" in w for w in other.warnings
    )


def test_cli_and_service_show_the_policys_warning(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings
    from tests.service_support import plan_body

    models = _models_with_policy(tmp_path, "cuda")
    env = {"AUTOSHARD_MODEL_DIR": str(models)}
    code, out = _plan_json("--model", "torchrec", "--compute-device", "cpu", "--planner", "rl", env=env)
    assert code == 0, out
    assert any("'torchrec (cuda)' and plans with 'torchrec (cpu)'" in w for w in json.loads(out)["warnings"])
    code, out = _plan_json("--model", "torchrec", "--compute-device", "cuda", "--planner", "rl", env=env)
    assert code == 0 and not [w for w in json.loads(out)["warnings"] if "rl policy" in w]

    with TestClient(create_app(Settings(model_dir=models, pool="thread"))) as client:
        body = plan_body(12, planners=["rl"], profile="torchrec", compute_device="cpu")
        warned = client.post("/v1/plans", json=body)
        assert warned.status_code == 200, warned.text
        assert any("plans with 'torchrec (cpu)'" in w for w in warned.json()["warnings"])
        silent = client.post("/v1/plans", json={**body, "compute_device": "cuda"})
        assert not [w for w in silent.json()["warnings"] if "rl policy" in w]


def test_policy_train_records_the_model_it_trained_against(tmp_path):
    from autoshard.rl.tasks import TaskDistribution
    from autoshard.rl.train import TrainConfig, train_policy

    config = TrainConfig(
        tasks=TaskDistribution(num_tables=(6,), topologies=((1, 2),)),
        steps=64,
        envs=1,
        n_steps=64,
        batch_size=64,
        epochs=1,
        imitation_episodes=2,
        imitation_epochs=1,
        dagger_rounds=0,
        eval_every=64,
        eval_tasks=2,
        checkpoint_every=64,
    )
    loaded = torchrec_profile("cpu", models=tmp_path)
    policy = train_policy(
        loaded.model, tmp_path / "run", config, loaded.profile, progress_bar=False, log=lambda _: None
    )
    assert (policy.info.cost_model, policy.info.compute_device) == ("torchrec", "cpu")
    assert policy.info.trained_against == "torchrec (cpu)" and policy.model_mismatch(loaded.model) is None
    assert policy.model_mismatch(torchrec_profile("cuda", models=tmp_path).model) is not None


def test_replan_prices_with_torchrec_for_the_compute_device(tmp_path):
    from autoshard.cli import app

    current, torchrec = tmp_path / "current.json", ["--model", "torchrec", "--compute-device", "cpu"]
    planned = CliRunner().invoke(
        app,
        ["plan", "criteo_kaggle", "--devices", "4", "--memory-gb", "8", "--planner", "cost_greedy", *torchrec]
        + ["--sharding-types", "table_wise,column_wise", "--format", "torchrec", "--out", str(current)],
    )
    assert planned.exit_code == 0, planned.output
    result = CliRunner().invoke(
        app,
        [
            "replan",
            "criteo_kaggle",
            "--from",
            str(current),
            "--memory-gb",
            "8",
            "--max-moves",
            "2",
            "--json",
            *torchrec,
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["profile"] == "torchrec (cpu)" and len(report["plans"]) == 3
    assert all(p["max_cost_ms"] > 0 for p in report["plans"])
