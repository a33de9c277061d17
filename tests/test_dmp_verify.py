"""`--verify dmp`: plans of every sharding type run end to end under TorchRec's DMP on 2 gloo CPU
ranks, each step taken apart and timed per rank; the pooled outputs equal the unsharded model's,
and every rank's report holds its prediction beside its measurement, part by part."""

import math
import os

import pytest

pytest.importorskip("torchrec")

from autoshard.core.communication import CommunicationModel  # noqa: E402
from autoshard.core.errors import InputError  # noqa: E402
from autoshard.core.sharding import ShardingType  # noqa: E402
from autoshard.core.types import DevicePlan, ShardingPlan, TableShard, Topology  # noqa: E402
from autoshard.torchrec.dmp_run import DistributedConfig  # noqa: E402
from autoshard.torchrec.dmp_steps import PARTS  # noqa: E402
from autoshard.torchrec.dmp_verification import PART_GROUPS, verify_dmp  # noqa: E402
from autoshard.torchrec.dmp_verify import DmpVerifyConfig, measure_plans_dmp  # noqa: E402
from autoshard.torchrec.judges import predict_ranks  # noqa: E402
from tests.cost_models import AnalyticalTestCostModel  # noqa: E402
from tests.dmp_support import all_types_plan, all_types_workload  # noqa: E402

COMM = CommunicationModel(bandwidth_gbps=2.0, latency_ms=0.05)
ONE_HOST = Topology(2, 1.0)  # 1 host x 2: table-row-wise and grid shards are real row splits
TWO_HOSTS = Topology.cluster(2, 1, 1.0, inter_host_bw_gbps=1000.0)  # the 2 emulated hosts x 1


def config(topology: Topology, **kw) -> DmpVerifyConfig:
    run = DistributedConfig(world_size=2, local_world_size=topology.local_world_size, steps=2, warmups=1, batch_size=16)
    return DmpVerifyConfig(run, **{"rounds": 1, **kw})


def _plans() -> tuple:
    workload = all_types_workload()
    one_host = all_types_plan(workload, hosts=1, per_host=2)
    kinds = {s.sharding_type for d in one_host.devices for s in d.shards}
    assert kinds == set(ShardingType)  # the plan uses every type
    return workload, one_host


@pytest.mark.timeout(240)
def test_every_sharding_type_verifies_under_dmp_and_matches_the_unsharded_model():
    workload, plan = _plans()
    cheaper = ShardingPlan(
        "tw_only",
        (
            DevicePlan(tuple(TableShard(t) for t in workload.tables[:4]), 0.0),
            DevicePlan(tuple(TableShard(t) for t in workload.tables[4:]), 0.0),
        ),
    )
    result = verify_dmp([plan, cheaper], workload, ONE_HOST, AnalyticalTestCostModel(), COMM, config(ONE_HOST), top=4)
    assert {c.planners for c in result.candidates} == {("all_types",), ("tw_only",)}
    report = result.to_dict()
    assert report["method"] == "dmp" and report["chosen"] in (["all_types"], ["tw_only"])
    for candidate in report["candidates"]:
        verify = candidate["verify"]
        assert verify["method"] == "dmp" and verify["world_size"] == 2 and verify["ranks_per_host"] == 2
        assert verify["outputs_match"] is True and verify["max_abs_error"] <= 1e-5
        assert verify["malloc_settings_active"] and verify["oversubscribed"] is False
        assert [r["rank"] for r in verify["ranks"]] == [0, 1]
        for rank in verify["ranks"]:
            assert rank["measured_ms"] > 0 and rank["predicted_ms"] > 0 and rank["steps"] == 2
            assert rank["pipeline_ms"] is None  # not asked for
            assert [p["part"] for p in rank["parts"]] == [g for g, _ in PART_GROUPS]
            parts = {p["part"]: p for p in rank["parts"]}
            assert parts["input_dist"]["predicted_ms"] is None  # the model prices no input distribution
            assert all(p["measured_ms"] >= 0 for p in rank["parts"])
            assert math.isclose(sum(p["measured_ms"] for p in rank["parts"]), rank["measured_ms"], rel_tol=0.05)
    tw_only = next(c for c in result.candidates if c.planners == ("tw_only",))
    for device, predicted in zip(tw_only.plan.devices, tw_only.predicted):  # an owner serves both ranks' samples
        tables = [s.as_table for s in device.shards]
        assert predicted.lookup_ms == pytest.approx(AnalyticalTestCostModel().predict(tables, 2 * workload.batch_size))
    every = next(c["verify"] for c in report["candidates"] if c["planners"] == ["all_types"])
    for rank in every["ranks"]:  # the replica of ``dp`` is all-reduced on every rank
        parts = {p["part"]: p for p in rank["parts"]}
        assert parts["allreduce"]["measured_ms"] > 0 and parts["allreduce"]["predicted_ms"] > 0
    judges = report["judges"]
    assert [j["judge"] for j in judges["judges"]] == ["autoshard", "torchrec_estimator", "dmp"]
    assert all(j["prefers"] in ("all_types", "tw_only") for j in judges["judges"])


@pytest.mark.timeout(240)
def test_two_emulated_hosts_of_one_rank_run_every_type_taken_apart_and_in_trainpipelinesparsedist():
    workload = all_types_workload()
    plan = all_types_plan(workload, hosts=2, per_host=1)
    (measured,) = measure_plans_dmp([plan], workload, config(TWO_HOSTS, pipeline=True))
    # both the decomposed model's and the pipelined model's pooled outputs equal the unsharded model's
    assert measured.outputs_match and measured.ranks_per_host == 1 and measured.network.startswith("loopback")
    for rank in measured.ranks:
        assert [p for p, _ in rank.parts] == list(PARTS)
        assert math.isclose(sum(ms for _, ms in rank.parts), rank.busy_ms, rel_tol=0.05)
        assert rank.wall_ms > 0 and dict(rank.parts)["allreduce"] > 0
        assert rank.pipeline_ms is not None and rank.pipeline_ms > 0


@pytest.mark.timeout(300)
def test_each_emulated_hosts_rank_runs_in_its_own_network_namespace():
    from cost_model.bench.netns import missing_privilege, project_namespaces

    if missing_privilege():
        pytest.skip(missing_privilege())
    workload = all_types_workload()
    plan = all_types_plan(workload, hosts=2, per_host=1)
    (measured,) = measure_plans_dmp([plan], workload, config(TWO_HOSTS, namespaces=True, link_gbit=5.0))
    assert measured.outputs_match and "network namespaces" in measured.network and "5 Gbit/s" in measured.network
    assert all(rank.busy_ms > 0 and dict(rank.parts)["output_dist_forward"] > 0 for rank in measured.ranks)
    assert not [n for n in project_namespaces() if f"-{os.getpid()}-" in n]  # removed after


def test_predictions_per_rank_in_both_batch_conventions():
    workload, plan = _plans()
    model = AnalyticalTestCostModel()
    ours = predict_ranks(plan, 16, ONE_HOST, model, COMM)
    dmp = predict_ranks(plan, 32, ONE_HOST, model, COMM)
    for a, b in zip(ours, dmp):
        assert b.lookup_ms > a.lookup_ms and b.output_dist_ms > a.output_dist_ms
        assert a.allreduce_ms == b.allreduce_ms > 0  # the replica's gradient does not grow with the batch
        assert math.isclose(a.total_ms, a.lookup_ms + a.output_dist_ms + a.allreduce_ms)
    alone = predict_ranks(plan, 16, ONE_HOST, model, None)
    assert all(r.output_dist_ms == r.allreduce_ms == 0 for r in alone)


def test_bad_verify_configs_are_refused_before_any_rank_starts():
    workload, plan = _plans()
    with pytest.raises(InputError, match="world size|devices"):
        measure_plans_dmp([plan], workload, DmpVerifyConfig(DistributedConfig(world_size=4)))
    with pytest.raises(InputError, match="emulated hosts"):  # 2 ranks on one host: no second host to emulate
        measure_plans_dmp([plan], workload, config(ONE_HOST, namespaces=True))
    with pytest.raises(InputError, match="rounds"):
        measure_plans_dmp([plan], workload, config(ONE_HOST, rounds=0))
    with pytest.raises(InputError, match="plans"):
        measure_plans_dmp([], workload, config(ONE_HOST))
    four = DmpVerifyConfig(DistributedConfig(world_size=4, local_world_size=2))
    assert four.oversubscribed == (4 > (os.cpu_count() or 1)) and four.ranks_per_host == 2
    with pytest.raises(InputError, match="ranks, 1 a host"):
        verify_dmp([plan], workload, ONE_HOST, AnalyticalTestCostModel(), COMM, config(TWO_HOSTS))


def test_a_per_tier_model_prices_each_part_a_dmp_step_has():
    from autoshard.core.collectives import KEYS, Collective, LinkFit

    fits = [LinkFit(c, t, 0.01 * (1 + i), 1.0 + i) for i, (c, t) in enumerate(KEYS)]
    tiered = CommunicationModel.tiered(fits, "test fits")
    workload, plan = _plans()
    for rank in predict_ranks(plan, 16, ONE_HOST, AnalyticalTestCostModel(), tiered):
        parts = tiered.breakdown([s.as_table for s in plan.devices[rank.rank].shards], 16, ONE_HOST)
        by = {c: sum(ms for key, ms in parts.items() if key.startswith(c.value + " ")) for c in Collective}
        ids = by[Collective.INPUT_DIST] + by[Collective.INPUT_DIST_ROW_WISE]
        assert rank.input_dist_ms == pytest.approx(ids) and rank.input_dist_ms > 0
        assert rank.allreduce_ms == pytest.approx(by[Collective.ALL_REDUCE]) and rank.allreduce_ms > 0
        rest = by[Collective.ALL_TO_ALL] + by[Collective.REDUCE_SCATTER] + by[Collective.ALL_GATHER]
        assert rank.output_dist_ms == pytest.approx(rest) and rest > 0
        assert rank.total_ms == pytest.approx(rank.lookup_ms + sum(parts.values()))
