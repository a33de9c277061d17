"""The agent's repair phase (``autoshard.rl.repair``): after placing, it revisits its placement one
change off the max-cost device a step, and greedy's choice there is local search's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from autoshard.core.task import Task
from autoshard.core.types import Table, TableShard, Topology, Workload
from autoshard.evaluation.registry import make_planner
from autoshard.planners.choosers import cheapest_after
from autoshard.planners.context import PlannerContext
from autoshard.planners.device_state import DeviceState, assignment
from autoshard.planners.local_search import improve, round_changes
from autoshard.planners.place_loop import place
from autoshard.planners.placement_unit import Unit
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.validate import validate_plan
from autoshard.rl.env import EnvConfig, Reward, ShardingEnv, refined_max, start
from autoshard.rl.imitation import greedy_expert
from autoshard.rl.observation import DEVICE_FEATURES
from autoshard.rl.policy import CONTEXT, ROW, DevicePolicy, PolicyInfo
from autoshard.rl.repair import REPAIR_PROGRESS, policy_repair, repair_mask
from autoshard.rl.tasks import FixedTasks, TaskDistribution
from cost_model.checkpoint import load_cost_model

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models" / "default"
SMALL = TaskDistribution(num_tables=(6, 12), num_devices=(2, 3, 4))
REPAIR = EnvConfig(repair_rounds=50)


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return load_cost_model(SHIPPED)


def lpt_task() -> tuple[Task, ProxyCostModel]:
    """Costs add up (cost = pooling factor); tables 3, 3, 2, 2, 2 on two devices. Largest-first
    greedy places {3, 2, 2} | {3, 2}: max 7. Swapping a 3 of the first for the 2 of the second
    gives {2, 2, 2} | {3, 3}: 6, the optimum; no move lowers the max."""
    tables = tuple(Table(f"t{i}", 100, 8, pooling) for i, pooling in enumerate((3.0, 3.0, 2.0, 2.0, 2.0)))
    return Task("lpt", Workload(tables), Topology(2, 1.0)), ProxyCostModel(lambda t: t.pooling_factor)


def greedy_choice_policy(repair_rounds: int) -> DevicePolicy:
    """A hand-made policy whose score is its row's greedy-choice flag: greedy's device while
    placing, local search's change while repairing."""
    weights = np.zeros((ROW, 1), dtype=np.float32)
    weights[CONTEXT + DEVICE_FEATURES.index("greedy_choice"), 0] = 1.0
    info = PolicyInfo("hand-made", 1, 2, "step", 1.25, 0, repair_rounds=repair_rounds)
    return DevicePolicy([(weights, np.zeros(1, dtype=np.float32))], info)


def greedy_episode(env: ShardingEnv, seed: int) -> tuple[list[int], list[float], dict]:
    obs, info = env.reset(seed=seed)
    actions, rewards, done = [], [], False
    while not done:
        action = greedy_expert(env, np.flatnonzero(env.action_masks()))
        obs, reward, done, truncated, info = env.step(action)
        actions.append(action), rewards.append(reward)
        assert not truncated
    return actions, rewards, info


def test_the_repair_swaps_greedys_plan_to_the_optimum_hand_computed():
    task, cost_model = lpt_task()
    env = ShardingEnv(cost_model, FixedTasks((task,)), EnvConfig(slots=2, repair_rounds=5))
    obs, _ = env.reset(seed=0)
    for _ in range(5):  # placing: 3, 3, 2, 2, 2 by greedy
        obs, reward, done, _, info = env.step(greedy_expert(env, np.flatnonzero(env.action_masks())))
    assert not done and info["max_cost"] == 7.0 and info["repairs"] == 0
    assert obs[0] == REPAIR_PROGRESS  # the first repair step is observed
    assert env.repair is not None and len(env.repair.changes) == 1
    change = env.repair.changes[0]
    assert change.back is not None and (change.source_cost, change.target_cost) == (6.0, 6.0)  # a swap
    assert list(env.action_masks()) == [True, True]  # the target, and the max-cost device (stop)
    obs, reward, done, _, info = env.step(change.target)
    assert done and info["max_cost"] == 6.0 and info["repairs"] == 1  # nothing lowers 6 | 6: the end
    assert reward == pytest.approx(1.0 / env.scale)
    assert sorted(sorted(u.table.pooling_factor for u in d.units) for d in env.state.devices) == [[2, 2, 2], [3, 3]]


def test_rl_with_a_repairing_policy_plans_the_optimum_and_without_repair_greedys():
    task, cost_model = lpt_task()
    for rounds, expected in ((0, 7.0), (50, 6.0)):
        plan = make_planner("rl", PlannerContext(cost_model, greedy_choice_policy(rounds))).plan(
            task.workload, task.topology
        )
        validate_plan(plan, task.workload, task.topology)
        assert plan.max_cost_ms == expected


def test_stop_ends_the_episode_and_changes_nothing():
    task, cost_model = lpt_task()
    env = ShardingEnv(cost_model, FixedTasks((task,)), EnvConfig(slots=2, repair_rounds=5))
    env.reset(seed=0)
    for _ in range(5):
        env.step(greedy_expert(env, np.flatnonzero(env.action_masks())))
    before = assignment(env.state.devices)
    _, reward, done, _, info = env.step(env.repair.source)
    assert done and reward == 0.0 and info["repairs"] == 1 and assignment(env.state.devices) == before


def test_both_env_checkers_pass_with_repair(model):
    gym_check_env(ShardingEnv(model, SMALL, REPAIR), skip_render_check=True)
    sb3_check_env(ShardingEnv(model, SMALL, REPAIR))


def test_a_round_offers_each_targets_best_change_and_local_search_makes_its_first(model):
    rounds = 0
    for seed in range(12):
        task = SMALL.sample(np.random.default_rng(seed))
        devices = place(start(task, model, None, EnvConfig()), cheapest_after).devices
        step = round_changes(devices, model, task.workload.batch_size)
        searched = [d.copy() for d in devices]
        made = improve(searched, model, task.workload.batch_size, max_rounds=1)
        if step is None:
            assert made == 0
            continue
        rounds += 1
        targets = [c.target for c in step.changes]
        assert len(set(targets)) == len(targets) and step.source not in targets  # one change per other device
        loads = {d.index: d.load for d in devices}
        for change in step.changes:  # each lowers the max
            others = max((v for d, v in loads.items() if d not in (change.source, change.target)), default=0.0)
            assert max(change.source_cost, change.target_cost, others) < loads[step.source]
        first = step.changes[0]
        assert made == 1
        mine = [d.copy() for d in devices]
        from autoshard.planners.local_search import apply_change

        apply_change(mine, first)
        assert assignment(mine) == assignment(searched)
        mask = repair_mask(step, len(devices))
        assert set(np.flatnonzero(mask)) == {step.source, *targets}
    assert rounds >= 3  # the check ran on tasks greedy placement leaves room on


def test_the_clone_of_greedy_repairs_as_cost_greedy_searches(model):
    env = ShardingEnv(model, SMALL, replace(REPAIR, reward=Reward.REFINED))
    repaired = 0
    for seed in range(8):
        actions, rewards, info = greedy_episode(env, seed)
        assert len(actions) == info["units"] + info["repairs"]
        devices = place(start(env.task, model, None, env.config, env.state.units), cheapest_after)
        assert info["max_cost"] == pytest.approx(refined_max(devices, env.task, model, None, 50), rel=1e-9)
        assert sum(rewards) == pytest.approx(0.0, abs=1e-9)  # refined: greedy after local search
        repaired += info["repairs"] > 0
    assert repaired >= 2


def test_policy_repair_follows_the_policys_argmax_and_respects_the_guard(model):
    policy = greedy_choice_policy(50)
    for seed in range(6):
        task = SMALL.sample(np.random.default_rng(100 + seed))
        devices = place(start(task, model, None, EnvConfig()), cheapest_after).devices
        searched = [d.copy() for d in devices]
        improve(searched, model, task.workload.batch_size, 50)
        mine = [d.copy() for d in devices]
        policy_repair(mine, policy, model, task.workload.batch_size, None, 50)
        assert assignment(mine) == assignment(searched)  # no guard: local search's own changes
        guarded = [d.copy() for d in devices]
        cap = max(len(d.units) for d in devices)
        policy_repair(guarded, policy, model, task.workload.batch_size, cap, 50)
        assert max(len(d.units) for d in guarded) <= cap
        searched_under_cap = [d.copy() for d in devices]  # local search with the guard: the same changes
        improve(searched_under_cap, model, task.workload.batch_size, 50, max_units=cap)
        assert assignment(searched_under_cap) == assignment(guarded)


def test_local_search_under_the_guard_makes_no_move_to_a_full_device():
    """Costs add up. Device 0 holds 3, 2, 2 (7), device 1 holds 1. Alone, local search moves the
    3 over: 4 | 4. With at most one unit a device, moves into device 1 are barred: it swaps the
    3 for the 1 (5 | 3), after which no swap lowers the max: 5 | 3, one unit on device 1."""
    cost_model = ProxyCostModel(lambda t: t.pooling_factor)
    tables = [Table(f"t{i}", 100, 8, pooling) for i, pooling in enumerate((3.0, 2.0, 2.0, 1.0))]
    devices = [DeviceState(0, 10**9), DeviceState(1, 10**9)]
    for device, table in zip((0, 0, 0, 1), tables):
        devices[device].add(Unit.of(TableShard(table), table.pooling_factor), 0.0)
    for d in devices:
        d.load = sum(u.cost for u in d.units)
    free = [d.copy() for d in devices]
    improve(free, cost_model, 1, 50)
    assert [d.load for d in free] == [4.0, 4.0]
    capped = [d.copy() for d in devices]
    improve(capped, cost_model, 1, 50, max_units=1)
    assert [d.load for d in capped] == [5.0, 3.0] and [len(d.units) for d in capped] == [3, 1]


def test_a_policy_file_keeps_its_repair_rounds_and_an_older_one_reads_as_none(tmp_path):
    policy = greedy_choice_policy(50)
    policy.save(tmp_path / "policy.pt")
    assert DevicePolicy.load(tmp_path / "policy.pt").info.repair_rounds == 50
    data = torch.load(tmp_path / "policy.pt", weights_only=True)
    del data["info"]["repair_rounds"]  # as files written before the repair phase
    torch.save(data, tmp_path / "old.pt")
    assert DevicePolicy.load(tmp_path / "old.pt").info.repair_rounds == 0


def placing_greedy_repairing_otherwise() -> DevicePolicy:
    """A hand-made two-layer policy: greedy's device while placing (``progress`` < 1), and while
    repairing any row but local search's change (``progress`` 1): its score is g - h - 1 with g
    the greedy-choice flag and h = tanh(500 (g + progress - 1.99)), which is +1 only for the
    flagged row of a repair step."""
    flag = CONTEXT + DEVICE_FEATURES.index("greedy_choice")
    first = np.zeros((ROW, 2), dtype=np.float32)
    first[flag, 0] = 0.01  # tanh(0.01 g) ~ 0.01 g: g, passed on
    first[flag, 1] = first[0, 1] = 500.0  # context row 0 is progress
    second = np.array([[100.0], [-1.0]], dtype=np.float32)
    info = PolicyInfo("hand-made", 2, 16, "step", 1.25, 0, repair_rounds=50)
    return DevicePolicy(
        [(first, np.array([0.0, -995.0], dtype=np.float32)), (second, np.array([-1.0], np.float32))], info
    )


@pytest.mark.parametrize("departing", [False, True], ids=["clone", "departing"])
def test_rl_after_cost_greedy_follows_its_search_and_plans_as_it_does_alone(model, monkeypatch, departing):
    """Planned after cost_greedy in one task, ``rl`` (its placement greedy's) follows the rounds
    cost_greedy's local search recorded, checked in one pass of the policy: the shipped clone
    follows all of them; a policy that repairs otherwise departs at the first, and repairs on
    its own from there. Either way its plan is the one it makes alone."""
    from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
    from autoshard.core.task import memory_for
    from autoshard.evaluation.compare import compare_planners
    from autoshard.planners.task_cache import TaskCache
    from autoshard.rl import repair

    policy = placing_greedy_repairing_otherwise() if departing else DevicePolicy.load(SHIPPED / "policy.pt")
    workload = sample_task(generate_pool(PoolConfig(size=600, seed=11)).test, 40, np.random.default_rng(0))
    topology = Topology(4, memory_for(workload, 4, 1.3))
    context = PlannerContext(model, policy, 0, False)
    alone = compare_planners(workload, topology, ["rl"], context).plans[0]
    shared = replace(context, cache=TaskCache(workload, topology))
    greedy = compare_planners(workload, topology, ["cost_greedy"], shared).plans[0]
    followed = []
    follow = repair.follow_recorded
    monkeypatch.setattr(
        "autoshard.rl.planners.follow_recorded",
        lambda devices, rounds, *a: followed.append((follow(devices, rounds, *a), len(rounds))) or followed[-1][0],
    )
    after = compare_planners(workload, topology, ["rl"], shared).plans[0]
    assert tables_of(after) == tables_of(alone)
    assert [d.cost_ms for d in after.devices] == pytest.approx([d.cost_ms for d in alone.devices], rel=1e-9)
    ((made, rounds),) = followed
    assert rounds > 0  # cost_greedy's search made changes here
    if departing:
        assert made == 0 and tables_of(after) != tables_of(greedy)
    else:
        assert made == rounds and tables_of(after) == tables_of(greedy)


def tables_of(plan) -> list[list[str]]:
    return [[s.table.name for s in d.shards] for d in plan.devices]
