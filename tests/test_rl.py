"""The RL agent: the environment's contract, its masks and observation, a policy that must learn,
the planners that show the policy's own work, and the shipped policy."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from autoshard.core.constraints import Constraints, TableConstraints
from autoshard.core.errors import InputError, ModelError
from autoshard.core.sharding import ShardingType
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.task import Task, memory_for
from autoshard.core.types import GIB, Table, Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.validate import validate_plan
from autoshard.planning.registry import make_planner
from autoshard.rl.env import EnvConfig, Reward, ShardingEnv, begin, priced, start
from autoshard.rl.options import CONTEXT_FEATURES, OPTION_FEATURES, OptionState, expert_choice
from autoshard.rl.planners import RLPlanner
from autoshard.rl.policy import OptionPolicy, OptionScoringPolicy
from autoshard.rl.rollout import argmax_choice, rollout
from autoshard.rl.tasks import FixedTasks, TaskDistribution
from autoshard.rl.train import TrainConfig, eval_tasks, held_out
from cost_model.checkpoint import load_cost_model
from tests.cost_models import FixedCostTestModel

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "models" / "default"
SMALL = TaskDistribution(num_tables=(6, 12), topologies=((1, 2), (1, 4), (2, 2)))
TW_ONLY = frozenset({ShardingType.TABLE_WISE})


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return load_cost_model(SHIPPED)


@pytest.fixture(scope="module")
def shipped():
    return OptionPolicy.load(SHIPPED / "policy.pt")


def random_episode(env: ShardingEnv, seed: int, actions_seed: int):
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


def table_wise_only(tables: tuple[Table, ...]) -> Constraints:
    return Constraints(tuple((t.name, TableConstraints(sharding_types=TW_ONLY)) for t in tables))


def test_both_env_checkers_pass(model):
    gym_check_env(ShardingEnv(model, SMALL), skip_render_check=True)
    sb3_check_env(ShardingEnv(model, SMALL))


def test_same_seed_same_episode_and_other_seeds_differ(model):
    a = random_episode(ShardingEnv(model, SMALL), seed=3, actions_seed=9)
    b = random_episode(ShardingEnv(model, SMALL), seed=3, actions_seed=9)
    assert a[2] == b[2] and a[1] == b[1]
    assert all(np.array_equal(x, y) for x, y in zip(a[0], b[0]))
    c = random_episode(ShardingEnv(model, SMALL), seed=4, actions_seed=9)
    assert len(c[0]) != len(a[0]) or not all(np.array_equal(x, y) for x, y in zip(a[0], c[0]))


def test_the_plan_is_the_options_taken_and_the_step_return_is_minus_the_final_max(model):
    env = ShardingEnv(model, SMALL, EnvConfig(reward=Reward.STEP))
    for seed in range(4):
        _, rewards, _ = random_episode(env, seed=seed, actions_seed=seed + 1)
        state = env.state
        assert state is not None and state.done
        expected: list[list] = [[] for _ in state.devices]
        for option in env.taken:  # a column_wise option's shards are the next options taken
            if option.sharding_type is not ShardingType.COLUMN_WISE:
                for rank, unit in option.placements:
                    expected[rank].append(unit.shard)
        assert expected == [[u.shard for u in d.units] for d in state.devices]
        assert {o.sharding_type for o in env.taken} >= {ShardingType.TABLE_WISE}
        assert sum(rewards) == pytest.approx(-state.loads.max() / state.scale, rel=1e-5)
        bound = priced(env.task, model, None)  # at the bags DMP gives each shard
        costs = bound.predict_many([d.tables for d in state.devices], env.task.workload.batch_size)
        assert np.allclose(state.loads, costs, rtol=1e-3)  # the env's running costs are the model's


def test_under_torchrecs_model_options_fit_its_storage_estimate_so_rl_needs_no_retry():
    """TorchRec's estimator counts each shard's input and output buffers, which our planners do
    not: the env, like planning (``planning.memory_fit``), places on the memory its storage
    reservation leaves, and counts each unit as TorchRec's storage estimate does, so that every
    plan of its options fits TorchRec's count (task 0: the greedy rule over options ran into the
    memory barrier on our count), and rl's plan there is the env's episode."""
    from autoshard.torchrec.cost_model import OVER_MEMORY_MS, TorchRecCostModel

    model = TorchRecCostModel()
    tasks = eval_tasks(TrainConfig().eval_distribution, 14, 1)
    for task in (tasks[0], tasks[13]):  # 80 tables on 2 x 4, 40 tables on 1 x 8: tight
        env = ShardingEnv(model, FixedTasks((task,)))
        env.reset(seed=0, options={"task": task})
        assert env.state is not None
        bound = priced(env.task, model, None)
        planning = bound.planning_topology(task.topology)
        assert env.state.topology.device_memory_bytes_all == planning.device_memory_bytes_all
        units = env.state.pending
        assert [u.memory_bytes for u in units] == bound.shard_bytes([u.table for u in units]).tolist()
        assert rollout(env.state, expert_choice).loads.max() < OVER_MEMORY_MS
    policy = OptionPolicy.load(SHIPPED.parent / "torchrec" / "cuda" / "policy.pt")
    task = tasks[13]
    bound = priced(task, model, None)
    plan = RLPlanner(bound, policy, allow_column_split=True).plan(task.workload, bound.planning_topology(task.topology))
    assert bound.overflow_bytes(plan) <= 0  # its first plan fits: no retry
    state = rollout(begin(task, model, None, spread_every_table=policy.info.spread_every_table), argmax_choice(policy))
    assert [tuple(u.shard for u in d.units) for d in state.devices] == [d.shards for d in plan.devices]


def test_under_an_exact_model_every_table_may_be_offered_its_spread_forms(model):
    """TorchRec's estimator prices a table at its full output all-to-all, so a row split or a
    replica of even a cheap table may lower the max (docs/decisions.md, 56): with
    ``spread_every_table`` under it a cheap table is offered them; under a learned model, or
    without it, only tables worth a split are."""
    from autoshard.torchrec.cost_model import TorchRecCostModel

    task = eval_tasks(TrainConfig().eval_distribution, 7, 1)[6]  # 100 tables on 1 x 4
    exact = begin(task, TorchRecCostModel(), None, spread_every_table=True)
    learned = begin(task, model, None, spread_every_table=True)
    for state in (exact, learned):
        while state.current.cost >= 0.5 * state.share or not state._fits(state.current):
            state.apply(state.candidates().options[0])
    assert {o.sharding_type for o in exact.candidates().options} >= {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE}
    assert {o.sharding_type for o in learned.candidates().options} == {ShardingType.TABLE_WISE}
    exact = begin(task, TorchRecCostModel(), None)  # the env's default: only tables worth a split
    while exact.current.cost >= 0.5 * exact.share or not exact._fits(exact.current):
        exact.apply(exact.candidates().options[0])
    assert {o.sharding_type for o in exact.candidates().options} == {ShardingType.TABLE_WISE}


def test_the_plan_teacher_gives_each_table_cost_greedys_form():
    """``PlanTeacher``: each table's sharding type and shard count as in cost_greedy's plan of
    the task (where that form is offered), its devices by the greedy rule."""
    from autoshard.rl.imitation import PlanTeacher, plan_forms
    from autoshard.torchrec.cost_model import TorchRecCostModel

    task = eval_tasks(TrainConfig().eval_distribution, 7, 1)[6]
    env = ShardingEnv(TorchRecCostModel(), FixedTasks((task,)), EnvConfig(spread_every_table=True))
    env.reset(seed=0, options={"task": task})
    assert env.state is not None
    forms = plan_forms(env.state)
    assert any(kind is not ShardingType.TABLE_WISE for kind, _ in forms.values())  # it spreads some
    teacher, done, taken = PlanTeacher(), False, {}
    while not done:
        assert env.state is not None and env.found is not None
        unit = env.state.current
        option = env.found.options[teacher(env, np.flatnonzero(env.action_masks()))]
        if unit.shard.columns is None:
            taken[unit.parent] = (option.sharding_type, len(option.placements))
        done = env.step(env.found.options.index(option))[2]
    assert sum(taken[name] == form for name, form in forms.items()) >= 0.95 * len(forms)


def test_the_plan_teacher_takes_each_tables_form_from_the_plan_planning_returns():
    """Under an exact model planning keeps a spread plan at any predicted gain (departure margin
    0): the teacher's forms are those of the plan ``autoshard plan`` returns, not of one that
    kept a 10% margin (criteo_tb_uncapped_1x8: that teacher's plan was 1.40x cost_greedy's)."""
    from autoshard.core.task import load_suite
    from autoshard.planning.options import Models, PlanOptions
    from autoshard.planning.plan import plan
    from autoshard.rl.imitation import plan_forms
    from autoshard.torchrec.cost_model import TorchRecCostModel

    task = {t.name: t for t in load_suite("giants")[1]}["criteo_tb_uncapped_1x8"]
    model = TorchRecCostModel()
    report = plan(task.workload, task.topology, Models(model), PlanOptions(planners=("cost_greedy",)))
    kinds: dict[str, list[str]] = {}
    for device in report.plans[0].devices:
        for shard in device.shards:
            kinds.setdefault(shard.table.name, []).append(shard.sharding_type)
    returned = {name: (ShardingType(k[0]), len(k)) for name, k in kinds.items()}
    assert any(kind is not ShardingType.TABLE_WISE for kind, _ in returned.values())
    assert plan_forms(begin(task, model, None, spread_every_table=True)) == returned


def test_the_best_teacher_labels_each_task_by_the_better_of_the_rule_and_the_plan_teacher():
    """``BestTeacher``: per task the greedy rule or ``PlanTeacher``, whichever plans it with the
    lower max; its episode's max is the lower of theirs, on tasks where either is better."""
    from autoshard.rl.imitation import BestTeacher, PlanTeacher, teacher
    from autoshard.torchrec.cost_model import TorchRecCostModel

    def episode(env: ShardingEnv, task: Task, expert) -> float:
        env.reset(seed=0, options={"task": task})
        done = False
        while not done:
            done = env.step(expert(env, np.flatnonzero(env.action_masks())))[2]
        return env._max()

    config = EnvConfig(spread_every_table=True)
    wins = set()
    for task in eval_tasks(TrainConfig().eval_distribution, 8, 1):
        env = ShardingEnv(TorchRecCostModel(), FixedTasks((task,)), config)
        rule, by_plan = episode(env, task, teacher), episode(env, task, PlanTeacher())
        assert episode(env, task, BestTeacher()) == min(rule, by_plan)
        wins.add("rule" if rule < by_plan else "plan" if by_plan < rule else "tie")
    assert {"rule", "plan"} <= wins  # neither is better everywhere


def test_the_best_teachers_choices_made_in_worker_processes_are_those_made_one_by_one():
    """``prepared_forms`` draws each seed's task in a forked worker and chooses there: the same
    choice per task as ``better_forms`` in this process, keyed by the task."""
    import functools

    from autoshard.rl.imitation import better_forms, prepared_forms, task_key
    from autoshard.torchrec.cost_model import TorchRecCostModel

    tasks = TaskDistribution(num_tables=(10, 20), topologies=((1, 4), (2, 4)), giant_share=0.5)
    make = functools.partial(ShardingEnv, TorchRecCostModel(), tasks, EnvConfig(spread_every_table=True))
    seeds = [3, 4, 5, 6, 7]
    prepared = prepared_forms(make, seeds, 2)
    env = make()
    for seed in seeds:
        env.reset(seed=seed)
        assert prepared[task_key(env.task)] == better_forms(env)
    assert len(prepared) == len(seeds) and prepared_forms(make, seeds, 1) == {}  # one process: chosen as it goes


def test_the_terminal_reward_gives_the_same_return_all_at_the_end(model):
    step = random_episode(ShardingEnv(model, SMALL, EnvConfig(reward=Reward.STEP)), 2, 5)
    terminal = random_episode(ShardingEnv(model, SMALL, EnvConfig(reward=Reward.TERMINAL)), 2, 5)
    assert step[2] == terminal[2]
    assert all(r == 0.0 for r in terminal[1][:-1]) and sum(terminal[1]) == pytest.approx(sum(step[1]), rel=1e-5)


def test_masks_allow_exactly_the_feasible_options(model):
    """Two 8 MB tables on 3 devices of 9 MB: the first may go to any device; the second to the two
    devices the first left empty, and not row-wise (a shard would not fit beside the first);
    a 20 MB table that no device holds is offered only its row-split forms."""
    big = (Table("big", 31_250, 64), Table("big2", 31_250, 64))  # 8 MB each
    task = Task("t", Workload(big), Topology(3, 9e6 / GIB))
    env = ShardingEnv(model, FixedTasks((task,)), EnvConfig(slots=8))
    env.reset(seed=0)
    assert [o.label for o in env.found.options][:3] == ["table_wise@0", "table_wise@1", "table_wise@2"]
    assert env.action_masks().tolist() == [True] * len(env.found) + [False] * (8 - len(env.found))
    env.step(1)
    labels = [o.label for o in env.found.options]
    assert "table_wise@1" not in labels and {"table_wise@0", "table_wise@2"} <= set(labels)
    assert not any(label.startswith("row_wise") for label in labels)  # 1/3 of it beside an 8 MB table: no room
    for option in env.found.options:  # every option offered fits
        need = {}
        for rank, unit in option.placements:
            need[rank] = need.get(rank, 0) + unit.memory_bytes
        assert all(rank < 0 or env.state.free[rank] >= b for rank, b in need.items())
    giant = Table("giant", 78_125, 64)  # 20 MB: no device holds it whole
    state = OptionState(Workload((giant,)), Topology(3, 9e6 / GIB), model)
    kinds = {o.sharding_type for o in state.candidates().options}
    assert ShardingType.TABLE_WISE not in kinds and ShardingType.ROW_WISE in kinds


def test_tables_that_fit_no_device_are_placed_first(model):
    """As cost_greedy spreads them first: a table no device holds whole is the first unit, though
    it is the cheapest, so that its row shares are placed before the rest fills the devices."""
    giant = Table("giant", 78_125, 64, 1.0)  # 20 MB on 9 MB devices, one lookup per sample
    heavy = tuple(Table(f"t{i}", 2_000, 64, 40.0) for i in range(4))
    state = OptionState(Workload((*heavy, giant)), Topology(3, 9e6 / GIB), model)
    assert state.current.name == "giant" and state.current.cost < min(u.cost for u in state.pending[:-1])
    assert ShardingType.TABLE_WISE not in {o.sharding_type for o in state.candidates().options}
    rollout(state, expert_choice)
    assert state.done and sum(state.count) >= len(heavy) + 3


def test_a_table_that_fits_no_device_is_priced_at_its_cheapest_row_spread_not_whole():
    """Under TorchRec's estimator a whole table past every device's memory costs
    ``OVER_MEMORY_MS`` (a million ms): priced so, it set the task's share and scale, and every
    other option's cost features read 0 (test100_4x4: rl 1.48x cost_greedy). The env prices it at
    its cheapest row spread instead, so the share is the tables' own; a learned model's whole
    price, where lower than its spreads, stays."""
    from autoshard.planners.sharding_options import ROW_TYPES, spread_options
    from autoshard.torchrec.cost_model import OVER_MEMORY_MS, TorchRecCostModel

    task = eval_tasks(TrainConfig().eval_distribution, 2, 1)[1]  # 100 tables on 4 x 4, two giants
    state = begin(task, TorchRecCostModel(), None)
    giants = [u for u in state.pending if not state._fits(u)]
    assert giants and state.share < 100.0 and state.scale < 100.0
    for unit in giants:
        spreads = spread_options(unit.shard.table, state.topology, ROW_TYPES)
        cheapest = min(sum(state.cost_fn([s.as_table for _, s in o.placements])) for o in spreads)
        assert unit.cost == pytest.approx(cheapest) and unit.cost < OVER_MEMORY_MS / 1e3
    first = state.candidates()
    assert first.rows[:, OPTION_FEATURES.index("cost_after")].max() > 0.01  # cost features carry signal
    learned = begin(task, load_cost_model(SHIPPED), None)
    whole = learned.cost_fn([u.shard.as_table for u in learned.pending if not learned._fits(u)])
    assert sorted(u.cost for u in learned.pending if not learned._fits(u)) == pytest.approx(sorted(whole))


def test_no_option_takes_the_row_shares_kept_for_tables_that_fit_no_device():
    """syn60_giants_1x8 under TorchRec's estimator: three tables fit no device. The policy split
    the first one's columns onto the devices' room kept for the others' row shares, and the third
    then fitted nowhere: a dead end, so planning moved a table to UVM caching (rl 3.64x
    cost_greedy). An option is offered past those shares only where no other is."""
    from autoshard.core.task import load_suite
    from autoshard.torchrec.cost_model import TorchRecCostModel

    task = {t.name: t for t in load_suite("giants")[1]}["syn60_giants_1x8"]
    policy = OptionPolicy.load(SHIPPED.parent / "torchrec" / "cuda" / "policy.pt")
    state = begin(task, TorchRecCostModel(), None, spread_every_table=policy.info.spread_every_table)
    assert sum(not state._fits(u) for u in state.pending) >= 2
    rollout(state, argmax_choice(policy))  # raised table_does_not_fit before
    assert state.done


def test_a_table_that_fits_no_device_is_spread_over_every_device_under_torchrec():
    """criteo_tb_uncapped_1x8 under TorchRec's estimator: the policy split cat_21 (89 GB, 59 GB
    devices) into two column shards of 45 GB, the costliest table then fitted only two devices in
    two halves, and rl was 1.43x cost_greedy. A table that fits no device is now offered only the
    options that put a shard on every device (its row share on each, the room the env keeps for
    it), where one of them is offered; under a learned model every spread stays."""
    from autoshard.core.task import load_suite
    from autoshard.torchrec.cost_model import TorchRecCostModel

    task = {t.name: t for t in load_suite("giants")[1]}["criteo_tb_uncapped_1x8"]
    state = begin(task, TorchRecCostModel(), None, spread_every_table=True)
    n, seen = task.topology.num_devices, 0
    while not state.done:
        found = state.candidates()
        unit = state.current
        if not state._fits(unit) and unit.shard.columns is None:
            seen += 1
            for option in found.options:
                column = option.sharding_type is ShardingType.COLUMN_WISE
                ways = len(option.placements) if column else len(set(option.ranks))
                assert ways == n, (unit.name, option.label)
        state.apply(found.options[expert_choice(state, found)])
    assert seen >= 4
    learned = begin(task, load_cost_model(SHIPPED), None)
    first = learned.candidates()
    assert not learned._fits(learned.current)
    assert any(o.sharding_type is ShardingType.COLUMN_WISE and len(o.placements) < n for o in first.options)


def test_the_teacher_opens_every_device_rather_than_pile_onto_one():
    """Four alike tables on two devices whose sets cost 1 + 0.1 n ms: opening a device costs 1.1,
    adding to an open one 0.1, but the second device will be opened anyway. By hand: 2 + 2,
    max 1.2 (counting the opening cost against the projected mean would put three on the first
    device: max 1.3)."""
    tables = tuple(Table(f"t{i}", 1_000, 16) for i in range(4))
    state = OptionState(Workload(tables), Topology(2, 1.0), FixedCostTestModel(), allowed=TW_ONLY)
    state.apply(state.candidates().options[0])
    found = state.candidates()  # the second table: on the open device (+0.1 ms) or the empty one (+1.1 ms)
    assert found.added.tolist() == pytest.approx([0.1, 0.1])  # the empty one is opened by the end anyway
    assert found.after_max.tolist() == pytest.approx([1.2, 1.1])
    mean_added = found.rows[:, OPTION_FEATURES.index("mean_added")]
    assert mean_added[0] == mean_added[1] == pytest.approx(0.1 / 2 / state.scale)
    rollout(state, expert_choice)
    assert state.count.tolist() == [2, 2] and state.loads.max() == pytest.approx(1.2)


def test_the_observation_carries_no_planners_pick(model):
    """The same tables on devices renumbered: greedy's device (cheapest after) moves with them,
    and the option rows are the same rows, permuted; no feature names another planner's pick."""
    assert not any("greedy" in f or "choice" in f for f in (*CONTEXT_FEATURES, *OPTION_FEATURES))
    tables = tuple(Table(f"t{i}", 2000 * (i + 1), 16, 1.0 + i) for i in range(6))
    workload = Workload(tables, constraints=table_wise_only(tables))
    rows, picks = [], []
    for order in ([0, 1, 2, 0, 1], [2, 0, 1, 2, 0]):  # device k of the first is device order[k] ... renumbered
        state = OptionState(workload, Topology(3, 1.0), model, limit=None)
        for device in order:
            found = state.candidates()
            state.apply(next(o for o in found.options if o.placements[0][0] == device))
        found = state.candidates()
        rows.append(sorted(map(tuple, found.rows.round(6).tolist())))
        picks.append(found.options[int(np.argmin(found.after_max))].placements[0][0])
    assert rows[0] == rows[1] and picks[0] != picks[1]


def test_a_policy_must_learn_the_plan_largest_first_greedy_misses():
    """Costs add up (cost = pooling factor); tables 3, 3, 2, 2, 2 on two devices, table-wise
    only. Largest-first greedy (the teacher's rule too) puts the 3s apart, then the 2s: 3+2+2 =
    7. The optimum is {3, 3} | {2, 2, 2}: 6. A short PPO run must find it."""
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    tables = tuple(Table(f"t{i}", 100, 8, pooling) for i, pooling in enumerate((3.0, 3.0, 2.0, 2.0, 2.0)))
    task = Task("lpt", Workload(tables, constraints=table_wise_only(tables)), Topology(2, 1.0))
    cost_model = ProxyCostModel(lambda t: t.pooling_factor)
    assert rollout(start(task, cost_model), expert_choice).loads.max() == 7.0
    env = ShardingEnv(cost_model, FixedTasks((task,)), EnvConfig(slots=2))
    env.reset(seed=0)
    agent = MaskablePPO(
        OptionScoringPolicy,
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


def test_cloning_the_teacher_makes_the_actor_choose_as_it_does(model):
    """The warm start: the actor cloned from the teacher's episodes picks its option on most
    steps of unseen episodes; an untrained one does not."""
    from sb3_contrib import MaskablePPO

    from autoshard.rl.imitation import clone, demonstrations

    env = ShardingEnv(model, SMALL, EnvConfig(slots=16))
    agent = MaskablePPO(OptionScoringPolicy, env, seed=0, policy_kwargs={"hidden": 32}, device="cpu")
    taught = demonstrations(ShardingEnv(model, SMALL, EnvConfig(slots=16)), 30, seed=0)
    agreement = clone(agent.policy, taught, epochs=30, seed=0)
    unseen = demonstrations(ShardingEnv(model, SMALL, EnvConfig(slots=16)), 10, seed=100)
    with torch.no_grad():
        obs = torch.as_tensor(unseen.observations)
        logits = agent.policy.mlp_extractor.forward_actor(obs)
        chosen = torch.where(torch.as_tensor(unseen.masks), logits, -torch.inf).argmax(1).numpy()
    assert agreement > 0.7 and (chosen == unseen.actions).mean() > 0.6


def test_rl_is_the_policys_argmax_and_nothing_else(model, shipped):
    """rl's plan is the env's argmax episode, option for option: no search, no fallback."""
    tables = generate_pool(PoolConfig(size=300, seed=11)).test
    workload = sample_task(tables, 30, np.random.default_rng(0))
    topology = Topology.cluster(2, 4, memory_for(workload, 8, 1.2))
    plan = RLPlanner(model, shipped, allow_column_split=True).plan(workload, topology)
    state = rollout(start(Task("t", workload, topology), model), argmax_choice(shipped))
    assert [tuple(u.shard for u in d.units) for d in state.devices] == [d.shards for d in plan.devices]
    validate_plan(plan, workload, topology)
    again = RLPlanner(model, shipped, allow_column_split=True).plan(workload, topology)
    assert again.devices == plan.devices  # deterministic


def test_rl_refine_raw_is_at_most_rl_and_rl_refine_at_most_cost_greedy(model, shipped):
    tables = generate_pool(PoolConfig(size=300, seed=11)).test
    workload = sample_task(tables, 40, np.random.default_rng(1))
    topology = Topology.cluster(2, 4, memory_for(workload, 8, 1.3))
    context = PlannerContext(model, shipped)
    plans = {
        n: make_planner(n, context).plan(workload, topology)
        for n in ("rl", "rl+refine_raw", "rl+refine", "cost_greedy")
    }
    for plan in plans.values():
        validate_plan(plan, workload, topology)
    assert plans["rl+refine_raw"].max_cost_ms <= plans["rl"].max_cost_ms * (1 + 1e-6)
    greedy = plans["cost_greedy"].max_cost_ms
    assert plans["rl+refine"].max_cost_ms <= greedy * (1 + 1e-6)
    raw = plans["rl+refine_raw"].max_cost_ms
    assert plans["rl+refine"].max_cost_ms == pytest.approx(raw if raw < 0.9 * greedy else greedy, rel=1e-6)


def test_the_shipped_policy_plans_unseen_tables_on_more_devices_than_it_trained_on(model, shipped):
    """Trained on at most 16 devices; planning 4 x 8 devices and a table larger than one device."""
    tables = generate_pool(PoolConfig(size=1000, seed=12)).test
    workload = sample_task(tables, 150, np.random.default_rng(0))
    memory = 1.3 * workload.memory_bytes / 32 / GIB  # no floor: the largest tables fit no device
    topology = Topology.cluster(4, 8, memory)
    assert max(t.memory_bytes for t in workload.tables) > topology.device_memory_bytes
    plan = make_planner("rl", PlannerContext(model, shipped)).plan(workload, topology)
    validate_plan(plan, workload, topology)
    kinds = {s.sharding_type for d in plan.devices for s in d.shards}
    assert kinds & {ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD}


def test_the_shipped_policy_records_its_run_and_its_evaluations(shipped):
    info = shipped.info
    assert info.warm_start_ratio is not None and info.eval_ratio is not None
    assert info.history and info.history[0] == (0, info.warm_start_ratio), "the clone is evaluated first"
    assert max(s for s, _ in info.history) > 0, "PPO ran after the clone"
    assert (info.steps, info.eval_ratio) in info.history
    assert info.eval_ratio == min(r for _, r in info.history), "the best evaluated policy is the one kept"


def test_the_shipped_policy_was_trained_against_its_profiles_own_model(model, shipped):
    """Each profile ships a policy trained against its own model (issue 62, part 4): the file names
    that model, planning with it warns of no mismatch, and the recorded command trained on it."""
    import shlex

    assert shipped.info.cost_model == SHIPPED.resolve().name
    assert shipped.model_mismatch(model) is None
    words = shlex.split(shipped.info.command)
    assert Path(words[words.index("--model") + 1]).name == SHIPPED.resolve().name


def test_a_policy_trained_without_a_feature_group_reads_it_as_zero(shipped):
    from dataclasses import replace

    from autoshard.rl.options import CONTEXT, kept_columns

    dropped = OptionPolicy(shipped.layers, replace(shipped.info, dropped=("option_cost", "unit")))
    rng = np.random.default_rng(0)
    context, rows = rng.normal(size=CONTEXT).astype(np.float32), rng.normal(size=(5, len(OPTION_FEATURES)))
    keep_context, keep_option = kept_columns(("option_cost", "unit"))
    assert np.allclose(dropped.scores(context, rows), shipped.scores(context * keep_context, rows * keep_option))
    with pytest.raises(Exception, match="dropped"):
        EnvConfig(dropped=("nope",))


def test_a_corrupt_missing_or_older_policy_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="no policy"):
        OptionPolicy.load(tmp_path / "policy.pt")
    (tmp_path / "policy.pt").write_bytes(b"not a policy")
    with pytest.raises(ModelError, match="cannot load"):
        OptionPolicy.load(tmp_path / "policy.pt")
    torch.save({"format": "autoshard-policy-v2", "info": {}, "layers": []}, tmp_path / "old.pt")  # before `mean_added`
    with pytest.raises(ModelError, match="retrain"):
        OptionPolicy.load(tmp_path / "old.pt")


def test_policy_train_writes_a_policy_that_plans_and_resumes(tmp_path):
    """What `autoshard policy train` runs (``train_profile_policy``), end to end on a tiny budget:
    checkpoints, eval log, TensorBoard logs, policy.pt in the profile with its evaluations;
    resuming continues the same run; the CLI refuses to replace a policy by accident."""
    from typer.testing import CliRunner

    from autoshard.cli import app
    from autoshard.cli.policy import _profile, train_profile_policy

    shutil.copy(SHIPPED / "cost_model.pt", tmp_path)
    shutil.copy(SHIPPED / "communication.json", tmp_path)
    tasks = TaskDistribution(pool=PoolConfig(size=100), num_tables=(6, 60), topologies=((1, 2), (2, 2)))
    small = TrainConfig(
        tasks=tasks,
        envs=1,
        env=EnvConfig(slots=8),
        checkpoint_every=256,
        eval_every=512,
        eval_tasks=2,
        imitation_episodes=2,
    )

    def train(steps: int, **options) -> OptionPolicy:
        loaded, folder = _profile(tmp_path, None)
        return train_profile_policy(
            loaded, folder, replace(small, steps=steps), "autoshard policy train", progress=False, **options
        )

    train(512)
    work = tmp_path / "policy_training"
    config = json.loads((work / "training.json").read_text())["config"]
    assert config["tasks"]["num_tables"] == [6, 60] and config["tasks"]["pool"]["size"] == 100
    evaluated = config["eval_distribution"]  # the pool's test tables, the sizes where plans differ
    assert evaluated["split"] == "test" and evaluated["num_tables"] == [60] and evaluated["topologies"] == [[2, 2]]
    assert (tmp_path / "policy.pt").exists() and (work / "eval_log.csv").exists()
    assert list((work / "checkpoints").glob("ppo_*_steps.zip")) and list((work / "tensorboard").rglob("events.*"))
    policy = OptionPolicy.load(tmp_path / "policy.pt")
    assert policy.info.slots == 8 and "policy train" in policy.info.command
    assert policy.info.warm_start_ratio is not None and policy.info.history[0][0] == 0
    train(1024, resume=True)
    steps = [int(line.split(",")[0]) for line in (work / "eval_log.csv").read_text().splitlines()[1:]]
    assert max(steps) >= 1024
    assert len(OptionPolicy.load(tmp_path / "policy.pt").info.history) == len(steps)
    stale = work / "checkpoints" / "ppo_999999_steps.zip"
    stale.write_bytes(b"a checkpoint of an earlier run")
    refused = CliRunner().invoke(app, ["policy", "train", "--profile", str(tmp_path), "--steps", "256"])
    assert refused.exit_code == 2 and "--fresh" in refused.output and stale.exists()  # nothing lost by accident
    with pytest.raises(InputError, match="slots"):  # a resumed run keeps its settings
        train_profile_policy(
            *_profile(tmp_path, None), replace(small, steps=2048, env=EnvConfig(slots=12)), "", resume=True
        )
    for option, value in (("--tables", "0,6"), ("--topologies", "2by4")):
        bad = CliRunner().invoke(app, ["policy", "train", "--profile", str(tmp_path), option, value])
        assert bad.exit_code == 2 and option in bad.output, bad.output


def test_past_its_time_budget_rl_refine_returns_its_best_so_far_marked_partial(model, shipped):
    tables = generate_pool(PoolConfig(size=300, seed=11)).test
    workload = sample_task(tables, 40, np.random.default_rng(2))
    topology = Topology(8, memory_for(workload, 8, 1.3))
    plan = RLPlanner(model, shipped, samples=4, time_budget_s=0.0, raw=True, name="rl+refine_raw").plan(
        workload, topology
    )
    validate_plan(plan, workload, topology)
    assert plan.partial


def test_policy_train_defaults_are_train_configs():
    """`autoshard policy train`'s options default to TrainConfig's settings, and those are the
    shipped policies' full run (the CPU-budget run, lab/experiments/policy_budget_train.py, only
    lowers the cloned episodes, DAgger rounds and PPO steps)."""
    import typer

    from autoshard.cli import app

    train = typer.main.get_command(app).commands["policy"].commands["train"]  # type: ignore[attr-defined]
    defaults = {p.name: p.default for p in train.params}
    config = TrainConfig()
    assert defaults["steps"] is None  # the model's recipe's
    assert defaults["envs"] == config.envs
    assert (defaults["seed"], defaults["tables"]) == (config.seed, ",".join(map(str, config.tasks.num_tables)))
    assert defaults["topologies"] is None  # the model's recipe's: TrainConfig's for a learned model
    assert (config.envs, config.learning_rate, config.ent_coef) == (4, 5e-5, 0.0)
    assert (config.imitation_episodes, config.dagger_rounds, config.steps) == (300, 2, 600_000)


def test_each_model_trains_by_its_shipped_recipe(model):
    """A learned model's run is ``TrainConfig()``; TorchRec's estimator's clones cost_greedy's
    forms with every table offered its spreads (the shipped torchrec policy's run), and what the
    CLI gives overrides either."""
    from autoshard.rl.train import EXACT_MODEL_STEPS, recipe
    from autoshard.torchrec.cost_model import TorchRecCostModel

    assert recipe(model) == TrainConfig()
    assert recipe(model, steps=10, seed=3) == TrainConfig(steps=10, seed=3)
    exact = recipe(TorchRecCostModel())
    assert (exact.teacher, exact.env.spread_every_table, exact.steps) == ("best", True, EXACT_MODEL_STEPS)
    assert (exact.imitation_episodes, exact.imitation_epochs, exact.dagger_rounds) == (150, 60, 2)
    assert max(h * d for h, d in exact.tasks.topologies) == 128 and exact.env.slots >= 72  # a 16 x 8's options
    assert exact.eval_distribution == held_out(exact.tasks)
    shipped = OptionPolicy.load(SHIPPED.parent / "torchrec" / "cuda" / "policy.pt")
    assert shipped.info.spread_every_table and recipe(TorchRecCostModel(), steps=7).steps == 7


def test_a_steps_stake_is_what_a_worse_option_may_cost(model):
    """``stake``: 1 plus how far the worst offered option's bound is above the chosen one's, in
    the task's scale, capped: the greedy rule's own choice weighs most, the worst option 1."""
    from autoshard.rl.imitation import MAX_STAKE, stake, teacher

    env = ShardingEnv(model, SMALL)
    env.reset(seed=3)
    assert env.found is not None and len(env.found) > 1
    stakes = [stake(env, a) for a in range(len(env.found))]
    assert all(1.0 <= s <= MAX_STAKE for s in stakes) and min(stakes) == 1.0
    assert stake(env, teacher(env, np.flatnonzero(env.action_masks()))) == max(stakes) > 1.0


def test_an_env_draws_past_a_task_its_model_cannot_plan():
    """Under TorchRec's model a drawn task whose devices its storage reservation leaves no memory
    for tables (a long PPO run drew one and crashed) is drawn again; a given one is refused, and a
    distribution of nothing else is an ``InputError`` naming the task."""
    from autoshard.core.errors import PlannerError
    from autoshard.torchrec.cost_model import TorchRecCostModel

    task = eval_tasks(TrainConfig().eval_distribution, 1, 1)[0]
    starved = Task("starved", task.workload, Topology(task.topology.num_devices, 0.001))
    model = TorchRecCostModel()
    env = ShardingEnv(model, FixedTasks((starved, task)))
    for seed in range(6):  # each draw of ``starved`` is drawn again, so every episode is ``task``
        env.reset(seed=seed)
        assert env.task.name == task.name
    with pytest.raises(PlannerError):
        env.reset(seed=0, options={"task": starved})
    with pytest.raises(InputError, match="task"):
        ShardingEnv(model, FixedTasks((starved,))).reset(seed=0)
