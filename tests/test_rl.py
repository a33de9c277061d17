"""The RL agent: the environment's contract, a policy that must learn, and the shipped policy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from autoshard.core.errors import ModelError
from autoshard.core.presets import load_preset
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.task import Task, memory_for
from autoshard.core.types import GIB, Table, Topology, Workload
from autoshard.evaluation.registry import make_planner
from autoshard.planners.choosers import cheapest_after
from autoshard.planners.context import DEPARTURE_MARGIN, PlannerContext
from autoshard.planners.place_loop import place
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.sharding_options import PLACED_TYPES
from autoshard.planners.validate import validate_plan
from autoshard.rl.env import EnvConfig, Reward, ShardingEnv, start
from autoshard.rl.policy import DevicePolicy, DeviceScoringPolicy, PolicyInfo
from autoshard.rl.tasks import FixedTasks, TaskDistribution
from cost_model.checkpoint import load_cost_model

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models" / "default"
SMALL = TaskDistribution(num_tables=(6, 12), num_devices=(2, 3, 4))


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return load_cost_model(SHIPPED)


def rollout(env: ShardingEnv, seed: int, actions_seed: int):
    """Random allowed actions from a seeded generator: (observations, rewards, actions)."""
    rng = np.random.default_rng(actions_seed)
    obs, _ = env.reset(seed=seed)
    observations, rewards, actions, done = [obs], [], [], False
    while not done:
        action = int(rng.choice(np.flatnonzero(env.action_masks())))
        obs, reward, done, truncated, _ = env.step(action)
        observations.append(obs), rewards.append(reward), actions.append(action)
        assert not truncated
    return observations, rewards, actions


def test_both_env_checkers_pass(model):
    gym_check_env(ShardingEnv(model, SMALL), skip_render_check=True)
    sb3_check_env(ShardingEnv(model, SMALL))


def test_same_seed_same_rollout_and_other_seeds_differ(model):
    a = rollout(ShardingEnv(model, SMALL), seed=3, actions_seed=9)
    b = rollout(ShardingEnv(model, SMALL), seed=3, actions_seed=9)
    assert a[2] == b[2] and a[1] == b[1]
    assert all(np.array_equal(x, y) for x, y in zip(a[0], b[0]))
    c = rollout(ShardingEnv(model, SMALL), seed=4, actions_seed=9)
    assert len(c[0]) != len(a[0]) or not all(np.array_equal(x, y) for x, y in zip(a[0], c[0]))


def test_the_plan_is_the_actions_taken_and_the_step_return_is_minus_the_final_max(model):
    env = ShardingEnv(model, SMALL, EnvConfig(reward=Reward.STEP))
    _, rewards, actions = rollout(env, seed=1, actions_seed=2)
    state = env.state
    placed = {u.name: d.index for d in state.devices for u in d.units}
    assert [placed[u.name] for u in state.units] == actions
    assert env.greedy_max == 0.0  # the step reward needs no greedy rollout
    assert sum(rewards) == pytest.approx(-state.loads.max() / env.scale)
    costs = model.predict_many([d.tables for d in state.devices], env.task.workload.batch_size)
    assert np.allclose(state.loads, costs, rtol=1e-3)  # the env's running costs are the model's


def test_the_refined_return_is_greedy_minus_agent_after_local_search(model):
    from autoshard.planners.local_search import improve
    from autoshard.rl.env import REFINE_ROUNDS, refined_max

    env = ShardingEnv(model, SMALL, EnvConfig(reward=Reward.REFINED))
    _, rewards, actions = rollout(env, seed=1, actions_seed=2)
    state = env.state
    placed = {u.name: d.index for d in state.devices for u in d.units}
    assert [placed[u.name] for u in state.units] == actions  # the search ran on copies
    agent = refined_max(state, env.task, model, None)
    assert agent <= state.loads.max() * (1 + 1e-9)
    assert sum(rewards) == pytest.approx((env.greedy_max - agent) / env.scale)
    devices = place(start(env.task, model, None, env.config, env.state.units), cheapest_after).devices
    improve(devices, model, env.task.workload.batch_size, REFINE_ROUNDS)
    assert env.greedy_max == pytest.approx(max(d.load for d in devices))


def test_masks_forbid_exactly_the_devices_without_room(model):
    big, small = Table("big", 1_000_000, 64), Table("small", 1000, 8)
    room = big.memory_bytes + small.memory_bytes  # one device takes big and small, no more
    task = Task("t", Workload((big, Table("big2", 1_000_000, 64), small)), Topology(3, room / GIB))
    env = ShardingEnv(model, FixedTasks((task,)), EnvConfig(slots=4))
    env.reset(seed=0)
    first = env.state.current  # the costliest big table: every device has room; slot 3 is padding
    assert list(env.action_masks()) == [True, True, True, False] and first.name.startswith("big")
    env.step(0)
    assert list(env.action_masks()) == [False, True, True, False]  # device 0 is full for a big table
    env.step(1)
    assert env.state.current.name == "small"
    assert list(env.action_masks()) == [True, True, True, False]


def test_an_out_of_range_task_is_refused_by_name(model):
    task = Task("wide", Workload(tuple(Table(f"t{i}", 100, 8) for i in range(4))), Topology(32, 1.0))
    env = ShardingEnv(model, SMALL)
    with pytest.raises(Exception, match="slots"):
        env.reset(options={"task": task})


def test_a_policy_must_learn_the_plan_greedy_misses():
    """Costs add up (cost = pooling factor); tables 3, 3, 2, 2, 2 on two devices. Largest-first
    greedy puts the 3s apart, then the 2s on 3, 3, 5: max 7. The optimum is {3, 3} | {2, 2, 2}: 6."""
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    tables = tuple(Table(f"t{i}", 100, 8, pooling) for i, pooling in enumerate((3.0, 3.0, 2.0, 2.0, 2.0)))
    task = Task("lpt", Workload(tables), Topology(2, 1.0))
    cost_model = ProxyCostModel(lambda t: t.pooling_factor)
    greedy = make_planner("cost_greedy", PlannerContext(cost_model)).plan(task.workload, task.topology)
    config = EnvConfig(slots=2, reward=Reward.STEP)
    placed = place(start(task, cost_model, None, config), cheapest_after)
    assert placed.loads.max() == 7.0 and greedy.max_cost_ms == 6.0  # local search finds it; placement does not
    env = ShardingEnv(cost_model, FixedTasks((task,)), config)
    env.reset(seed=0)
    agent = MaskablePPO(
        DeviceScoringPolicy,
        env,
        n_steps=256,
        batch_size=64,
        learning_rate=3e-3,
        gamma=1.0,
        ent_coef=0.01,
        seed=0,
        policy_kwargs={"hidden": 32},
        device="cpu",
    )
    agent.learn(6000)
    obs, _ = env.reset()
    done = False
    while not done:
        action, _ = agent.predict(obs, action_masks=env.action_masks(), deterministic=True)
        obs, _, done, _, info = env.step(int(action))
    assert info["max_cost"] == 6.0


def test_the_shipped_policy_plans_unseen_workloads_on_more_devices_than_it_trained_on(model):
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    tables = generate_pool(PoolConfig(size=600, seed=11)).test  # a pool no training drew from
    workload = sample_task(tables, 100, np.random.default_rng(0))
    assert policy.info.slots < 24
    for devices in (16, 24):
        topology = Topology(devices, memory_for(workload, devices, 1.3))
        context = PlannerContext(model, policy)
        rl = make_planner("rl", context).plan(workload, topology)
        refined = make_planner("rl+refine", context).plan(workload, topology)
        greedy = make_planner("cost_greedy", context).plan(workload, topology)
        for plan in (rl, refined):
            validate_plan(plan, workload, topology)
            assert np.isfinite(plan.max_cost_ms)
        assert refined.max_cost_ms <= rl.max_cost_ms + 1e-9  # the search keeps the argmax rollout
        assert refined.max_cost_ms <= greedy.max_cost_ms + 1e-9  # and cost_greedy's own search


def test_policy_eval_reports_the_held_out_grid_with_and_without_column_splits(tmp_path):
    """``policy eval`` plans held-out tasks with every default planner: no plan is below the
    lower bound (the costliest table alone without splits; with them, each table's cheapest
    form); rl+refine is never worse than rl or cost_greedy (it keeps the best of their
    placements and its own), and the report says how it planned."""
    import json

    from typer.testing import CliRunner

    from autoshard.cli import app

    for split in (False, True):
        out = tmp_path / f"split{split}"
        args = ["policy", "eval", "--profile", str(SHIPPED), "--tables", "20", "--devices", "4,16", "--out", str(out)]
        result = CliRunner().invoke(app, [*args, "--column-split" if split else "--no-column-split"])
        assert result.exit_code == 0, result.output
        report = json.loads((out / "grid.json").read_text())
        assert report["config"]["column_split"] is split and len(report["tasks"]) == 2
        assert (out / "grid.md").exists() and (out / "grid.png").exists()
        for task in report["tasks"]:
            costs, bound = task["max_ms"], task["lower_bound_ms"]
            assert {"cost_greedy", "rl", "rl+refine", "size_greedy"} <= set(costs)
            assert costs["rl+refine"] <= min(costs["rl"], costs["cost_greedy"]) * (1 + 1e-6)
            assert bound is not None and min(costs.values()) >= bound * (1 - 1e-6)
    bad = CliRunner().invoke(app, ["policy", "eval", "--profile", str(SHIPPED), "--tables", "x"])
    assert bad.exit_code == 2 and "tables" in bad.output


def test_the_grids_lower_bound_is_each_tables_cheapest_form_that_fits_a_device():
    """By hand, on the analytical test model (a table alone costs 4e-4 x pooling x columns + 0.1
    ms at batch 1000): "wide" (64 columns, pooling 10) costs 0.356 whole, 0.228 as halves and
    0.164 as quarters; "mid" and "small" cost less in every form. Without splits the bound is
    wide whole; with them its quarter; with too little memory for it whole, still its quarter."""
    from autoshard.evaluation.grid import lower_bound_ms
    from tests.cost_models import AnalyticalTestCostModel

    wide, mid, small = Table("wide", 1000, 64, 10.0), Table("mid", 1000, 16), Table("small", 1000, 8)
    workload = Workload((wide, mid, small), batch_size=1000)
    model = AnalyticalTestCostModel()
    roomy, tight = Topology(4, 1.0), Topology(4, wide.memory_bytes * 0.6 / 2**30)
    whole = lower_bound_ms(Task("t", workload, roomy), PlannerContext(model, allow_column_split=False), None)
    split = lower_bound_ms(Task("t", workload, roomy), PlannerContext(model), None)
    squeezed = lower_bound_ms(Task("t", workload, tight), PlannerContext(model), None)
    assert whole == pytest.approx(0.356) and split == pytest.approx(0.164) and squeezed == pytest.approx(0.164)
    assert lower_bound_ms(Task("t", workload, roomy), PlannerContext(), None) is None
    for topology in (roomy, tight):
        plan = make_planner("cost_greedy", PlannerContext(model)).plan(workload, topology)
        assert plan.max_cost_ms >= split * (1 - 1e-9)


def test_rl_refine_plans_column_split_plans_and_keeps_them_valid(model):
    # three wide hot tables among 40 small ones on 8 devices: the best plan splits them
    # column-wise, every shard once, no two shards of a table on one device, seeded (no
    # departure margin: the search's own plans are what is tested)
    rng = np.random.default_rng(0)
    tables = tuple(Table(f"huge{i}", 100_000, 128, 40.0) for i in range(3)) + tuple(
        Table(f"s{i}", int(rng.integers(1000, 100_000)), int(rng.choice([16, 32, 64])), float(rng.uniform(1, 10)))
        for i in range(40)
    )
    workload, topology = Workload(tables, batch_size=2048, name="mix"), Topology(8, 1.0)
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    context = PlannerContext(model, policy, allow_column_split=True, departure_margin=0.0, sharding_types=PLACED_TYPES)
    refined = make_planner("rl+refine", context).plan(workload, topology)
    validate_plan(refined, workload, topology)
    assert any(s.width < s.table.embedding_dim for d in refined.devices for s in d.shards)  # it split
    assert refined.max_cost_ms <= make_planner("cost_greedy", context).plan(workload, topology).max_cost_ms + 1e-9
    again = make_planner("rl+refine", context).plan(workload, topology)
    assert [d.shards for d in again.devices] == [d.shards for d in refined.devices]


def _refined_counting_samples(
    monkeypatch, context: PlannerContext, workload: Workload, topology: Topology
) -> tuple[int, object]:
    """rl+refine's plan, and how many times it drew sampled rollouts (``place_together`` calls)."""
    import autoshard.rl.planners as rl_planners

    sampled = []
    place_together = rl_planners.place_together
    monkeypatch.setattr(rl_planners, "place_together", lambda *a, **k: sampled.append(1) or place_together(*a, **k))
    plan = make_planner("rl+refine", context).plan(workload, topology)
    return len(sampled), plan


def test_with_column_splits_rl_refine_samples_at_the_planned_caps_only(model, monkeypatch):
    """16 devices: 5 split caps (none, 2, 4, 8, 16). No split and the cap whose units balance
    best by their own costs get the argmax rollout, cost_greedy's placement and the sampled
    rollouts (one ``place_together`` call per cap; at margin 0, so that a sample could be
    returned). The plan is no worse than rl's or cost_greedy's."""

    rng = np.random.default_rng(2)
    tables = tuple(Table(f"huge{i}", 100_000, 128, 40.0) for i in range(2)) + tuple(
        Table(f"s{i}", int(rng.integers(1000, 100_000)), int(rng.choice([16, 32, 64])), float(rng.uniform(1, 10)))
        for i in range(60)
    )
    workload, topology = Workload(tables, batch_size=2048, name="mix16"), Topology(16, 1.0)
    context = PlannerContext(
        model,
        DevicePolicy.load(SHIPPED / "policy.pt"),
        allow_column_split=True,
        departure_margin=0.0,
        sharding_types=PLACED_TYPES,
    )
    sampled, refined = _refined_counting_samples(monkeypatch, context, workload, topology)
    validate_plan(refined, workload, topology)
    assert 1 <= sampled <= 2
    assert refined.max_cost_ms <= make_planner("cost_greedy", context).plan(workload, topology).max_cost_ms * (1 + 1e-9)
    assert refined.max_cost_ms <= make_planner("rl", context).plan(workload, topology).max_cost_ms * (1 + 1e-9)


def test_rl_refine_keeps_cost_greedys_plan_unless_its_own_is_predicted_clearly_lower(model):
    """200 held-out tables on 4 devices (of a grid of 20-200 tables on 4-16 devices): rl+refine's
    samples and their local search find a plan the shipped model predicts ~0.3% below
    cost_greedy's. It is returned only when that gap exceeds the departure margin; otherwise
    rl+refine returns cost_greedy's plan, shard for shard."""
    from autoshard.evaluation.grid import GridConfig, grid_tasks

    grid = grid_tasks(GridConfig(tables=(20, 80, 200), devices=(4, 8, 16)))
    task = next(t for t in grid if t.name == "grid200x4")
    workload, topology = task.workload, task.topology
    policy = DevicePolicy.load(SHIPPED / "policy.pt")

    def planned(name: str, margin: float | None = None):
        context = PlannerContext(model, policy, allow_column_split=False, departure_margin=margin)
        return make_planner(name, context).plan(workload, topology)

    greedy, searched = planned("cost_greedy"), planned("rl+refine", 0.0)
    shards = lambda plan: [d.shards for d in plan.devices]  # noqa: E731
    gap = 1 - searched.max_cost_ms / greedy.max_cost_ms
    assert shards(searched) != shards(greedy) and 0.001 < gap < DEPARTURE_MARGIN
    assert shards(planned("rl+refine")) == shards(greedy)  # the default margin: cost_greedy's plan
    assert shards(planned("rl+refine", gap + 0.001)) == shards(greedy)
    assert shards(planned("rl+refine", gap - 0.001)) == shards(searched)


def test_rl_refine_does_not_sample_where_no_plan_could_clear_the_departure_margin(model, monkeypatch):
    """One table of 2M rows among 54 small ones on 4 devices: cost_greedy's plan is 1-10% above
    the lower bound (that table alone), so no plan can be predicted 10% below it and rl+refine
    draws no samples; with no margin it does."""
    from autoshard.planners.placement_unit import model_costs

    rng = np.random.default_rng(3)
    tables = (Table("huge", 2_000_000, 128, 30.0),) + tuple(
        Table(f"s{i}", int(rng.integers(1000, 100_000)), int(rng.choice([16, 32, 64])), float(rng.uniform(1, 10)))
        for i in range(54)
    )
    workload, topology = Workload(tables, batch_size=2048, name="near_bound"), Topology(4, 4.0)
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    greedy = make_planner("cost_greedy", PlannerContext(model, policy)).plan(workload, topology)
    bound = max(model_costs(model, 2048)(tables))
    assert bound * 1.001 < greedy.max_cost_ms < bound / (1 - DEPARTURE_MARGIN)
    sampled, refined = _refined_counting_samples(monkeypatch, PlannerContext(model, policy), workload, topology)
    assert not sampled and [d.shards for d in refined.devices] == [d.shards for d in greedy.devices]
    sampled, _ = _refined_counting_samples(
        monkeypatch, PlannerContext(model, policy, departure_margin=0.0), workload, topology
    )
    assert sampled


def test_rl_refine_does_not_sample_where_cost_greedys_plan_is_too_even_for_a_plan_to_clear_the_margin(
    model, monkeypatch
):
    """80 pool tables on 4 devices: cost_greedy's plan is twice the lower bound but within 1% of
    its own mean device cost. A plan 10% lower would need
    a total more than ``OWN_TOTAL_SLACK`` below cost_greedy's, so rl+refine draws no samples and
    returns cost_greedy's plan; with no margin it samples."""
    import autoshard.rl.planners as rl_planners
    from autoshard.planners.placement_unit import model_costs

    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 80, np.random.default_rng(4))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    greedy = make_planner("cost_greedy", PlannerContext(model, policy)).plan(workload, topology)
    mean = sum(d.cost_ms for d in greedy.devices) / 4
    bound = max(model_costs(model, workload.batch_size)(workload.tables))
    assert greedy.max_cost_ms > bound / (1 - DEPARTURE_MARGIN)  # the lower bound alone leaves room
    assert greedy.max_cost_ms * (1 - DEPARTURE_MARGIN) <= (1 - rl_planners.OWN_TOTAL_SLACK) * mean  # too even
    sampled, refined = _refined_counting_samples(monkeypatch, PlannerContext(model, policy), workload, topology)
    assert not sampled and [d.shards for d in refined.devices] == [d.shards for d in greedy.devices]
    sampled, _ = _refined_counting_samples(
        monkeypatch, PlannerContext(model, policy, departure_margin=0.0), workload, topology
    )
    assert sampled


def test_rl_refine_samples_only_where_its_own_placements_could_clear_the_margin(model, monkeypatch):
    """Criteo Kaggle on 4 x 2 GiB with the all-to-all: cost_greedy's plan is about 1.04x its mean
    device cost, so a plan 10% lower would need a total about 6.5% below cost_greedy's: further
    than rl+refine's own placements went (``OWN_TOTAL_SLACK``). By default rl+refine draws no
    samples and returns cost_greedy's plan; with no margin it samples (so the lower bound leaves
    room)."""
    import autoshard.rl.planners as rl_planners
    from autoshard.core.communication import CommunicationModel, WithCommunication

    workload, _ = load_preset("criteo_kaggle")
    topology = Topology(4, 2.0)
    priced = WithCommunication(model, CommunicationModel.load(SHIPPED / "communication.json"), 4)
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    greedy = make_planner("cost_greedy", PlannerContext(priced, policy)).plan(workload, topology)
    mean = sum(d.cost_ms for d in greedy.devices) / 4
    needed = greedy.max_cost_ms * (1 - DEPARTURE_MARGIN)  # a plan's max at most this, so its mean too
    assert needed <= (1 - rl_planners.OWN_TOTAL_SLACK) * mean
    sampled, refined = _refined_counting_samples(monkeypatch, PlannerContext(priced, policy), workload, topology)
    assert not sampled and [d.shards for d in refined.devices] == [d.shards for d in greedy.devices]
    sampled, _ = _refined_counting_samples(
        monkeypatch, PlannerContext(priced, policy, departure_margin=0.0), workload, topology
    )
    assert sampled


def test_rl_is_deterministic_and_keeps_devices_within_the_trained_set_sizes(model):
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(1))
    topology = Topology(4, memory_for(workload, 4, 1.5))
    planner = make_planner("rl", PlannerContext(model, policy))
    first, second = planner.plan(workload, topology), planner.plan(workload, topology)
    assert [d.shards for d in first.devices] == [d.shards for d in second.devices]
    assert max(len(d.shards) for d in first.devices) <= model.max_set_size  # 40 / 4 = 10 <= 20


def test_a_corrupt_or_missing_policy_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="no policy"):
        DevicePolicy.load(tmp_path / "policy.pt")
    (tmp_path / "policy.pt").write_bytes(b"not a policy")
    with pytest.raises(ModelError, match="cannot load"):
        DevicePolicy.load(tmp_path / "policy.pt")


def test_policy_train_cli_writes_a_policy_that_plans_and_resumes(tmp_path):
    """`autoshard policy train` end to end on a tiny budget: checkpoints, eval log, TensorBoard
    logs, policy.pt in the profile; --resume continues the same run to a larger step count."""
    import shutil

    from typer.testing import CliRunner

    from autoshard.cli import app

    shutil.copy(SHIPPED / "cost_model.pt", tmp_path)
    shutil.copy(SHIPPED / "communication.json", tmp_path)
    args = [
        "policy",
        "train",
        "--profile",
        str(tmp_path),
        "--envs",
        "1",
        "--no-progress",
        "--slots",
        "4",
        "--checkpoint-every",
        "256",
        "--eval-every",
        "512",
        "--eval-tasks",
        "2",
    ]
    first = CliRunner().invoke(app, [*args, "--steps", "512"])
    assert first.exit_code == 0, first.output
    work = tmp_path / "policy_training"
    assert (tmp_path / "policy.pt").exists() and (work / "eval_log.csv").exists()
    assert list((work / "checkpoints").glob("ppo_*_steps.zip")) and list((work / "tensorboard").rglob("events.*"))
    policy = DevicePolicy.load(tmp_path / "policy.pt")
    assert policy.info.slots == 4 and "policy train" in policy.info.command
    resumed = CliRunner().invoke(app, [*args, "--steps", "1024", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming from" in resumed.output
    steps = [int(line.split(",")[0]) for line in (work / "eval_log.csv").read_text().splitlines()[1:]]
    assert max(steps) >= 1024
    stale = work / "checkpoints" / "ppo_999999_steps.zip"
    stale.write_bytes(b"a checkpoint of an earlier run")
    refused = CliRunner().invoke(app, [*args, "--steps", "256"])  # nothing lost by accident
    assert refused.exit_code == 2 and "--fresh" in refused.output and stale.exists()
    eight_slots = [("8" if previous == "--slots" else a) for previous, a in zip(["", *args], args)]
    changed = CliRunner().invoke(app, [*eight_slots, "--steps", "2048", "--resume"])
    assert changed.exit_code == 2 and "slots" in changed.output, changed.output  # not its checkpoints' shape
    again = CliRunner().invoke(app, [*args, "--steps", "256", "--fresh"])  # a fresh run forgets the runs before
    assert again.exit_code == 0, again.output
    steps = [int(line.split(",")[0]) for line in (work / "eval_log.csv").read_text().splitlines()[1:]]
    assert steps.count(0) == 1 and steps == sorted(steps) and not stale.exists()
    bad = CliRunner().invoke(app, ["policy", "train", "--profile", str(tmp_path), "--reward", "nope"])
    assert bad.exit_code == 2 and "reward" in bad.output


def test_past_its_time_budget_a_search_returns_its_best_plan_so_far_marked_partial(model):
    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 60, np.random.default_rng(2))
    topology = Topology(8, memory_for(workload, 8, 1.3))
    for name in ("cost_greedy", "rl+refine"):
        unbounded = make_planner(name, PlannerContext(model, policy)).plan(workload, topology)
        bounded = make_planner(name, PlannerContext(model, policy, time_budget_s=1e-9)).plan(workload, topology)
        assert not unbounded.partial and bounded.partial
        validate_plan(bounded, workload, topology)
        assert bounded.max_cost_ms >= unbounded.max_cost_ms - 1e-9  # the full search is never worse


@pytest.mark.parametrize("column_split", [False, True])
def test_planners_of_one_task_share_their_placements_and_plan_as_they_do_alone(model, column_split, monkeypatch):
    """rl+refine starts from cost_greedy's searched placement and from rl's argmax rollout: side
    by side (``compare_planners``, as the CLI's ``--planner all`` and the service's model task
    run them) it takes both from the planners before it instead of computing them again, in
    whichever order they run, and every plan is the one each planner makes alone. The units of
    each split (cap) are made once for the three (``TaskUnits``), though each asks for them to
    choose its caps and again to place them."""
    from autoshard.evaluation.compare import compare_planners
    from autoshard.planners.task_cache import TaskCache
    from autoshard.planners.unit_preparation import TaskUnits

    prepared = []
    prepare = TaskUnits._prepared
    monkeypatch.setattr(TaskUnits, "_prepared", lambda self, *a: prepared.append(a) or prepare(self, *a))

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(4))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    context = PlannerContext(model, policy, seed=2, allow_column_split=column_split, sharding_types=PLACED_TYPES)
    names = ["cost_greedy", "rl", "rl+refine"]
    alone = {n: make_planner(n, context).plan(workload, topology) for n in names}
    for order in (names, names[::-1]):
        cache = TaskCache(workload, topology)
        prepared.clear()
        plans = compare_planners(workload, topology, order, replace(context, cache=cache)).plans
        assert prepared and len(prepared) == len(set(prepared))  # each split made once for the three
        # each planned split cap's searched greedy placement and argmax rollout: computed once, handed out
        # once to rl+refine, and the searched placement once more to rl where cost_greedy ran before it (rl's
        # repair steps follow its search)
        caps = cache.kept // 2
        assert cache.kept >= 2 and cache.reused == cache.kept + (caps if order[0] == "cost_greedy" else 0)
        for plan in plans:
            assert plan.devices == alone[plan.planner].devices, plan.planner
        # the time of what a planner took from those before it is reported beside its own
        reused = {p.planner: p.reused_s for p in plans}
        assert (reused["rl+refine"] > 0) == (order[0] != "rl+refine")
        first = order[0] == "rl+refine"
        assert (reused["cost_greedy"] > 0) == first and (reused["rl"] > 0) == (order[0] != "rl")
    other = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(5))
    cache = TaskCache(workload, topology)  # made for another task: nothing is shared, nothing is wrong
    plan = make_planner("rl+refine", replace(context, cache=cache)).plan(other, topology)
    assert (
        cache.reused == cache.kept == 0
        and plan.devices == make_planner("rl+refine", context).plan(other, topology).devices
    )


def test_placements_that_made_the_same_choices_ask_the_cost_model_once(model, monkeypatch):
    """rl's argmax rollout after cost_greedy in one task (the policy is greedy's clone) makes
    greedy placement's choices, so every step's costs-if-added are the ones greedy placement
    asked for (``StepCosts``): it asks the cost model nothing, and plans what it plans alone.
    Nor does it check again which devices leave the rest packable (its mask adds a rule on
    top; the check is a fact of the state).
    rl+refine's sampled rollouts ask only from the first step where their choices part. Each
    planner runs in its own ``compare_planners`` call, with the all-to-all, as the service runs
    them (each call wraps the cost model anew)."""
    from autoshard.core.communication import CommunicationModel, WithCommunication
    from autoshard.evaluation.compare import compare_planners
    from autoshard.planners.cost_greedy import greedy_placement
    from autoshard.planners.device_state import assignment
    from autoshard.planners.local_search import improve
    from autoshard.planners.placement_state import PlacementState
    from autoshard.planners.task_cache import TaskCache
    from cost_model.accumulator import SetAccumulator

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 120, np.random.default_rng(3))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    # seed 0: a draw whose samples part from greedy's choices (a sharp policy's often do not);
    # margin 0: cost_greedy's plan is even enough that rl+refine would not sample at the default
    context = PlannerContext(model, policy, seed=0, departure_margin=0.0)
    communication = CommunicationModel.load(SHIPPED / "communication.json")
    priced = replace(context, cost_model=WithCommunication(model, communication, topology.num_devices))
    asked = []
    costs_if_added = SetAccumulator.costs_if_added
    monkeypatch.setattr(
        SetAccumulator, "costs_if_added", lambda self, *a, **k: asked.append(1) or costs_if_added(self, *a, **k)
    )
    checked = []  # the packing lookahead's first-fit checks
    first_fit = PlacementState.fits_after
    monkeypatch.setattr(PlacementState, "fits_after", lambda self, *a: checked.append(1) or first_fit(self, *a))

    def calls(run):
        asked.clear()
        checked.clear()
        result = run()
        return len(asked), result

    def planned(name: str, cache: TaskCache):
        return compare_planners(workload, topology, [name], replace(context, cache=cache), communication).plans[0]

    alone_calls, alone = calls(lambda: make_planner("rl", priced).plan(workload, topology))
    alone_checks = len(checked)
    cache = TaskCache(workload, topology)
    planned("cost_greedy", cache)
    rl_calls, plan = calls(lambda: planned("rl", cache))
    assert alone_checks > 0 and not checked
    greedy = greedy_placement(TaskCache(workload, topology), priced.cost_model, None)
    improve(greedy.devices, priced.cost_model, workload.batch_size)  # its repair steps follow cost_greedy's search
    assert assignment(greedy.devices) == tuple(tuple(s.table.name for s in d.shards) for d in plan.devices)
    assert alone_calls >= len(workload.tables) - topology.num_devices and rl_calls == 0
    assert plan.devices == alone.devices
    # rl+refine: its argmax rollout and greedy's placement are rl's and cost_greedy's; its samples
    # follow them until they draw another device, and ask from there on
    refine_alone_calls, refine_alone = calls(lambda: make_planner("rl+refine", priced).plan(workload, topology))
    refine_calls, refine = calls(lambda: planned("rl+refine", cache))
    steps = len(workload.tables)
    # alone (its own cache): its argmax rollout asks once a step, greedy's placement makes the same
    # choices and reads those answers, and its samples ask as they do after the others
    assert refine_alone_calls == steps + refine_calls
    assert refine.devices == refine_alone.devices and 0 < refine_calls < steps


def test_sampled_placements_alike_so_far_are_scored_once_and_draw_as_before(model, monkeypatch):
    """Placements stepped side by side that made the same choices so far (one ``StepCosts``
    history) are observed and scored by the policy once per step, not once each, and each still
    draws its own device from the same softmax in order: the rollouts are those of placements
    scored one by one (``alike_key`` hidden)."""
    from autoshard.core.costing import AccumulatorView
    from autoshard.planners.device_state import assignment
    from autoshard.planners.place_loop import place_together
    from autoshard.planners.placement_state import PlacementState
    from autoshard.planners.placement_unit import model_costs
    from autoshard.planners.task_cache import TaskCache
    from autoshard.planners.unit_preparation import prepare_units
    from autoshard.rl.rollout import PolicyChooser

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(5))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    units = prepare_units(workload, topology, model_costs(model, workload.batch_size), False)
    observed_states = []  # per call of the policy, the placements it scores
    scores = DevicePolicy.scores
    monkeypatch.setattr(
        DevicePolicy,
        "scores",
        lambda self, observed: observed_states.append(len(observed.starts) - 1) or scores(self, observed),
    )

    def rollouts(alike: bool) -> list:
        if not alike:
            monkeypatch.setattr(PlacementState, "alike_key", property(lambda self: None))
        observed_states.clear()
        steps = TaskCache(workload, topology).steps(units)
        shared = model.accumulator(4 * topology.num_devices, workload.batch_size)
        states = [PlacementState(units, topology, AccumulatorView(shared, k * 4, 4), steps=steps) for k in range(4)]
        chooser = PolicyChooser(policy, np.random.default_rng(7), temperature=0.05)
        placed = place_together(states, chooser.choose_many, shared)
        return [assignment(s.devices) for s in placed], sum(observed_states)

    together, states_scored = rollouts(alike=True)
    one_by_one, every_state_scored = rollouts(alike=False)
    assert together == one_by_one and every_state_scored == 4 * len(units)
    assert len(units) <= states_scored < every_state_scored  # at a low temperature they mostly stay alike


def test_sampled_rollouts_read_the_scores_the_argmax_rollout_made_at_their_history(model, monkeypatch):
    """rl's argmax rollout and rl+refine's sampled rollouts of one task share a ``StepCosts``: a
    sampled placement at a history the argmax rollout passed through is not observed and scored
    again, and it draws as it did from scores of its own."""
    from autoshard.core.costing import AccumulatorView
    from autoshard.planners.device_state import assignment
    from autoshard.planners.place_loop import place_together
    from autoshard.planners.placement_state import PlacementState
    from autoshard.planners.placement_unit import model_costs
    from autoshard.planners.task_cache import TaskCache
    from autoshard.planners.unit_preparation import prepare_units
    from autoshard.rl.rollout import PolicyChooser

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(5))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    units = prepare_units(workload, topology, model_costs(model, workload.batch_size), False)
    observed_rows = []
    scores = DevicePolicy.scores
    monkeypatch.setattr(
        DevicePolicy,
        "scores",
        lambda self, observed: observed_rows.append(len(observed.devices)) or scores(self, observed),
    )

    def sampled(after_argmax: bool) -> tuple[list, int]:
        steps = TaskCache(workload, topology).steps(units)
        if after_argmax:
            place(
                PlacementState(units, topology, model.accumulator(4, workload.batch_size), steps=steps),
                PolicyChooser(policy),
            )
        observed_rows.clear()
        shared = model.accumulator(4 * topology.num_devices, workload.batch_size)
        states = [PlacementState(units, topology, AccumulatorView(shared, k * 4, 4), steps=steps) for k in range(4)]
        chooser = PolicyChooser(policy, np.random.default_rng(7), temperature=0.05)
        return [assignment(s.devices) for s in place_together(states, chooser.choose_many, shared)], sum(observed_rows)

    alone, rows_alone = sampled(after_argmax=False)
    after, rows_after = sampled(after_argmax=True)
    assert after == alone and rows_after < rows_alone


def test_rl_refine_never_searches_twice_from_one_placement(model, monkeypatch):
    """Local search is deterministic, so rl+refine runs it once per distinct start: never again
    from greedy's placement (which cost_greedy's search started from; the cloned policy's argmax
    usually is it) nor from a sample drawn twice; the plan is the one the full search makes."""
    import autoshard.planners.cost_greedy as cost_greedy
    import autoshard.rl.planners as rl
    from autoshard.planners.device_state import assignment

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 60, np.random.default_rng(6))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    expected = make_planner("rl+refine", PlannerContext(model, policy)).plan(workload, topology)
    starts, improve = [], rl.improve

    def recording(states, *args, **kwargs):
        starts.append(assignment(states))
        return improve(states, *args, **kwargs)

    monkeypatch.setattr(rl, "improve", recording)
    monkeypatch.setattr(cost_greedy, "improve", recording)
    plan = make_planner("rl+refine", PlannerContext(model, policy)).plan(workload, topology)
    assert len(starts) >= 1 and len(set(starts)) == len(starts)
    assert plan.devices == expected.devices


def test_placements_stepped_side_by_side_equal_those_stepped_alone(model):
    """rl+refine's sampled rollouts share one accumulator and one head call per step
    (``place_together``): the same choosers make the same placements, at the same costs, as
    when each placement is stepped on its own."""
    from autoshard.core.costing import AccumulatorView
    from autoshard.planners.place_loop import place_together
    from autoshard.planners.placement_unit import model_costs
    from autoshard.planners.unit_preparation import by_cost, prepare_units
    from autoshard.rl.env import guarded_state
    from autoshard.rl.rollout import PolicyChooser

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 50, np.random.default_rng(3))
    topology = Topology(6, memory_for(workload, 6, 1.3))
    units = by_cost(prepare_units(workload, topology, model_costs(model, workload.batch_size), False))

    def choosers():
        return [
            cheapest_after,
            PolicyChooser(policy),
            PolicyChooser(policy, np.random.default_rng(5), 1.0, 32),
            PolicyChooser(policy, np.random.default_rng(6), 2.0, 32),
        ]

    def fresh(accumulator=None):
        return guarded_state(units, topology, model, workload.batch_size, 1.25, accumulator)

    alone = [place(fresh(), choose) for choose in choosers()]
    shared = model.accumulator(4 * 6, workload.batch_size)
    lined_up = choosers()

    def choose(states, allowed):  # a BatchChooser: each placement its own chooser
        return [c(s, a) for c, s, a in zip(lined_up, states, allowed)]

    together = place_together([fresh(AccumulatorView(shared, k * 6, 6)) for k in range(4)], choose, shared, 32)
    assert len({tuple(tuple(u.name for u in d.units) for d in s.devices) for s in alone}) > 1  # they differ
    for one, side_by_side in zip(alone, together):
        assert side_by_side is not None
        assert [[u.name for u in d.units] for d in one.devices] == [
            [u.name for u in d.units] for d in side_by_side.devices
        ]
        np.testing.assert_allclose(one.loads, side_by_side.loads, rtol=1e-5)


def test_cloning_greedy_makes_the_actor_place_as_greedy_does(model):
    """The warm start of ``policy train`` (``autoshard.rl.imitation``): after cloning greedy's
    demonstrations, the actor picks greedy's device on almost every step, and places unseen
    tasks exactly as greedy does; before, it does not."""
    from sb3_contrib import MaskablePPO

    from autoshard.rl.imitation import clone, demonstrations
    from autoshard.rl.train import eval_tasks, greedy_maxima, ratio_to_greedy

    torch.set_num_threads(1)
    config = EnvConfig(slots=4)
    env = ShardingEnv(model, SMALL, config)
    agent = MaskablePPO(DeviceScoringPolicy, env, seed=0, policy_kwargs={"hidden": 32}, device="cpu")
    greedy_steps = demonstrations(env, 30, seed=0)
    assert len(greedy_steps) == len(greedy_steps.returns) > 100
    tasks = eval_tasks(TaskDistribution(split="test", num_tables=(6, 12), num_devices=(2, 3, 4)), 8, seed=1)
    greedy = greedy_maxima(tasks, model, None, config)

    def ratio() -> float:
        actor = DevicePolicy.from_net(agent.policy.mlp_extractor, PolicyInfo("test", 32, 4, "step", 1.25, 0))
        return ratio_to_greedy(actor, tasks, greedy, model, None, config)

    before = ratio()
    assert clone(agent.policy, greedy_steps, epochs=20) > 0.95
    assert before > 1.001 and ratio() == pytest.approx(1.0, abs=1e-3)


def test_a_sampled_device_is_the_draw_numpys_choice_makes():
    """rl+refine's sampler draws without ``Generator.choice``'s checks, from the same uniform
    number: the same device on every draw, so its plans stay what they were."""
    from autoshard.rl.rollout import draw

    ours, numpys = np.random.default_rng(11), np.random.default_rng(11)
    for k in range(5000):
        logits = np.random.default_rng(k).normal(size=k % 16 + 1) * 4
        p = np.exp(logits - logits.max())
        assert draw(ours, logits) == numpys.choice(len(logits), p=p / p.sum())


@pytest.mark.parametrize("departing", [False, True], ids=["clone", "departing"])
def test_the_argmax_rollout_checked_in_one_pass_is_the_policy_stepped_one_pass_a_step(model, monkeypatch, departing):
    """``argmax_rollout`` runs greedy's device at each step and scores all the steps in one pass
    of the policy: its placement is the policy's argmax rollout stepped one pass a step, for the
    shipped policy (greedy's clone: a pass or two for the whole task) and for one that departs
    from greedy nearly every step (its scores negated: restarts, then stepping), on a 40-table
    task and on one where the first split (halves) runs into a dead end and quarters are placed."""
    from autoshard.planners.device_state import assignment
    from autoshard.planners.place_loop import place_workload
    from autoshard.planners.placement_unit import model_costs
    from autoshard.planners.unit_preparation import TaskUnits
    from autoshard.rl.env import guarded_state
    from autoshard.rl.rollout import PolicyChooser, argmax_rollout

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    if departing:
        (w, b), *rest = policy.layers[::-1]
        policy = DevicePolicy([*rest[::-1], (-w, -b)], policy.info)
    passes = []
    scores = DevicePolicy.scores
    monkeypatch.setattr(DevicePolicy, "scores", lambda self, observed: passes.append(1) or scores(self, observed))
    pooled = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(5))
    dead_end = Workload(tuple(Table(f"t{i}", 1200, 128) for i in range(3)))  # 1.2 devices each: halves cannot pair
    cases = [(pooled, Topology(4, memory_for(pooled, 4, 1.3)), None), (dead_end, Topology(4, 512_000), 4)]
    counted = []
    for workload, topology, cap in cases:

        def run(choose):
            units = TaskUnits(workload, topology, model_costs(model, workload.batch_size))
            return place_workload(
                units,
                cap is not None,
                choose,
                lambda units: guarded_state(units, topology, model, workload.batch_size, 1.25),
                max_ways=cap,
            )

        passes.clear()
        stepped = run(PolicyChooser(policy))
        steps = len(passes)
        passes.clear()
        checked = argmax_rollout(run, policy)
        assert assignment(checked.devices) == assignment(stepped.devices)
        np.testing.assert_allclose(checked.loads, stepped.loads, rtol=1e-6)
        counted.append((len(passes), steps))
    (passes_40, steps_40), _ = counted
    if departing:
        assert passes_40 > steps_40  # the speculative passes, then the stepped ones
    else:
        assert passes_40 <= 2 < steps_40


@pytest.mark.parametrize("departing", [False, True], ids=["clone", "departing"])
def test_rl_after_cost_greedy_checks_greedys_recorded_steps_and_plans_as_it_does_alone(model, monkeypatch, departing):
    """Planned after cost_greedy in one task (the service's model task), ``rl`` checks greedy
    placement's recorded steps in one pass of the policy instead of stepping a placement of its
    own: for the shipped policy (greedy's clone) it places no unit itself; a policy that departs
    (scores negated) steps from where it departs. Either way its plan is the one it makes alone."""
    from autoshard.evaluation.compare import compare_planners
    from autoshard.planners.placement_state import PlacementState
    from autoshard.planners.task_cache import TaskCache

    policy = DevicePolicy.load(SHIPPED / "policy.pt")
    if departing:
        (w, b), *rest = policy.layers[::-1]
        policy = DevicePolicy([*rest[::-1], (-w, -b)], policy.info)
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(5))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    context = PlannerContext(model, policy, 0, False)
    alone = compare_planners(workload, topology, ["rl"], context).plans[0]
    shared = replace(context, cache=TaskCache(workload, topology))
    compare_planners(workload, topology, ["cost_greedy"], shared)
    applied = []
    apply = PlacementState.apply
    monkeypatch.setattr(PlacementState, "apply", lambda self, device: applied.append(device) or apply(self, device))
    after = compare_planners(workload, topology, ["rl"], shared).plans[0]
    assert assignment_of(after) == assignment_of(alone)
    assert [d.cost_ms for d in after.devices] == pytest.approx([d.cost_ms for d in alone.devices], rel=1e-9)
    assert (len(applied) > 0) if departing else not applied


def assignment_of(plan) -> list[list[str]]:
    """Each device's table names, in order."""
    return [[s.table.name for s in d.shards] for d in plan.devices]
