"""Each rank's host memory under ``--model torchrec`` (TorchRec's ``Topology`` ``ddr_cap``), given
where the torchrec model is selectable: ``--ddr-cap-gb`` on ``plan``, ``replan`` and ``evaluate``,
a request's ``ddr_cap_gb`` in the service. A cap below what the UVM tables need refuses the plan,
naming ddr_cap; given with another model, or on cpu, it is an error naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torchrec")

from typer.testing import CliRunner  # noqa: E402

from autoshard.core.types import Table, Topology, Workload  # noqa: E402
from autoshard.core.workload_file import save_workload, workload_to_dict  # noqa: E402
from autoshard.profiles import MAX_DDR_CAPS, ModelStore, torchrec_label, torchrec_of_label  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:HeuristicalStorageReservation is known:FutureWarning")

TIGHT, ROOMY = 0.1, 4.0
"""GiB of host memory per rank: less than one of the UVM tables' weights (256 MB), and all of them."""
TWO_HALF_GIB = {"num_devices": 2, "device_memory_gb": 0.5}


def over_hbm() -> Workload:
    """Five 244 MiB tables; on two devices of 0.5 GiB (``TWO_HALF_GIB``) some must run in host memory."""
    pooling = (20.0, 1.0, 20.0, 1.0, 1.0)
    return Workload(tuple(Table(f"t{i}", 2_000_000, 32, p) for i, p in enumerate(pooling)), 512, "over_hbm")


def _cli(*args: str) -> tuple[int, str, str]:
    from autoshard.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, " ".join(result.output.split())  # unwrapped by the console


@pytest.fixture
def workload_file(tmp_path: Path) -> Path:
    path = tmp_path / "over_hbm.json"
    save_workload(path, over_hbm(), Topology(2, 0.5))  # TWO_HALF_GIB
    return path


# --- the CLI --------------------------------------------------------------------------------


def test_plan_within_the_cap_or_refused_naming_ddr_cap(workload_file):
    torchrec = ("plan", str(workload_file), "--model", "torchrec", "--planner", "cost_greedy")
    code, out, shown = _cli(*torchrec, "--ddr-cap-gb", str(ROOMY), "--json")
    assert code == 0, shown
    report = json.loads(out)
    assert report["profile"] == "torchrec (cuda, ddr_cap 4.0 GiB)"
    code, _, shown = _cli(*torchrec, "--ddr-cap-gb", str(TIGHT))
    assert code == 2 and "Traceback" not in shown
    assert "insufficient_memory" in shown and "ddr_cap of 107,374,182 bytes" in shown and "--ddr-cap-gb" in shown


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (("--ddr-cap-gb", "4"), "--model torchrec"),  # the default model, a trained profile
        (("--model", "none", "--ddr-cap-gb", "4"), "--model torchrec"),
        (("--model", "torchrec", "--ddr-cap-gb", "0"), "positive"),
        (("--model", "torchrec", "--ddr-cap-gb", "-2"), "positive"),
        (("--model", "torchrec", "--ddr-cap-gb", "nan"), "positive"),
        (("--model", "torchrec", "--compute-device", "cpu", "--ddr-cap-gb", "4"), "--memory-gb"),
    ],
)
def test_plan_refuses_a_cap_it_cannot_take_naming_the_option_and_the_fix(options, named):
    code, _, shown = _cli("plan", "criteo_kaggle", "--devices", "2", "--memory-gb", "4", *options)
    assert code == 2 and "--ddr-cap-gb" in shown and named in shown and "Traceback" not in shown


def test_replan_takes_the_cap(tmp_path):
    current, torchrec = tmp_path / "current.json", ("--model", "torchrec", "--ddr-cap-gb", str(ROOMY))
    task = ("criteo_kaggle", "--devices", "4", "--memory-gb", "8")
    code, _, shown = _cli(
        "plan", *task, "--planner", "cost_greedy", "--sharding-types", "table_wise,column_wise", *torchrec,
        "--format", "torchrec", "--out", str(current),
    )  # fmt: skip
    assert code == 0, shown
    replan = ("replan", *task, "--from", str(current), "--max-moves", "1")
    code, out, shown = _cli(*replan, "--json", *torchrec)
    assert code == 0, shown
    assert json.loads(out)["profile"] == "torchrec (cuda, ddr_cap 4.0 GiB)"
    code, _, shown = _cli(*replan, "--ddr-cap-gb", "4")
    assert code == 2 and "--ddr-cap-gb" in shown and "--model torchrec" in shown and "Traceback" not in shown


def test_evaluate_plans_within_the_cap_or_skips_the_planner_naming_ddr_cap(workload_file, tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "over_hbm", "tasks": [{"name": "over", "workload": str(workload_file)}]}))
    evaluate = ("evaluate", str(suite), "--model", "torchrec", "--planners", "cost_greedy", "--json")
    runs = {}
    for cap in (ROOMY, TIGHT):
        code, out, shown = _cli(*evaluate, "--ddr-cap-gb", str(cap), "--out", str(tmp_path / str(cap)))
        assert code == 0, shown
        runs[cap] = json.loads(out)
    assert runs[ROOMY]["settings"]["profile"] == "torchrec (cuda, ddr_cap 4.0 GiB)"
    assert [p["planner"] for p in runs[ROOMY]["tasks"][0]["planners"]] == ["cost_greedy"]
    (skipped,) = runs[TIGHT]["tasks"][0]["skipped"]
    assert "ddr_cap of 107,374,182 bytes" in skipped["reason"] and "--ddr-cap-gb" in skipped["reason"]
    code, _, shown = _cli("evaluate", str(suite), "--ddr-cap-gb", "4", "--out", str(tmp_path / "plain"))
    assert code == 2 and "--ddr-cap-gb" in shown and "--model torchrec" in shown and "Traceback" not in shown


# --- the service ----------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings

    with TestClient(create_app(Settings(model_dir=tmp_path, pool="thread"))) as served:
        yield served


def _body(**extra) -> dict:
    return {"workload": workload_to_dict(over_hbm()), "topology": TWO_HALF_GIB, "planners": ["cost_greedy"], **extra}


def test_service_plans_within_the_requests_cap_or_refuses_naming_ddr_cap(client):
    roomy = client.post("/v1/plans", json=_body(profile="torchrec", ddr_cap_gb=ROOMY))
    assert roomy.status_code == 200, roomy.text
    assert roomy.json()["profile"] == "torchrec (cuda, ddr_cap 4.0 GiB)"
    # the same body but for the cap: neither the answer cache nor the model store answers the roomy one's
    tight = client.post("/v1/plans", json=_body(profile="torchrec", ddr_cap_gb=TIGHT))
    assert tight.status_code == 422, tight.text
    assert "ddr_cap of 107,374,182 bytes" in tight.text and "ddr_cap_gb" in tight.text


def test_service_replans_with_the_requests_cap(client):
    small = Workload((Table("a", 1000, 32, 2.0), Table("b", 1000, 32, 2.0)), 512, "small")
    shards = {name: {"shards": [{"rank": rank, "column_offset": 0, "columns": 32}]} for rank, name in enumerate("ab")}
    body = {
        "workload": workload_to_dict(small),
        "topology": TWO_HALF_GIB,
        "current_plan": {"world_size": 2, "tables": shards},
        "max_moves": [1],
        "profile": "torchrec",
        "ddr_cap_gb": ROOMY,
    }
    replanned = client.post("/v1/replans", json=body)
    assert replanned.status_code == 200, replanned.text
    assert replanned.json()["profile"] == "torchrec (cuda, ddr_cap 4.0 GiB)"
    refused = client.post("/v1/replans", json={**body, "profile": None})
    assert refused.status_code == 422 and "ddr_cap_gb" in json.dumps(refused.json())


@pytest.mark.parametrize(
    "extra",
    [
        {"ddr_cap_gb": 4.0},  # the default profile
        {"profile": "torchrec", "ddr_cap_gb": 0},
        {"profile": "torchrec", "ddr_cap_gb": -1},
        {"profile": "torchrec", "ddr_cap_gb": 1e300},
        {"profile": "torchrec", "ddr_cap_gb": "lots"},
        {"profile": "torchrec", "compute_device": "cpu", "ddr_cap_gb": 4.0},
    ],
)
def test_service_refuses_a_cap_it_cannot_take_with_a_422_at_the_field(client, extra):
    response = client.post("/v1/plans", json=_body(**extra))
    assert response.status_code == 422, response.text
    assert "ddr_cap_gb" in json.dumps(response.json()["detail"])


# --- the model store ------------------------------------------------------------------------


def test_the_label_gives_the_very_cap_back_and_the_store_keeps_few_caps(tmp_path):
    for cap in (0.1, 4.0, 1 / 3, 128.0):
        assert torchrec_of_label(torchrec_label("cuda", cap)) == ("cuda", cap)
    assert torchrec_of_label("torchrec (cuda)") == ("cuda", None) and torchrec_of_label("torchrec (tpu)") is None
    store = ModelStore(model_dir=tmp_path)
    base = store.resolve("torchrec")
    assert base is not None and base.model.ddr_cap_bytes is None
    capped = [store.resolve("torchrec", None, float(g)) for g in range(1, MAX_DDR_CAPS + 3)]
    assert [m.model.ddr_cap_bytes for m in capped if m] == [g * 2**30 for g in range(1, MAX_DDR_CAPS + 3)]
    assert all(m is not None and m.policy is base.policy for m in capped)
    assert len(store._capped) == MAX_DDR_CAPS and store.get(capped[-1].profile) is capped[-1]  # type: ignore[union-attr]
    copies = [store.for_thread(torchrec_label("cuda", float(g))) for g in range(1, MAX_DDR_CAPS + 3)]
    assert len({id(c) for c in copies}) == MAX_DDR_CAPS + 2 and len(store._local.models) == MAX_DDR_CAPS
