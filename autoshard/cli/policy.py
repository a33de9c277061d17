"""`autoshard policy ...`: train the placement policy for a profile, and evaluate it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from autoshard.cli.support import (
    ADVANCED,
    COLUMN_SPLIT_HELP,
    DEFAULT_MODEL,
    DEPARTURE_MARGIN_HELP,
    OUTPUT,
    PLANNERS,
    console,
    friendly_errors,
    load_profile_or_none,
    one_thread,
    print_json,
)
from autoshard.core.errors import InputError, ModelError
from autoshard.core.synthetic import PoolConfig
from autoshard.rl.tasks import TaskDistribution

app = typer.Typer(
    help="The RL placement policy: train it against a profile's cost model, evaluate it.", no_args_is_help=True
)
TRAINING_DIR = "policy_training"
TRAIN_TABLES_DEFAULT = ",".join(str(n) for n in TaskDistribution().num_tables)
TRAIN_TOPOLOGIES_DEFAULT = ",".join(f"{h}x{d}" for h, d in TaskDistribution().topologies)
# help panels beside support's
PROFILE, RUN, POLICY, TASKS, TRAINING, EVALUATION, GRID = (
    "Profile",
    "Run",
    "Policy",
    "Training tasks",
    "Training",
    "Checkpoints and evaluation",
    "Grid",
)


def _profile(path: Path):
    profile, why = load_profile_or_none(path, "--profile")
    if profile is None:
        raise ModelError(f"{why}: train a cost model first (`autoshard cost train --out {path}`)")
    return profile


@app.command("train")
@friendly_errors
def train_cmd(
    profile: Annotated[
        Path,
        typer.Option(
            help="Profile folder: its cost model is the simulator; policy.pt goes here.", rich_help_panel=PROFILE
        ),
    ] = DEFAULT_MODEL,
    steps: Annotated[
        int,
        typer.Option(
            min=1,
            help="Environment steps in all (PPO runs whole rollouts of 1,024 "
            "steps per environment, so it rounds up to them).",
            rich_help_panel=RUN,
        ),
    ] = 600_000,
    resume: Annotated[
        bool, typer.Option(help="Continue from the latest checkpoint in the work dir.", rich_help_panel=RUN)
    ] = False,
    fresh: Annotated[
        bool,
        typer.Option(
            help="Discard a previous run in the work dir and replace the profile's "
            "policy.pt (without it, either is refused).",
            rich_help_panel=RUN,
        ),
    ] = False,
    work_dir: Annotated[
        Path | None,
        typer.Option(
            help=f"Checkpoints, TensorBoard logs, eval log (default PROFILE/{TRAINING_DIR}).", rich_help_panel=RUN
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.", rich_help_panel=RUN)] = True,
    imitation_episodes: Annotated[
        int,
        typer.Option(
            min=0,
            help="Episodes of the greedy rule over options cloned before PPO (0: start from a random policy).",
            rich_help_panel=POLICY,
        ),
    ] = 300,
    dagger_rounds: Annotated[
        int,
        typer.Option(
            min=0,
            help="Rounds of the clone's own episodes labelled by the rule and cloned again (DAgger).",
            rich_help_panel=POLICY,
        ),
    ] = 2,
    slots: Annotated[
        int,
        typer.Option(
            min=2,
            help="Option rows in the observation while training (options past them are not offered).",
            rich_help_panel=POLICY,
        ),
    ] = 48,
    tables: Annotated[
        str,
        typer.Option(
            help="Table counts of the training tasks, comma-separated (each episode draws one).",
            rich_help_panel=TASKS,
        ),
    ] = TRAIN_TABLES_DEFAULT,
    topologies: Annotated[
        str,
        typer.Option(
            help="Clusters of the training tasks, HOSTSxDEVICES_PER_HOST, comma-separated.", rich_help_panel=TASKS
        ),
    ] = TRAIN_TOPOLOGIES_DEFAULT,
    pool_size: Annotated[
        int,
        typer.Option(
            min=10,
            help="Synthetic tables in the pool the tasks draw from (80% train, 20% held out for evaluation).",
            rich_help_panel=TASKS,
        ),
    ] = PoolConfig().size,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of the tasks, the environments and PPO.", rich_help_panel=TRAINING)
    ] = 0,
    envs: Annotated[int, typer.Option(min=1, help="Environments stepped together.", rich_help_panel=TRAINING)] = 4,
    subprocess: Annotated[
        bool,
        typer.Option(help="Step the environments in subprocesses (SubprocVecEnv).", rich_help_panel=TRAINING),
    ] = False,
    reward: Annotated[
        str, typer.Option(help="'step' or 'terminal' (see ShardingEnv).", rich_help_panel=TRAINING)
    ] = "step",
    learning_rate: Annotated[
        float, typer.Option(min=0.0, help="PPO's learning rate.", rich_help_panel=TRAINING)
    ] = 5e-5,
    ent_coef: Annotated[float, typer.Option(min=0.0, help="PPO's entropy bonus.", rich_help_panel=TRAINING)] = 0.0,
    checkpoint_every: Annotated[
        int, typer.Option(min=1, help="Steps between checkpoints.", rich_help_panel=EVALUATION)
    ] = 50_000,
    eval_every: Annotated[
        int, typer.Option(min=1, help="Steps between evaluations on held-out tasks.", rich_help_panel=EVALUATION)
    ] = 25_000,
    eval_tasks: Annotated[
        int, typer.Option(min=1, help="Held-out tasks per evaluation.", rich_help_panel=EVALUATION)
    ] = 24,
) -> None:
    """Train MaskablePPO against the profile's cost model; the best policy on held-out tasks
    becomes PROFILE/policy.pt."""
    from autoshard.rl.env import EnvConfig, Reward
    from autoshard.rl.policy import POLICY_FILE
    from autoshard.rl.train import TrainConfig, train_policy

    try:
        reward_kind = Reward(reward)
    except ValueError:
        raise InputError(
            "reward", f"unknown reward {reward!r}", f"use one of {', '.join(r.value for r in Reward)}"
        ) from None
    if resume and fresh:
        raise InputError("--fresh", "cannot both resume a run and discard it", "pass --resume or --fresh, not both")
    distribution = TaskDistribution(
        pool=PoolConfig(size=pool_size),
        num_tables=_counts(tables, "--tables", TRAIN_TABLES_DEFAULT),
        topologies=_topologies(topologies),
    )
    loaded = _profile(profile)
    one_thread()
    folder = profile if profile.is_dir() else profile.parent
    work = work_dir if work_dir is not None else folder / TRAINING_DIR
    if (folder / POLICY_FILE).exists() and not (resume or fresh):
        raise InputError(
            "--fresh",
            f"{folder / POLICY_FILE} exists: training would replace it",
            "pass --fresh to replace it, --resume to continue its run, or train into a copy of the profile",
        )
    config = TrainConfig(
        tasks=distribution,
        steps=steps,
        seed=seed,
        envs=envs,
        subprocess=subprocess,
        checkpoint_every=checkpoint_every,
        eval_every=eval_every,
        eval_tasks=eval_tasks,
        env=EnvConfig(slots=slots, reward=reward_kind),
        imitation_episodes=imitation_episodes,
        dagger_rounds=dagger_rounds,
        learning_rate=learning_rate,
        ent_coef=ent_coef,
    )
    command = (
        f"autoshard policy train --profile {shlex.quote(str(profile))} --steps {steps} --seed {seed} "
        f"--envs {envs} --reward {reward} --slots {slots} "
        f"--tables {tables} --topologies {topologies} --pool-size {pool_size} "
        f"--imitation-episodes {imitation_episodes} --dagger-rounds {dagger_rounds} "
        f"--learning-rate {learning_rate:g} --ent-coef {ent_coef:g}" + (" --subprocess" if subprocess else "")
    )
    policy = train_policy(
        loaded.model,
        work,
        config,
        loaded.device.get("id", loaded.profile),
        loaded.communication,
        resume,
        command,
        progress_bar=progress,
        log=lambda m: console.print(m, highlight=False),
        fresh=fresh,
    )
    policy.save(folder / POLICY_FILE)
    warm = policy.info.warm_start_ratio
    console.print(
        f"wrote {folder / POLICY_FILE}: best at {policy.info.steps:,} PPO steps, its argmax plans "
        f"{policy.info.eval_ratio:.4f}x the greedy rule's predicted max on held-out tasks"
        + (f" (the warm start's: {warm:.4f}x)" if warm is not None else ""),
        highlight=False,
    )


TOPOLOGIES_DEFAULT = "1x4,1x8,2x8,4x8,16x8"


@app.command("eval")
@friendly_errors
def eval_cmd(
    profile: Annotated[
        Path, typer.Option(help="Profile folder with cost_model.pt and policy.pt.", rich_help_panel=PROFILE)
    ] = DEFAULT_MODEL,
    tables: Annotated[
        str, typer.Option(help="Comma-separated table counts.", rich_help_panel=GRID)
    ] = "20,80,200,400,1000",
    topologies: Annotated[
        str,
        typer.Option(
            help="Comma-separated clusters, HOSTSxDEVICES_PER_HOST (every second task is a giant one: "
            "memory without room for the largest table whole).",
            rich_help_panel=GRID,
        ),
    ] = TOPOLOGIES_DEFAULT,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of the grid's tasks and of the planners.", rich_help_panel=GRID)
    ] = 0,
    communication: Annotated[
        bool, typer.Option(help="Add each device's all-to-all to its cost.", rich_help_panel=PLANNERS)
    ] = True,
    column_split: Annotated[
        bool | None,
        typer.Option("--column-split/--no-column-split", help=COLUMN_SPLIT_HELP, rich_help_panel=PLANNERS),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder for grid.json, grid.md and grid.png.", rich_help_panel=OUTPUT)
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
    departure_margin: Annotated[
        float | None, typer.Option(min=0.0, max=0.99, help=DEPARTURE_MARGIN_HELP, rich_help_panel=ADVANCED)
    ] = None,
) -> None:
    """Every default planner on held-out tasks (tables x clusters, binding memory, every second
    task with tables larger than a device; tables from a pool no training saw), predicted: rl,
    rl+refine_raw and rl+refine against cost_greedy, the heuristics and a lower bound."""
    from autoshard.evaluation.grid import (
        GridConfig,
        GridReport,
        chart,
        evaluate_grid,
        grid_tasks,
        markdown,
        summarise,
    )
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import available_planners

    config = GridConfig(_counts(tables, "--tables", "20,80,200"), _topologies(topologies), seed=seed)
    loaded = _profile(profile)
    if loaded.policy is None:
        raise ModelError(
            f"no loadable policy in {profile}: train one with `autoshard policy train --profile {profile}`"
        )
    one_thread()
    context = PlannerContext(
        loaded.model,
        loaded.policy,
        seed,
        column_split,
        departure_margin=departure_margin,
    )
    names, _ = available_planners(context)
    tasks = grid_tasks(config)
    giant = [config.is_giant(i) for i in range(len(tasks))]
    rows = evaluate_grid(tasks, context, loaded.communication if communication else None, names, giant)
    summary = summarise(rows)
    report = GridReport(loaded.policy.name, config, context.split_setting, summary, tuple(rows))
    shown = [n for n in ("rl", "rl+refine_raw", "rl+refine", "cost_greedy") if n in names]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "grid.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n")
        (out / "grid.md").write_text(markdown(rows, summary, shown))
        chart(rows, shown, out / "grid.png")
    if json_out:
        print_json(report.to_dict())
    else:
        console.print(markdown(rows, summary, shown), highlight=False, markup=False)


def _counts(text: str, option: str, example: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(option, f"must be comma-separated integers, got {text!r}", f"e.g. {example}") from None
    if not counts or min(counts) < 1:
        raise InputError(option, f"must be integers >= 1, got {text!r}", f"e.g. {example}")
    return counts


def _topologies(text: str) -> tuple[tuple[int, int], ...]:
    """``--topologies``: comma-separated HOSTSxDEVICES_PER_HOST pairs, each at least 1x1."""
    fix = f"give HOSTSxDEVICES_PER_HOST pairs, e.g. {TOPOLOGIES_DEFAULT}"
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        hosts, sep, per_host = part.lower().partition("x")
        try:
            pair = (int(hosts), int(per_host))
        except ValueError:
            pair = (0, 0)
        if not sep or min(pair) < 1:
            raise InputError("--topologies", f"{part!r} is not HOSTSxDEVICES_PER_HOST (integers >= 1)", fix)
        found.append(pair)
    if not found:
        raise InputError("--topologies", f"names no cluster, got {text!r}", fix)
    return tuple(found)
