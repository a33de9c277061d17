"""A warm start for PPO: behaviour cloning of the greedy rule over options (``expert_choice``).

Cloning first (cross-entropy on the teacher's option, under the env's mask) starts PPO at the
teacher's plans, with a critic fitted to the returns those plans get, so its updates start from
good advantages rather than a random critic. The teacher is only the start: no feature of the
observation holds its choice, and PPO trains on from there.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from autoshard.core.errors import PlannerError
from autoshard.core.sharding import ShardingType
from autoshard.core.task import Task
from autoshard.planners.context import PlannerContext
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.rl.env import ShardingEnv, start
from autoshard.rl.options import CONTEXT, KINDS, OPTION, Candidates, OptionState, expert_choice
from autoshard.rl.policy import OptionScoringPolicy
from autoshard.rl.rollout import Choose, rollout


@dataclass(frozen=True, slots=True)
class Demonstrations:
    """The teacher's steps: observations, masks, its actions, and each step's return to go."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    returns: np.ndarray
    stakes: np.ndarray  # each step's weight in cloning (``stake``; 1 where not weighed)

    def __len__(self) -> int:
        return len(self.actions)


Expert = Callable[[ShardingEnv, np.ndarray], int]
"""(the env mid-episode, indices of the devices its mask allows) -> the device to demonstrate."""


def teacher(env: ShardingEnv, allowed: np.ndarray) -> int:
    """The greedy rule's option (``expert_choice``) at the env's current step."""
    assert env.state is not None and env.found is not None
    return expert_choice(env.state, env.found)


class PlanTeacher:
    """A teacher that takes each table's form from cost_greedy's final plan of the episode's task
    (its sharding type, and for column_wise its shard count: the choice cost_greedy's spread
    variants and option search make) and its devices by the greedy rule (``expert_choice``) among
    the options of that form; the greedy rule alone where none is offered. The form is the
    table's own, not the state's: on the policy's own states (DAgger) it labels them as well.
    Under TorchRec's estimator, with every table offered its forms, the greedy rule alone is
    1.055x cost_greedy's predicted max on the held-out tasks, this teacher 1.006x
    (lab/results/policy_per_model/torchrec_cuda_teacher_ceiling.json)."""

    def __init__(self) -> None:
        self._task: object = None
        self._forms: Forms = {}

    def __call__(self, env: ShardingEnv, allowed: np.ndarray) -> int:
        state, found = env.state, env.found
        assert state is not None and found is not None
        if env.task is not self._task:
            self._task, self._forms = env.task, plan_forms(state)
        return form_choice(self._forms)(state, found)


def form_choice(forms: Forms) -> Choose:
    """The greedy rule (``expert_choice``) among the options of each table's form in ``forms``
    (its sharding type, and for column_wise its shard count); among all where none is offered."""

    def choose(state: OptionState, found: Candidates) -> int:
        unit = state.current
        form = None if unit.shard.columns is not None else forms.get(unit.parent)
        if form is None:
            return expert_choice(state, found)
        kind, ways = form
        same = [
            i
            for i, o in enumerate(found.options)
            if o.sharding_type is kind and (kind is not ShardingType.COLUMN_WISE or len(o.placements) == ways)
        ]
        return expert_choice(state, found, np.array(same) if same else None)

    return choose


Forms = dict[str, tuple[ShardingType, int]]
"""Each table's (sharding type, shard count) in a plan (``plan_forms``)."""


class BestTeacher:
    """Per task, the better of the greedy rule and ``PlanTeacher``: both plan the episode's task
    from its start, and the one whose plan has the lower max (``PlanTeacher`` on a tie, the other
    where one runs into a dead end) labels every step of the episode, the policy's own states
    (DAgger) included. Neither is better everywhere: under TorchRec's estimator on the giants and
    hosts suites the rule is below cost_greedy on 8 of 15 tasks and up to 1.15x on others
    (docs/decisions.md, 76). ``known``: tasks' choices made beforehand (``better_forms`` by
    ``task_key``, as ``prepared_forms`` makes them in parallel); any other task's is made here."""

    def __init__(self, known: Mapping[str, Forms | None] | None = None) -> None:
        self._known = dict(known or {})
        self._task: object = None
        self._choose: Choose = expert_choice

    def __call__(self, env: ShardingEnv, allowed: np.ndarray) -> int:
        state, found = env.state, env.found
        assert state is not None and found is not None
        if env.task is not self._task:
            key = task_key(env.task)
            forms = self._known[key] if key in self._known else better_forms(env)
            self._task, self._choose = env.task, expert_choice if forms is None else form_choice(forms)
        return self._choose(state, found)


def task_key(task: Task) -> str:
    """What tells a drawn task from another: its name, tables and topology."""
    return repr((task.name, tuple(t.name for t in task.workload.tables), task.topology))


def better_forms(env: ShardingEnv) -> Forms | None:
    """cost_greedy's forms (``plan_forms``) of the env's task, freshly reset, where the plan
    teacher plans it at most as high a max as the greedy rule; None where the rule's is lower."""
    assert env.state is not None
    priced, config = env.state.cost_model, env.config
    forms = plan_forms(env.state)
    maxima = []
    for choose in (form_choice(forms), expert_choice):
        try:
            fresh = start(env.task, priced, config.set_size_headroom, config.spread_every_table)
            maxima.append(float(rollout(fresh, choose).loads.max()))
        except PlannerError:
            maxima.append(math.inf)
    return None if maxima[1] < maxima[0] else forms


_worker_env: ShardingEnv | None = None


def _start_worker(make_env: Callable[[], ShardingEnv]) -> None:
    global _worker_env
    torch.set_num_threads(1)  # each worker on a core of its own
    _worker_env = make_env()


def _worker_forms(seed: int) -> tuple[str, Forms | None]:
    assert _worker_env is not None
    _worker_env.reset(seed=seed)
    return task_key(_worker_env.task), better_forms(_worker_env)


def prepared_forms(
    make_env: Callable[[], ShardingEnv], seeds: Sequence[int], processes: int
) -> dict[str, Forms | None]:
    """``better_forms`` of the task each of ``seeds`` draws at ``reset``, by ``task_key``, in
    ``processes`` forked worker processes, each with its own ``make_env()`` (cost_greedy's plan
    of each task is most of a warm start's time; the choices are the same as made one by one)."""
    if processes < 2 or len(seeds) < 2:
        return {}
    context = multiprocessing.get_context("fork")
    with context.Pool(processes, initializer=_start_worker, initargs=(make_env,)) as pool:
        return dict(pool.imap(_worker_forms, seeds, chunksize=1))


def plan_forms(state: OptionState) -> Forms:
    """Each table's (sharding type, shard count) in cost_greedy's plan of ``state``'s task, planned
    on its workload, topology and cost model as the env gives them (empty where it finds none)."""
    margin = PlannerContext(state.cost_model).margin  # as planning keeps a spread plan: 0 under an exact model
    planner = CostGreedyPlanner(state.cost_model, state.allow_column_split, departure_margin=margin)
    try:
        plan = planner.plan(state.workload, state.topology)
    except PlannerError:
        return {}
    shards: dict[str, list[ShardingType]] = {}
    for device in plan.devices:
        for shard in device.shards:
            shards.setdefault(shard.table.name, []).append(shard.sharding_type)
    return {name: (kinds[0], len(kinds)) for name, kinds in shards.items()}


Follower = Callable[[np.ndarray, np.ndarray], int]
"""(an observation, its action mask) -> the action a policy takes there."""


MAX_STAKE = 10.0
"""A step's stake in cloning is at most this many times an ordinary step's."""


def stake(env: ShardingEnv, action: int) -> float:
    """What a wrong choice at the env's current step may cost, as a cloning weight: 1 plus the
    largest (new max, implied mean) bound of an offered option (``expert_choice``'s) above the
    chosen one's, in units of the task's scale, at most ``MAX_STAKE``. Few steps decide much
    (a table several times an even share: its form), many decide little: the clone weighs
    them so."""
    state, found = env.state, env.found
    assert state is not None and found is not None
    n = len(state.loads)
    base = (float(state.loads.sum()) + state.remaining_cost - state.current.cost) / n
    bound = np.maximum(np.maximum(found.after_max, float(state.loads.max())), base + found.added / n)
    return float(min(1.0 + (bound.max() - bound[action]) / state.scale, MAX_STAKE))


def demonstrations(
    env: ShardingEnv,
    episodes: int,
    seed: int,
    expert: Expert = teacher,
    follow: Follower | None = None,
    weigh: bool = False,
) -> Demonstrations:
    """``episodes`` of ``expert``'s choices (default the teacher's) in ``env``; with ``follow``, the
    episodes take ``follow``'s actions and ``expert`` labels the states they reach (DAgger: the
    clone learns the teacher's choice where its own choices lead, not only along the teacher's
    path),
    from tasks it draws with ``seed``; an episode that ends in a dead end keeps its steps (their
    returns include it). ``weigh``: each step weighs its ``stake`` in cloning (else 1)."""
    observations: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    actions: list[int] = []
    returns: list[float] = []
    stakes: list[float] = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        rewards, done = [], False
        while not done:
            mask = env.action_masks()
            action = expert(env, np.flatnonzero(mask))
            observations.append(obs)
            masks.append(mask)
            actions.append(action)
            stakes.append(stake(env, action) if weigh else 1.0)
            obs, reward, done, _, _ = env.step(action if follow is None else follow(obs, mask))
            rewards.append(reward)
        returns.extend(np.cumsum(rewards[::-1])[::-1])  # gamma = 1: the sum of the rewards to come
    return Demonstrations(
        np.asarray(observations, np.float32),
        np.asarray(masks),
        np.asarray(actions),
        np.asarray(returns, np.float32),
        np.asarray(stakes, np.float32),
    )


def joined(a: Demonstrations, b: Demonstrations) -> Demonstrations:
    """Both sets of steps, as one."""
    return Demonstrations(
        np.concatenate([a.observations, b.observations]),
        np.concatenate([a.masks, b.masks]),
        np.concatenate([a.actions, b.actions]),
        np.concatenate([a.returns, b.returns]),
        np.concatenate([a.stakes, b.stakes]),
    )


def argmax_follower(policy: OptionScoringPolicy) -> Follower:
    """The actor's best-scored allowed action."""

    def follow(obs: np.ndarray, mask: np.ndarray) -> int:
        with torch.no_grad():
            logits = policy.mlp_extractor.forward_actor(torch.as_tensor(obs[None]))[0].numpy()
        return int(np.argmax(np.where(mask, logits, -np.inf)))

    return follow


SPLIT_WEIGHT = 10.0
"""Cloning weighs a step whose teacher's option is not table_wise this much more: such steps are
few (a few percent) and decide the most (a table's type and shard count)."""
CLONE_LEARNING_RATE = 1e-3


def clone(
    policy: OptionScoringPolicy, demonstrations: Demonstrations, epochs: int = 10, batch_size: int = 256, seed: int = 0
) -> float:
    """Fit ``policy``'s actor to the teacher's actions (masked cross-entropy, ``SPLIT_WEIGHT`` on
    the steps that choose a type other than table_wise, times each step's stake) and its critic to the returns (squared
    error), with an optimizer of its own; returns the share of steps on which the actor's argmax
    is the teacher's option afterwards."""
    rng = np.random.default_rng(seed)
    obs = torch.as_tensor(demonstrations.observations)
    masks = torch.as_tensor(demonstrations.masks)
    actions = torch.as_tensor(demonstrations.actions)
    returns = torch.as_tensor(demonstrations.returns)
    options = obs[:, CONTEXT:].reshape(len(obs), masks.shape[1], OPTION)
    table_wise = options[torch.arange(len(obs)), actions, 1 + KINDS.index(ShardingType.TABLE_WISE)]
    weights = torch.where(table_wise > 0, 1.0, SPLIT_WEIGHT) * torch.as_tensor(demonstrations.stakes)
    optimizer = torch.optim.Adam(policy.parameters(), lr=CLONE_LEARNING_RATE)
    policy.set_training_mode(True)
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(demonstrations)), max(len(demonstrations) // batch_size, 1)):
            values, log_prob, _ = policy.evaluate_actions(obs[batch], actions[batch], action_masks=masks[batch])
            w = weights[batch]
            critic = torch.nn.functional.mse_loss(values.flatten(), returns[batch])
            loss = -(w * log_prob).sum() / w.sum() + 0.5 * critic
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
    policy.set_training_mode(False)
    with torch.no_grad():
        features = policy.extract_features(obs, policy.pi_features_extractor)
        assert isinstance(features, torch.Tensor)  # one extractor shared by actor and critic
        logits = policy.mlp_extractor.forward_actor(features)
        chosen = torch.where(masks, logits, torch.full_like(logits, -torch.inf)).argmax(1)
    return float((chosen == actions).float().mean())
