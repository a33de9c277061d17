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
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from autoshard.core.communication import CommunicationModel
from autoshard.core.errors import InputError, PlannerError
from autoshard.core.task import Task
from autoshard.core.types import CostModel
from autoshard.rl.env import EnvConfig, Reward, ShardingEnv, priced, start
from autoshard.rl.imitation import argmax_follower, clone, demonstrations, joined
from autoshard.rl.options import expert_choice
from autoshard.rl.policy import (
    POLICY_FILE,
    OptionPolicy,
    OptionScorerNet,
    OptionScoringPolicy,
    PolicyInfo,
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


def plan_max(task: Task, choose: Choose, cost_model: CostModel, communication: CommunicationModel | None) -> float:
    """The predicted max of ``choose``'s plan of ``task``."""
    return float(rollout(start(task, priced(task, cost_model, communication)), choose).loads.max())


def teacher_maxima(
    tasks: list[Task], cost_model: CostModel, communication: CommunicationModel | None
) -> tuple[list[Task], list[float]]:
    """The tasks the teacher (``expert_choice``) plans, and its predicted max on each: the
    evaluation's yardstick (a task where it runs into a dead end is left out)."""
    kept: list[tuple[Task, float]] = []
    for task in tasks:
        try:
            kept.append((task, plan_max(task, expert_choice, cost_model, communication)))
        except PlannerError:
            continue
    return [t for t, _ in kept], [m for _, m in kept]


def ratio_to_teacher(
    policy: OptionPolicy,
    tasks: list[Task],
    teacher: list[float],
    cost_model: CostModel,
    communication: CommunicationModel | None,
) -> float:
    """Geometric mean over tasks of the policy's argmax plan's predicted max / the teacher's:
    below 1, the policy shards better than the rule it was cloned from (inf at a dead end)."""
    logs = []
    for task, yardstick in zip(tasks, teacher):
        try:
            agent = plan_max(task, argmax_choice(policy), cost_model, communication)
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
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        CallbackList,
        CheckpointCallback,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    out.mkdir(parents=True, exist_ok=True)
    checkpoints = sorted((out / CHECKPOINTS).glob("ppo_*_steps.zip"), key=lambda p: int(p.stem.split("_")[1]))
    state_path = out / STATE_FILE
    recorded = json.loads(state_path.read_text()) if state_path.exists() else {}
    if resume and checkpoints:
        _same_settings(recorded.get("config"), config, state_path)
    elif not resume and not fresh and (checkpoints or (out / EVAL_LOG).exists()):
        raise InputError(
            "--fresh",
            f"{out} holds a previous run ({len(checkpoints)} checkpoints"
            + (f", the latest at {checkpoints[-1].stem.split('_')[1]} steps" if checkpoints else "")
            + ")",
            "pass --resume to continue it, --fresh to discard it and train anew, or another --work-dir",
        )
    resumed = resume and bool(checkpoints)
    # after the checks: a refused run starts no environment processes
    env = make_vec_env(
        lambda: ShardingEnv(cost_model, config.tasks, config.env, communication),
        n_envs=config.envs,
        seed=config.seed,
        vec_env_cls=SubprocVecEnv if config.subprocess else DummyVecEnv,
    )
    if resumed:
        model = MaskablePPO.load(checkpoints[-1], env=env, device="cpu")
        log(f"resuming from {checkpoints[-1]} at {model.num_timesteps:,} steps")
    else:
        if resume:
            log("no checkpoint to resume from: starting afresh")
        _forget_previous_run(out, checkpoints)
        model = MaskablePPO(
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
            tensorboard_log=_tensorboard_dir(out, log),
            device="cpu",
            verbose=0,
        )
    assert config.eval_distribution is not None  # set by __post_init__
    tasks = eval_tasks(config.eval_distribution, config.eval_tasks, config.seed + 1)
    tasks, teacher = teacher_maxima(tasks, cost_model, communication)
    recorded_best = recorded.get("best_ratio") if resumed else None
    best: float = math.inf if recorded_best is None else recorded_best
    history: list[tuple[int, float]] = [tuple(h) for h in recorded.get("history", [])] if resumed else []
    warm: list[float | None] = [recorded.get("warm_start_ratio") if resumed else None]
    if not resumed:  # the settings first, so that a run killed before its first evaluation resumes checked
        state_path.write_text(
            json.dumps({"best_ratio": None, "best_steps": None, "config": _plain(asdict(config))}, indent=1) + "\n"
        )

    def record() -> None:
        state = {"best_ratio": None if best == math.inf else best, "config": _plain(asdict(config))}
        state.update(history=history, warm_start_ratio=warm[0])
        state_path.write_text(json.dumps(state, indent=1) + "\n")

    def info(steps: int, ratio: float | None) -> PolicyInfo:
        return PolicyInfo(
            profile,
            config.hidden,
            config.env.slots,
            config.env.reward.value,
            config.env.set_size_headroom,
            steps,
            command,
            ratio,
            warm[0],
            tuple(history),
            config.env.dropped,
        )

    def evaluate(steps: int, warm_start: bool = False) -> float:
        """Score the current actor on the held-out tasks; keep it as policy.pt if it is the best
        (``warm_start``: the clone's score, before PPO)."""
        nonlocal best
        assert isinstance(model.policy.mlp_extractor, OptionScorerNet)
        policy = OptionPolicy.from_net(model.policy.mlp_extractor, info(steps, None))
        ratio = ratio_to_teacher(policy, tasks, teacher, cost_model, communication)
        if warm_start:
            warm[0] = ratio
            OptionPolicy(policy.layers, info(steps, ratio)).save(out / WARM_START_FILE)
        history.append((steps, ratio))
        new_log = not (out / EVAL_LOG).exists()
        with open(out / EVAL_LOG, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new_log:
                writer.writerow(["steps", "ratio_to_teacher", "best"])
            writer.writerow([steps, f"{ratio:.5f}", int(ratio < best)])
        if ratio < best:
            best = ratio
            OptionPolicy(policy.layers, info(steps, ratio)).save(out / POLICY_FILE)
        else:  # the kept policy's record gains this evaluation too
            kept = OptionPolicy.load(out / POLICY_FILE)
            OptionPolicy(kept.layers, replace(kept.info, history=tuple(history))).save(out / POLICY_FILE)
        record()
        return ratio

    class KeepBest(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = model.num_timesteps + config.eval_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += config.eval_every
                self.evaluate()
            return True

        def evaluate(self) -> None:
            self.logger.record("eval/ratio_to_teacher", evaluate(self.num_timesteps))

    if not resumed and config.imitation_episodes:
        demo_env = ShardingEnv(cost_model, config.tasks, config.env, communication)
        taught = demonstrations(demo_env, config.imitation_episodes, config.seed + 2)
        assert isinstance(model.policy, OptionScoringPolicy)
        agreement = clone(model.policy, taught, config.imitation_epochs, seed=config.seed)
        for round_ in range(1, config.dagger_rounds + 1):  # the clone's own episodes, labelled by the teacher
            seed = config.seed + 2 + 100_000 * round_
            own = demonstrations(demo_env, config.imitation_episodes, seed, follow=argmax_follower(model.policy))
            taught = joined(taught, own)
            agreement = clone(model.policy, taught, config.imitation_epochs, seed=config.seed + round_)
        ratio = evaluate(0, warm_start=True)
        log(
            f"cloned the greedy rule over options ({len(taught):,} steps of {config.imitation_episodes} episodes, "
            f"{config.dagger_rounds} DAgger rounds): "
            f"the actor picks its option on {agreement:.1%} of them; {ratio:.4f}x its plans on held-out tasks"
        )

    keep_best = KeepBest()
    callbacks = CallbackList(
        [
            CheckpointCallback(
                max(config.checkpoint_every // config.envs, 1), str(out / CHECKPOINTS), name_prefix="ppo"
            ),
            keep_best,
        ]
    )
    remaining = config.steps - model.num_timesteps
    if remaining <= 0:
        log(
            f"the run is at {model.num_timesteps:,} steps, --steps {config.steps:,}: nothing to train "
            "(raise --steps to train on)"
        )
    if remaining > 0:
        model.learn(
            remaining, callback=callbacks, reset_num_timesteps=not resume, progress_bar=progress_bar, tb_log_name="ppo"
        )
        keep_best.evaluate()
    env.close()
    return OptionPolicy.load(out / POLICY_FILE)


RESUMABLE_CHANGES = ("steps", "subprocess", "checkpoint_every")
"""What a resumed run may set anew: its target, how its environments step, how often it saves."""


def _same_settings(recorded: dict | None, config: TrainConfig, where: Path) -> None:
    """Raise ``InputError`` naming each setting a resumed run changes (it would not match its
    checkpoints, e.g. the observation size of another ``slots``, or score against other tasks)."""
    if recorded is None:
        return  # a run from before settings were recorded
    now = _plain(asdict(config))
    changed = [
        f"{key}: {recorded.get(key)!r} then, {now[key]!r} now"
        for key in now
        if key not in RESUMABLE_CHANGES and recorded.get(key) != now[key]
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
