"""Training the sharding policy with sb3-contrib's MaskablePPO against a cost model.

A warm start clones the greedy rule over options (``options.expert_choice``); PPO then trains on.
Seeded; vectorised envs (``DummyVecEnv``, or ``SubprocVecEnv`` on request); TensorBoard logs; a
checkpoint every ``checkpoint_every`` steps that ``resume`` continues from; and an evaluation on
fixed test-pool tasks (tables never seen in training) that keeps the best policy as
``policy.pt``: the geometric mean of its argmax plans' predicted max over the teacher's. The
policy file records its PPO steps, the clone's score and every evaluation's.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback

from autoshard.core.communication import CommunicationModel
from autoshard.core.costing import is_exact
from autoshard.core.errors import InputError, PlannerError
from autoshard.core.task import Task
from autoshard.core.types import CostModel
from autoshard.rl.env import EnvConfig, Reward, ShardingEnv, begin
from autoshard.rl.imitation import (
    BestTeacher,
    Expert,
    PlanTeacher,
    argmax_follower,
    clone,
    demonstrations,
    joined,
    prepared_forms,
    teacher,
)
from autoshard.rl.options import expert_choice
from autoshard.rl.policy import (
    POLICY_FILE,
    OptionPolicy,
    OptionScorerNet,
    OptionScoringPolicy,
    PolicyInfo,
    model_identity,
)
from autoshard.rl.rollout import Choose, argmax_choice, rollout
from autoshard.rl.tasks import TaskDistribution

CHECKPOINTS = "checkpoints"
EVAL_LOG = "eval_log.csv"
STATE_FILE = "training.json"
WARM_START_FILE = "warm_start.pt"  # the clone, before PPO: what PPO's gain is measured against


@dataclass(frozen=True, slots=True)
class TrainConfig:
    steps: int = 600_000
    seed: int = 0
    envs: int = 4
    subprocess: bool = False
    hidden: int = 64
    learning_rate: float = 5e-5  # 1e-4 and 3e-4 drift off the clone (docs/decisions.md, 40)
    n_steps: int = 1024  # per env, per update
    batch_size: int = 512
    epochs: int = 5
    gamma: float = 1.0  # episodic, and the return is the plan's quality: no discounting
    gae_lambda: float = 0.95
    ent_coef: float = 0.0
    imitation_episodes: int = 300  # teacher episodes cloned before PPO (``autoshard.rl.imitation``); 0: none
    imitation_epochs: int = 20
    dagger_rounds: int = 2  # rounds of the clone's own episodes labelled by the teacher, cloned again
    teacher: str = "rule"  # what the warm start clones: one of ``TEACHERS``
    eval_every: int = 25_000
    eval_tasks: int = 24
    checkpoint_every: int = 50_000
    env: EnvConfig = EnvConfig()
    tasks: TaskDistribution = TaskDistribution()
    eval_distribution: TaskDistribution | None = None  # None: ``held_out(tasks)``

    def __post_init__(self) -> None:
        if self.eval_distribution is None:
            object.__setattr__(self, "eval_distribution", held_out(self.tasks))
        for name in (
            "steps",
            "envs",
            "hidden",
            "n_steps",
            "batch_size",
            "epochs",
            "eval_every",
            "eval_tasks",
            "checkpoint_every",
            "imitation_epochs",
        ):
            if getattr(self, name) < 1:
                raise InputError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.imitation_episodes < 0:
            raise InputError("imitation_episodes", f"must be >= 0, got {self.imitation_episodes}")
        if self.dagger_rounds < 0:
            raise InputError("dagger_rounds", f"must be >= 0, got {self.dagger_rounds}")
        if self.teacher not in TEACHERS:
            raise InputError("teacher", f"must be one of {', '.join(TEACHERS)}, got {self.teacher!r}")


TEACHERS = ("rule", "plan", "best")
"""The warm start's teachers: the greedy rule over options; cost_greedy's plan's form per table
with the rule's devices (``imitation.PlanTeacher``: TorchRec's estimator, where cost_greedy's
spread variants and option search choose forms the rule does not); per task the better of the
two (``imitation.BestTeacher``)."""

EXACT_MODEL_STEPS = 196_608
"""PPO's gain on the clone goes on to about 200,000 steps and no further (docs/decisions.md, 77)."""
EXACT_MODEL_TOPOLOGIES = (*TaskDistribution().topologies, (4, 8), (8, 8), (16, 8))
"""Under an exact model the training's clusters reach 128 devices: there cost_greedy spreads
tables over 32-128 devices, forms a policy trained on 16 at most never saw (docs/decisions.md, 76)."""
EXACT_MODEL_SLOTS = 80  # a 16 x 8 cluster offers up to 72 options per table


def recipe(cost_model: CostModel, **given: object) -> TrainConfig:
    """The shipped run's settings for ``cost_model``, with ``given`` on top. A learned model's is
    ``TrainConfig()``. An exact one's (TorchRec's estimator, ``is_exact``), where cost_greedy
    spreads and replicates cheap tables too: every table offered its spread forms, clusters up to
    16 x 8, a clone of the better of the greedy rule and cost_greedy's forms per task
    (``BestTeacher``, 150 episodes, 60 epochs, 2 DAgger rounds), 196,608 PPO steps scored every
    16,384 (docs/decisions.md, 76, 77)."""
    if not is_exact(getattr(cost_model, "compute", cost_model)):
        return TrainConfig(**given)  # type: ignore[arg-type]
    exact: dict[str, object] = dict(
        teacher="best",
        imitation_episodes=150,
        imitation_epochs=60,
        dagger_rounds=2,
        steps=EXACT_MODEL_STEPS,
        eval_every=16_384,
        env=EnvConfig(spread_every_table=True, slots=EXACT_MODEL_SLOTS),
        tasks=TaskDistribution(topologies=EXACT_MODEL_TOPOLOGIES),
    )
    return TrainConfig(**{**exact, **given})  # type: ignore[arg-type]


HELD_OUT_MIN_TABLES = 40
HELD_OUT_MIN_DEVICES = 4


def held_out(tasks: TaskDistribution) -> TaskDistribution:
    """The evaluation's tasks for training on ``tasks``: its pool's test tables (never trained
    on), its table counts of at least ``HELD_OUT_MIN_TABLES`` and its clusters of at least
    ``HELD_OUT_MIN_DEVICES`` devices (all of them where none is that large): the sizes where
    plans differ."""
    counts = tuple(n for n in tasks.num_tables if n >= HELD_OUT_MIN_TABLES) or tasks.num_tables
    clusters = tuple(t for t in tasks.topologies if t[0] * t[1] >= HELD_OUT_MIN_DEVICES) or tasks.topologies
    return replace(tasks, split="test", num_tables=counts, topologies=clusters)


def eval_tasks(distribution: TaskDistribution, count: int, seed: int) -> list[Task]:
    rng = np.random.default_rng(seed)
    return [distribution.sample(rng) for _ in range(count)]


def plan_max(
    task: Task,
    choose: Choose,
    cost_model: CostModel,
    communication: CommunicationModel | None,
    env: EnvConfig = EnvConfig(),
) -> float:
    """The predicted max of ``choose``'s plan of ``task``, over ``env``'s options."""
    state = begin(task, cost_model, communication, env.set_size_headroom, env.spread_every_table)
    return float(rollout(state, choose).loads.max())


def teacher_maxima(
    tasks: list[Task], cost_model: CostModel, communication: CommunicationModel | None, env: EnvConfig = EnvConfig()
) -> tuple[list[Task], list[float]]:
    """The tasks the teacher (``expert_choice``) plans, and its predicted max on each: the
    evaluation's yardstick (a task where it runs into a dead end is left out)."""
    kept: list[tuple[Task, float]] = []
    for task in tasks:
        try:
            kept.append((task, plan_max(task, expert_choice, cost_model, communication, env)))
        except PlannerError:
            continue
    return [t for t, _ in kept], [m for _, m in kept]


def ratio_to_teacher(
    policy: OptionPolicy,
    tasks: list[Task],
    teacher: list[float],
    cost_model: CostModel,
    communication: CommunicationModel | None,
    env: EnvConfig = EnvConfig(),
) -> float:
    """Geometric mean over tasks of the policy's argmax plan's predicted max / the teacher's:
    below 1, the policy shards better than the rule it was cloned from (inf at a dead end)."""
    logs = []
    for task, yardstick in zip(tasks, teacher):
        try:
            agent = plan_max(task, argmax_choice(policy), cost_model, communication, env)
        except PlannerError:
            return math.inf
        logs.append(math.log(agent / yardstick))
    return math.exp(float(np.mean(logs)))


def train_policy(
    cost_model: CostModel,
    out: Path,
    config: TrainConfig,
    profile: str,
    communication: CommunicationModel | None = None,
    resume: bool = False,
    command: str = "",
    progress_bar: bool = True,
    log: Callable[[str], None] = print,
    fresh: bool = False,
) -> OptionPolicy:
    """Train (or, with ``resume``, continue from the latest checkpoint in ``out``) and return the
    best policy found, saved as ``out/policy.pt``. A previous run in ``out`` is never lost by
    accident: without ``resume`` it is an ``InputError`` unless ``fresh`` (discard it); a
    resumed run must have the settings it was started with (but ``steps``, the target)."""
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = sorted((out / CHECKPOINTS).glob("ppo_*_steps.zip"), key=lambda p: int(p.stem.split("_")[1]))
    recorded = json.loads((out / STATE_FILE).read_text()) if (out / STATE_FILE).exists() else {}
    _check_previous_run(out, checkpoints, recorded, config, resume, fresh)
    resumed = resume and bool(checkpoints)
    env = _environments(cost_model, config, communication)  # after the checks: a refused run starts none
    if resumed:
        model = MaskablePPO.load(checkpoints[-1], env=env, device="cpu")
        log(f"resuming from {checkpoints[-1]} at {model.num_timesteps:,} steps")
    else:
        if resume:
            log("no checkpoint to resume from: starting afresh")
        _forget_previous_run(out, checkpoints)
        model = _new_ppo(env, config, _tensorboard_dir(out, log))
    judge = _Judge(config, cost_model, communication)
    keeper = BestKeeper(out, config, profile, command, judge, model, model_identity(cost_model) or ("", ""))
    if resumed:
        keeper.restore(recorded)
    else:  # the settings first, so that a run killed before its first evaluation resumes checked
        keeper.record(best_steps=True)
    if not resumed and config.imitation_episodes:
        _warm_start(model, keeper, config, _demo_env(cost_model, config, communication), log)
    _learn(model, keeper, config, out, resume, progress_bar, log)
    env.close()
    return OptionPolicy.load(out / POLICY_FILE)


def _check_previous_run(
    out: Path, checkpoints: list[Path], recorded: dict, config: TrainConfig, resume: bool, fresh: bool
) -> None:
    """``InputError`` where a resumed run's settings changed, or a new run would lose a previous one."""
    if resume and checkpoints:
        _same_settings(recorded.get("config"), config, out / STATE_FILE)
    elif not resume and not fresh and (checkpoints or (out / EVAL_LOG).exists()):
        raise InputError(
            "--fresh",
            f"{out} holds a previous run ({len(checkpoints)} checkpoints"
            + (f", the latest at {checkpoints[-1].stem.split('_')[1]} steps" if checkpoints else "")
            + ")",
            "pass --resume to continue it, --fresh to discard it and train anew, or train into a copy of the profile",
        )


def _environments(cost_model: CostModel, config: TrainConfig, communication: CommunicationModel | None):
    """``config.envs`` seeded environments, stepped in this process or (``subprocess``) in their own."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    return make_vec_env(
        lambda: ShardingEnv(cost_model, config.tasks, config.env, communication),
        n_envs=config.envs,
        seed=config.seed,
        vec_env_cls=SubprocVecEnv if config.subprocess else DummyVecEnv,
    )


def _demo_env(cost_model: CostModel, config: TrainConfig, communication: CommunicationModel | None) -> ShardingEnv:
    return ShardingEnv(cost_model, config.tasks, config.env, communication)


def _new_ppo(env, config: TrainConfig, tensorboard: str | None) -> MaskablePPO:
    """An untrained MaskablePPO with the option-scoring policy and ``config``'s settings."""
    return MaskablePPO(
        OptionScoringPolicy,
        env,
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        ent_coef=config.ent_coef,
        seed=config.seed,
        policy_kwargs={"hidden": config.hidden},
        tensorboard_log=tensorboard,
        device="cpu",
        verbose=0,
    )


class _Judge:
    """The held-out tasks the policy is scored on, and the teacher's predicted max on each."""

    def __init__(self, config: TrainConfig, cost_model: CostModel, communication: CommunicationModel | None) -> None:
        assert config.eval_distribution is not None  # set by __post_init__
        drawn = eval_tasks(config.eval_distribution, config.eval_tasks, config.seed + 1)
        self.env = config.env
        self.tasks, self.teacher = teacher_maxima(drawn, cost_model, communication, self.env)
        self.cost_model, self.communication = cost_model, communication

    def ratio(self, policy: OptionPolicy) -> float:
        """The policy's argmax plans' predicted max over the teacher's (``ratio_to_teacher``)."""
        return ratio_to_teacher(policy, self.tasks, self.teacher, self.cost_model, self.communication, self.env)


class BestKeeper:
    """Scores the actor on the held-out tasks and keeps the best as ``out/policy.pt`` (the clone's
    as ``warm_start.pt``); appends every score to the evaluation log and records the run's state
    (settings, best, history) in ``training.json``, which a resumed run restores."""

    def __init__(
        self,
        out: Path,
        config: TrainConfig,
        profile: str,
        command: str,
        judge: _Judge,
        model: MaskablePPO,
        trained_against: tuple[str, str] = ("", ""),
    ) -> None:
        self.out, self.config, self.profile, self.command = out, config, profile, command
        self.trained_against = trained_against  # (cost model, compute device): ``model_identity``
        self.judge, self.model = judge, model
        self.best = math.inf
        self.history: list[tuple[int, float]] = []
        self.warm: float | None = None

    def restore(self, recorded: dict) -> None:
        """A resumed run's best score, history and warm start's score, from its ``training.json``."""
        self.best = math.inf if recorded.get("best_ratio") is None else recorded["best_ratio"]
        self.history = [tuple(h) for h in recorded.get("history", [])]  # type: ignore[misc]
        self.warm = recorded.get("warm_start_ratio")

    def record(self, best_steps: bool = False) -> None:
        """``training.json``: the settings, the best score and (unless ``best_steps``, the first
        record of a run) the history and the warm start's score."""
        state: dict = {"best_ratio": None if self.best == math.inf else self.best}
        if best_steps:
            state["best_steps"] = None
        state["config"] = _plain(asdict(self.config))
        if not best_steps:
            state.update(history=self.history, warm_start_ratio=self.warm)
        (self.out / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")

    def info(self, steps: int, ratio: float | None) -> PolicyInfo:
        env = self.config.env
        return PolicyInfo(
            self.profile,
            self.config.hidden,
            env.slots,
            env.reward.value,
            env.set_size_headroom,
            steps,
            self.command,
            ratio,
            self.warm,
            tuple(self.history),
            env.dropped,
            *self.trained_against,
            env.spread_every_table,
        )

    def evaluate(self, steps: int, warm_start: bool = False) -> float:
        """Score the current actor on the held-out tasks; keep it as policy.pt if it is the best
        (``warm_start``: the clone's score, before PPO)."""
        assert isinstance(self.model.policy.mlp_extractor, OptionScorerNet)
        policy = OptionPolicy.from_net(self.model.policy.mlp_extractor, self.info(steps, None))
        ratio = self.judge.ratio(policy)
        if warm_start:
            self.warm = ratio
            OptionPolicy(policy.layers, self.info(steps, ratio)).save(self.out / WARM_START_FILE)
        self.history.append((steps, ratio))
        self._log(steps, ratio)
        if ratio < self.best:
            self.best = ratio
            OptionPolicy(policy.layers, self.info(steps, ratio)).save(self.out / POLICY_FILE)
        else:  # the kept policy's record gains this evaluation too
            kept = OptionPolicy.load(self.out / POLICY_FILE)
            OptionPolicy(kept.layers, replace(kept.info, history=tuple(self.history))).save(self.out / POLICY_FILE)
        self.record()
        return ratio

    def _log(self, steps: int, ratio: float) -> None:
        new_log = not (self.out / EVAL_LOG).exists()
        with open(self.out / EVAL_LOG, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new_log:
                writer.writerow(["steps", "ratio_to_teacher", "best"])
            writer.writerow([steps, f"{ratio:.5f}", int(ratio < self.best)])


class KeepBest(BaseCallback):
    """Every ``every`` steps of PPO, the keeper scores the actor (and logs it to TensorBoard)."""

    def __init__(self, keeper: BestKeeper, every: int) -> None:
        super().__init__()
        self.keeper, self.every = keeper, every
        self.next_eval = keeper.model.num_timesteps + every

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self.next_eval += self.every
            self.evaluate()
        return True

    def evaluate(self) -> None:
        self.logger.record("eval/ratio_to_teacher", self.keeper.evaluate(self.num_timesteps))


def _warm_start(
    model: MaskablePPO, keeper: BestKeeper, config: TrainConfig, demo_env: ShardingEnv, log: Callable[[str], None]
) -> None:
    """Clone the greedy rule over options into the actor, then DAgger: the clone's own episodes,
    labelled by the teacher, cloned again; the clone is scored as the warm start."""
    plan = config.teacher != "rule"  # its steps weigh their stakes: few forms decide the max
    if config.teacher == "best":  # its choice per task, cost_greedy's plan most of it, on every core first
        rounds = range(config.dagger_rounds + 1)
        seeds = [_demo_seed(config, r) + e for r in rounds for e in range(config.imitation_episodes)]
        make = functools.partial(_demo_env, demo_env.cost_model, config, demo_env.communication)
        expert: Expert = BestTeacher(prepared_forms(make, seeds, len(os.sched_getaffinity(0))))
    else:
        expert = teacher if config.teacher == "rule" else PlanTeacher()
    taught = demonstrations(demo_env, config.imitation_episodes, _demo_seed(config, 0), expert, weigh=plan)
    assert isinstance(model.policy, OptionScoringPolicy)
    agreement = clone(model.policy, taught, config.imitation_epochs, seed=config.seed)
    for round_ in range(1, config.dagger_rounds + 1):
        follow = argmax_follower(model.policy)
        own = demonstrations(
            demo_env, config.imitation_episodes, _demo_seed(config, round_), expert, follow=follow, weigh=plan
        )
        taught = joined(taught, own)
        agreement = clone(model.policy, taught, config.imitation_epochs, seed=config.seed + round_)
    ratio = keeper.evaluate(0, warm_start=True)
    log(
        f"cloned the {config.teacher} teacher "
        f"({len(taught):,} steps of {config.imitation_episodes} episodes, "
        f"{config.dagger_rounds} DAgger rounds): "
        f"the actor picks its option on {agreement:.1%} of them; {ratio:.4f}x its plans on held-out tasks"
    )


def _demo_seed(config: TrainConfig, round_: int) -> int:
    """The first episode's seed of the warm start's round ``round_`` (0: the teacher's own episodes)."""
    return config.seed + 2 + 100_000 * round_


def _learn(
    model: MaskablePPO,
    keeper: BestKeeper,
    config: TrainConfig,
    out: Path,
    resume: bool,
    progress_bar: bool,
    log: Callable[[str], None],
) -> None:
    """PPO up to ``config.steps``, checkpointed and scored as it goes, and scored once more at the end."""
    remaining = config.steps - model.num_timesteps
    if remaining <= 0:
        log(
            f"the run is at {model.num_timesteps:,} steps, --steps {config.steps:,}: nothing to train "
            "(raise --steps to train on)"
        )
        return
    keep_best = KeepBest(keeper, config.eval_every)
    checkpoint = CheckpointCallback(
        max(config.checkpoint_every // config.envs, 1), str(out / CHECKPOINTS), name_prefix="ppo"
    )
    model.learn(
        remaining,
        callback=CallbackList([checkpoint, keep_best]),
        reset_num_timesteps=not resume,
        progress_bar=progress_bar,
        tb_log_name="ppo",
    )
    keep_best.evaluate()


RESUMABLE_CHANGES = ("steps", "subprocess", "checkpoint_every")
"""What a resumed run may set anew: its target, how its environments step, how often it saves."""


def _same_settings(recorded: dict | None, config: TrainConfig, where: Path) -> None:
    """Raise ``InputError`` naming each setting a resumed run changes (it would not match its
    checkpoints, e.g. the observation size of another ``slots``, or score against other tasks)."""
    if recorded is None:
        return  # a run from before settings were recorded
    now, defaults = _plain(asdict(config)), _plain(asdict(TrainConfig()))
    then = {**{k: v for k, v in defaults.items() if k not in recorded}, **recorded}  # settings added since: defaults
    changed = [
        f"{key}: {then.get(key)!r} then, {now[key]!r} now"
        for key in now
        if key not in RESUMABLE_CHANGES and then.get(key) != now[key]
    ]
    if changed:
        raise InputError(
            "--resume",
            f"the run in {where.parent} was started with other settings ({'; '.join(changed)})",
            "resume with the options it was started with (its training.json), or pass --fresh to discard it",
        )


def _forget_previous_run(out: Path, checkpoints: list[Path]) -> None:
    """A fresh run starts from nothing: an earlier run's checkpoints (a later ``--resume`` would
    continue them, maybe trained on another cost model), evaluation log and best score go."""
    for stale in [*checkpoints, out / EVAL_LOG, out / STATE_FILE, out / WARM_START_FILE]:
        stale.unlink(missing_ok=True)


def _tensorboard_dir(out: Path, log: Callable[[str], None]) -> str | None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        log("tensorboard is not installed (pip install 'autoshard[train]'): training without its logs")
        return None
    return str(out / "tensorboard")


def _plain(value):
    """Enums to their values, tuples to lists: JSON for the training record."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.value if isinstance(value, Reward) else value
