"""`autoshard policy ...`: train the placement policy for a profile, and evaluate it."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autoshard.cli.support import OUTPUT, console, friendly_errors, print_json
from autoshard.core.errors import InputError, ModelError
from autoshard.profiles import DEFAULT_MODEL
from autoshard.rl.tasks import TaskDistribution

if TYPE_CHECKING:
    from collections.abc import Sequence

    from autoshard.evaluation.grid import GridReport
    from autoshard.profiles import LoadedModel
    from autoshard.rl.policy import OptionPolicy
    from autoshard.rl.train import TrainConfig

app = typer.Typer(
    help="The RL placement policy: train it against a profile's cost model, evaluate it.", no_args_is_help=True
)
TRAINING_DIR = "policy_training"
TRAIN_TABLES_DEFAULT = ",".join(str(n) for n in TaskDistribution().num_tables)
TRAIN_TOPOLOGIES_DEFAULT = ",".join(f"{h}x{d}" for h, d in TaskDistribution().topologies)
PROFILE, RUN, TASKS, TRAINING, GRID = "Profile", "Run", "Training tasks", "Training", "Grid"  # beside support's


def _profile(path: Path, compute_device: str | None) -> tuple[LoadedModel, Path]:
    """The profile ``--profile`` names (with ``--compute-device`` for ``torchrec``), and the
    folder of its ``policy.pt``."""
    from autoshard.profile_choice import TORCHREC_MODEL, torchrec_folder
    from autoshard.profiles import load_profile_or_none, policy_models_dir

    profile, why = load_profile_or_none(path, "--profile", compute_device)
    if profile is None:
        raise ModelError(f"{why}: train a cost model first (`autoshard cost train --out {path}`)")
    if str(path) == TORCHREC_MODEL:
        return profile, torchrec_folder(profile.device["device_type"], policy_models_dir())
    return profile, path if path.is_dir() else path.parent


TrainProfile = Annotated[
    Path,
    typer.Option(
        help="Profile folder: its cost model is the simulator; policy.pt goes here. Or 'torchrec': TorchRec's "
        "estimator for --compute-device (its policy goes to MODEL_DIR/torchrec/DEVICE/policy.pt).",
        rich_help_panel=PROFILE,
    ),
]
ComputeDevice = Annotated[
    str | None,
    typer.Option(
        help="With --profile torchrec: the device TorchRec's estimator prices, cuda (the default) or cpu.",
        rich_help_panel=PROFILE,
    ),
]
Steps = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Environment steps in all (PPO runs whole rollouts of 1,024 steps per environment, so it rounds up "
        "to them). Default: the shipped run's, 600,000 (196,608 under --profile torchrec).",
        rich_help_panel=RUN,
    ),
]
Resume = Annotated[
    bool, typer.Option(help=f"Continue from the latest checkpoint in PROFILE/{TRAINING_DIR}.", rich_help_panel=RUN)
]
Fresh = Annotated[
    bool,
    typer.Option(
        help="Discard a previous run and replace the profile's policy.pt (without it, either is refused).",
        rich_help_panel=RUN,
    ),
]
ShowProgress = Annotated[bool, typer.Option(help="Show a progress bar.", rich_help_panel=RUN)]
Tables = Annotated[
    str,
    typer.Option(
        help="Table counts of the training tasks, comma-separated (each episode draws one).", rich_help_panel=TASKS
    ),
]
Topologies = Annotated[
    str | None,
    typer.Option(
        help="Clusters of the training tasks, HOSTSxDEVICES_PER_HOST, comma-separated. Default: "
        f"{TRAIN_TOPOLOGIES_DEFAULT}; under --profile torchrec also 4x8,8x8,16x8.",
        rich_help_panel=TASKS,
        show_default=False,
    ),
]
Seed = Annotated[
    int, typer.Option(min=0, help="Seed of the tasks, the environments and PPO.", rich_help_panel=TRAINING)
]
Envs = Annotated[int, typer.Option(min=1, help="Environments stepped together.", rich_help_panel=TRAINING)]
Subprocess = Annotated[
    bool, typer.Option(help="Step the environments in subprocesses (SubprocVecEnv).", rich_help_panel=TRAINING)
]


@app.command("train")
@friendly_errors
def train_cmd(
    profile: TrainProfile = DEFAULT_MODEL,
    compute_device: ComputeDevice = None,
    steps: Steps = None,
    resume: Resume = False,
    fresh: Fresh = False,
    progress: ShowProgress = True,
    tables: Tables = TRAIN_TABLES_DEFAULT,
    topologies: Topologies = None,
    seed: Seed = 0,
    envs: Envs = 4,
    subprocess: Subprocess = False,
) -> None:
    """Train MaskablePPO against the profile's cost model; the best policy on held-out tasks
    becomes PROFILE/policy.pt. The other settings are the shipped policy's run for that model
    (docs/decisions.md, 42; under TorchRec's estimator, 73)."""
    if resume and fresh:
        raise InputError("--fresh", "cannot both resume a run and discard it", "pass --resume or --fresh, not both")
    from autoshard.rl.train import recipe

    loaded, folder = _profile(profile, compute_device)
    own = recipe(loaded.model).tasks  # the model's recipe's clusters, where --topologies names none
    clusters = own.topologies if topologies is None else _topologies(topologies)
    tasks = replace(own, num_tables=_counts(tables, "--tables", TRAIN_TABLES_DEFAULT), topologies=clusters)
    given = dict(tasks=tasks, seed=seed, envs=envs, subprocess=subprocess)
    config = recipe(loaded.model, **given, **({} if steps is None else {"steps": steps}))
    named = ",".join(f"{h}x{d}" for h, d in clusters)
    command = (
        f"autoshard policy train --profile {shlex.quote(str(profile))}"
        + (f" --compute-device {compute_device}" if compute_device else "")
        + f" --steps {config.steps} --seed {seed} "
        f"--envs {envs} --tables {tables} --topologies {named}" + (" --subprocess" if subprocess else "")
    )
    train_profile_policy(loaded, folder, config, command, resume=resume, fresh=fresh, progress=progress)


def train_profile_policy(
    loaded: LoadedModel,
    folder: Path,
    config: TrainConfig,
    command: str,
    resume: bool = False,
    fresh: bool = False,
    progress: bool = True,
) -> OptionPolicy:
    """Train ``loaded``'s policy (``autoshard.rl.train.train_policy``, its run in
    FOLDER/policy_training/) and save the best as FOLDER/policy.pt (``_profile``'s folder: the
    profile's, or ``torchrec_folder`` for TorchRec's estimator); an existing policy.pt is replaced
    only on ``resume`` or ``fresh``. ``policy train`` runs it with ``config`` from its options."""
    from autoshard.rl.policy import POLICY_FILE
    from autoshard.rl.train import train_policy
    from cost_model.process import one_thread

    one_thread()
    if (folder / POLICY_FILE).exists() and not (resume or fresh):
        raise InputError(
            "--fresh",
            f"{folder / POLICY_FILE} exists: training would replace it",
            "pass --fresh to replace it, --resume to continue its run, or train into a copy of the profile",
        )
    policy = train_policy(
        loaded.model,
        folder / TRAINING_DIR,
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
    return policy


TOPOLOGIES_DEFAULT = "1x4,1x8,2x8,4x8,16x8"
GRID_TABLES = "20,80,200,400,1000"
GridTopologies = Annotated[
    str,
    typer.Option(
        help="Comma-separated clusters, HOSTSxDEVICES_PER_HOST (every second task is a giant one: memory without "
        "room for the largest table whole).",
        rich_help_panel=GRID,
    ),
]


@app.command("eval")
@friendly_errors
def eval_cmd(
    profile: Annotated[
        Path, typer.Option(help="Profile folder with cost_model.pt and policy.pt.", rich_help_panel=PROFILE)
    ] = DEFAULT_MODEL,
    tables: Annotated[str, typer.Option(help="Comma-separated table counts.", rich_help_panel=GRID)] = GRID_TABLES,
    topologies: GridTopologies = TOPOLOGIES_DEFAULT,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the grid's tasks and planners.", rich_help_panel=GRID)] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Folder for grid.json, grid.md and grid.png.", rich_help_panel=OUTPUT)
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Every default planner on held-out tasks (tables x clusters, binding memory, every second
    task with tables larger than a device; tables from a pool no training saw), predicted: rl,
    rl+refine_raw and rl+refine against cost_greedy, the heuristics and a lower bound."""
    from autoshard.evaluation.grid import GridConfig, GridReport, evaluate_grid, grid_tasks, markdown, summarise
    from autoshard.planners.context import PlannerContext
    from autoshard.planning.registry import available_planners
    from cost_model.process import one_thread

    config = GridConfig(_counts(tables, "--tables", "20,80,200"), _topologies(topologies), seed=seed)
    loaded, _ = _profile(profile, None)  # torchrec: its cuda policy (the one shipped)
    if loaded.policy is None:
        raise ModelError(
            f"no loadable policy in {profile}: train one with `autoshard policy train --profile {profile}`"
        )
    one_thread()
    context = PlannerContext(loaded.model, loaded.policy, seed)
    names, _ = available_planners(context)
    tasks = grid_tasks(config)
    giant = [config.is_giant(i) for i in range(len(tasks))]
    rows = evaluate_grid(tasks, context, loaded.communication, names, giant)
    summary = summarise(rows)
    report = GridReport(loaded.policy.name, config, context.split_setting, summary, tuple(rows))
    shown = [n for n in ("rl", "rl+refine_raw", "rl+refine", "cost_greedy") if n in names]
    if out is not None:
        _write_grid(out, report, shown)
    if json_out:
        print_json(report.to_dict())
    else:
        console.print(markdown(rows, summary, shown), highlight=False, markup=False)


def _write_grid(out: Path, report: GridReport, shown: Sequence[str]) -> None:
    """``grid.json``, ``grid.md`` and ``grid.png`` of a ``policy eval`` report in ``out``."""
    from autoshard.evaluation.grid import chart, markdown

    out.mkdir(parents=True, exist_ok=True)
    (out / "grid.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    (out / "grid.md").write_text(markdown(report.tasks, report.summary, shown))
    chart(report.tasks, shown, out / "grid.png")


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
