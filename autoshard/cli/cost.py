"""`autoshard cost ...`: train the neural cost model on traces and evaluate it."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from autoshard.cli.support import ADVANCED, OUTPUT, console, friendly_errors, print_json
from autoshard.core.errors import InputError
from cost_model.fitting import ADAPT_MAX_EPOCHS, MAX_EPOCHS, FitRun, read_all

# help panels beside support's
PROFILE, TRACES, TRAINING, MEASURED = "Profile", "Traces", "Training", "Measured here"

app = typer.Typer(
    help="The neural multi-table cost model: train, adapt to a machine, evaluate, record its trained ranges.",
    no_args_is_help=True,
)
MAX_EPOCHS_HELP = "Most epochs of training (it stops earlier once the validation loss no longer falls)."


@app.command("train")
@friendly_errors
def train_cmd(
    traces: Annotated[
        list[Path],
        typer.Option(
            help="Trace file (.jsonl or .jsonl.gz); repeat it to add plan-set "
            "traces (`autoshard bench plans`) of the same profile.",
            rich_help_panel=TRACES,
        ),
    ],
    out: Annotated[
        Path, typer.Option(help="Folder for cost_model.pt, metrics.json and train_log.csv.", rich_help_panel=OUTPUT)
    ],
    tune: Annotated[
        bool,
        typer.Option(
            "--tune",
            help="Choose the network and learning rate on the validation "
            "split (a small grid, cost_model/tune.py) before saving the chosen one.",
            rich_help_panel=TRAINING,
        ),
    ] = False,
    seed: Annotated[
        int,
        typer.Option(
            min=0, help="Seed of the split (train / validation / held-out) and of training.", rich_help_panel=TRAINING
        ),
    ] = 0,
    max_epochs: Annotated[int, typer.Option(min=1, help=MAX_EPOCHS_HELP, rich_help_panel=TRAINING)] = MAX_EPOCHS,
    network: Annotated[
        str | None,
        typer.Option(
            help="Train one candidate of the tuning grid by name "
            "(cost_model/tune.py, e.g. narrow_grouped) instead of the default network.",
            rich_help_panel=ADVANCED,
        ),
    ] = None,
) -> None:
    """Train on traces (seeded, early stopping on validation) and save the checkpoint and metrics."""
    from cost_model.tune import GRID, SLOW_TO_PLAN

    candidates = {c.name: c for c in GRID + SLOW_TO_PLAN}
    if network is not None and network not in candidates:
        raise InputError("--network", f"unknown network {network!r}", f"use one of {', '.join(candidates)}")
    if network is not None and tune:
        raise InputError("--network", "--network and --tune both choose the network", "pass one of them")
    chosen = candidates.get(network) if network is not None else None
    command = "autoshard cost train " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    run = FitRun(
        seed,
        max_epochs,
        command=command,
        sources=tuple(str(t) for t in traces),
        tune=tune,
        network=chosen.network if chosen else None,
        learning_rate=chosen.learning_rate if chosen else None,
    )
    train_and_save(read_all(traces), out, run)


ProfileToAdapt = Annotated[
    Path,
    typer.Option(
        help="The profile folder to start from: its cost_model.pt is fine-tuned; its communication.json and "
        "policy.pt are copied.",
        rich_help_panel=PROFILE,
    ),
]
AdaptedOut = Annotated[
    Path,
    typer.Option(help="Folder for the adapted profile (cost_model.pt, metrics.json, ...).", rich_help_panel=OUTPUT),
]
TracesHere = Annotated[
    list[Path] | None,
    typer.Option(
        metavar="<path>",
        help="Traces measured on this machine (`autoshard bench collect`: a few hundred sets); repeat it to add "
        "files of the same profile.",
        rich_help_panel=MEASURED,
    ),
]
MeasuredHere = Annotated[
    list[Path] | None,
    typer.Option(
        metavar="<path>",
        help="Measured evaluations (`autoshard evaluate --measure --json --out DIR`: DIR or a report.json; repeat "
        "it for more runs) of plans on the model's machine: their device sets, each labelled by its cost "
        "relative to its task's other sets.",
        rich_help_panel=MEASURED,
    ),
]
AdaptSeed = Annotated[
    int,
    typer.Option(
        min=0,
        help="Split seed (train / validation / held-out) of the new traces and of the measured sets.",
        rich_help_panel=TRAINING,
    ),
]


@app.command("adapt")
@friendly_errors
def adapt_cmd(
    model: ProfileToAdapt,
    out: AdaptedOut,
    traces: TracesHere = None,
    measured: MeasuredHere = None,
    seed: AdaptSeed = 0,
    max_epochs: Annotated[int, typer.Option(min=1, help=MAX_EPOCHS_HELP, rich_help_panel=TRAINING)] = ADAPT_MAX_EPOCHS,
) -> None:
    """Adapt a profile to this machine by fine-tuning its cost model on what was measured here.

    On sets measured here (minutes of collection, where a profile from scratch takes an hour)
    and/or on the device sets of plans measured here (docs/profiles.md, "Adapt a profile in
    minutes")."""
    from cost_model.checkpoint import load_cost_model

    folder = profile_folder(model)
    if out.resolve() == folder.resolve():
        raise InputError(
            "--out",
            f"{out} is the profile being adapted; adapting would overwrite it",
            "pass a new folder, e.g. data/models/<this machine's profile id>",
        )
    if not traces and not measured:
        raise InputError(
            "--traces",
            "nothing to adapt on",
            "pass --traces (sets measured here) and/or --measured (evaluations measured here)",
        )
    base = load_cost_model(folder)
    run = _adapt_run(folder, base, traces or [], measured or [], seed, max_epochs)
    metrics = train_and_save(read_all(traces) if traces else None, out, run)
    _copy_the_rest(folder, out)
    console.print(
        f"adapted the cost model of {base.profile.id} to {metrics['profile']['id']} in {out}", highlight=False
    )


def _adapt_run(folder: Path, base, traces: list[Path], measured: list[Path], seed: int, max_epochs: int) -> FitRun:
    """``cost adapt``'s fine-tuning of ``base``: on ``traces`` and the labelled device sets of the
    ``measured`` evaluations (``InputError`` when too few); without new traces, the base's stand as
    the profile's anchors (``bench drift``, ``evaluate --measure``)."""
    from autoshard.evaluation.measured_reports import measured_device_sets
    from cost_model.checkpoint import trace_sources
    from cost_model.fitting import ADAPT_LEARNING_RATE, ADAPT_PATIENCE
    from cost_model.relative_labels import relative_labels

    labelled = relative_labels(base, measured_device_sets(measured)) if measured else []
    if measured and len(labelled) < 6:  # a validation sixth of at least one set
        raise InputError(
            "--measured",
            f"{len(labelled)} measured device sets: too few to fine-tune and stop early",
            "measure more tasks or planners (`autoshard evaluate SUITE --measure`)",
        )
    metrics_file = folder / "metrics.json"
    base_metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    return FitRun(
        seed,
        max_epochs,
        ADAPT_PATIENCE,
        command="autoshard cost adapt " + " ".join(shlex.quote(a) for a in sys.argv[3:]),
        sources=tuple(str(t) for t in traces) if traces else tuple(trace_sources(base_metrics)),
        learning_rate=ADAPT_LEARNING_RATE,
        start_from=base,
        adapted_from={
            "model": str(folder),
            "profile": base.profile.id,
            **({"measured": [str(m) for m in measured]} if measured else {}),
        },
        measured=tuple(labelled),
    )


def _copy_the_rest(folder: Path, out: Path) -> None:
    """The base profile's all-to-all and policy, copied where ``out`` has none."""
    import shutil

    for name in ("communication.json", "policy.pt"):
        if (folder / name).is_file() and not (out / name).exists():
            shutil.copy2(folder / name, out / name)
            hint = f" (the base's all-to-all: measure this machine's with `autoshard bench comm --out {out}`)"
            console.print(f"copied {name} from {folder}{hint if name == 'communication.json' else ''}", highlight=False)


MIN_ERROR_SETS = 20  # fewer measured sets say little about the tails of the model's error


@app.command("errors")
@friendly_errors
def errors_cmd(
    model: Annotated[
        Path, typer.Option(help="The profile folder: device_errors.json is written there.", rich_help_panel=PROFILE)
    ],
    measured: Annotated[
        list[Path],
        typer.Option(
            metavar="<path>",
            help="Measured evaluations of plans on the profile's hardware (`autoshard evaluate "
            "--measure --json --out DIR`: DIR or a report.json; repeat it for more runs).",
            rich_help_panel=MEASURED,
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Record the cost model's error on measured device sets of plans (device_errors.json).

    The error is log(measured / predicted), predicted now, centred per task and run; from it
    `autoshard plan` and the service report each plan's expected max (docs/concepts.md, "Expected
    max under the model's error")."""
    import numpy as np

    from autoshard.core.model_error import DEVICE_ERRORS_FILE, DeviceErrors
    from autoshard.evaluation.measured_reports import measured_device_sets, report_paths
    from cost_model.checkpoint import load_cost_model
    from cost_model.relative_labels import centred_errors

    folder = profile_folder(model)
    cost_model = load_cost_model(folder)
    reports = report_paths(measured)
    _check_measured_on(reports, cost_model.profile)
    per_task = centred_errors(cost_model, measured_device_sets(measured))
    errors = tuple(e for task in per_task.values() for e in task)
    if len(errors) < MIN_ERROR_SETS:
        raise InputError(
            "--measured",
            f"{len(errors)} measured device sets: too few to describe the model's error (at least {MIN_ERROR_SETS})",
            "measure more tasks (`autoshard evaluate SUITE --measure`)",
        )
    found = DeviceErrors(errors, len({task for _, task in per_task}), tuple(str(p) for p in reports))
    found.save(folder / DEVICE_ERRORS_FILE)
    levels = (0.05, 0.25, 0.5, 0.75, 0.95)
    summary: dict[str, Any] = {
        **found.summary(),
        "file": str(folder / DEVICE_ERRORS_FILE),
        "quantiles": {f"p{round(q * 100)}": round(float(v), 4) for q, v in zip(levels, np.quantile(errors, levels))},
    }
    if json_out:
        print_json(summary)
    else:
        console.print(
            f"{summary['sets']} device sets of {summary['tasks']} tasks: the model's error spreads "
            f"{summary['spread']:.1%} (log scale; 5-95%: {summary['quantiles']['p5']:+.3f} .. "
            f"{summary['quantiles']['p95']:+.3f}) -> {summary['file']}",
            highlight=False,
        )


def _check_measured_on(reports: list[Path], profile) -> None:
    """``InputError`` for a report measured on other hardware: its errors do not describe this profile's."""
    from autoshard.evaluation.measured_reports import measured_on

    for path in reports:
        device, cpu = measured_on(path)
        if (device and device != profile.device_name) or (cpu and profile.cpu and cpu != profile.cpu):
            raise InputError(
                "--measured",
                f"{path} was measured on {cpu or device}, not on the profile's {profile.cpu or profile.device_name}",
                "pass evaluations measured on the hardware the profile describes",
            )


def split_seed(folder: Path) -> int:
    """The split seed the model in ``folder`` was trained with (its metrics.json; 0, the default,
    where it names none): the held-out splits are that seed's."""
    metrics = folder / "metrics.json"
    return int(json.loads(metrics.read_text()).get("split_seed", 0)) if metrics.is_file() else 0


def profile_folder(model: Path) -> Path:
    """The profile folder ``--model`` names (a folder, or its cost_model.pt); ``InputError`` without a model."""
    from cost_model.checkpoint import CHECKPOINT_NAME

    folder = model.parent if model.name == CHECKPOINT_NAME else model
    if not (folder / CHECKPOINT_NAME).is_file():
        raise InputError(
            "--model", f"no {CHECKPOINT_NAME} in {folder}", "pass a profile folder, e.g. data/models/default"
        )
    return folder


def train_and_save(data, out: Path, run: FitRun) -> dict:
    """``cost_model.fitting.fit_and_save`` with its progress on the console (a spinner over the
    tuning grid, or a bar over the epochs), then the held-out scores in one line; the metrics."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from cost_model.fitting import fit_and_save
    from cost_model.tune import GRID

    if run.tune:
        with console.status(f"tuning: {len(GRID)} candidates on the validation split") as status:
            metrics = fit_and_save(
                data,
                out,
                run,
                on_candidate=lambda c, r: status.update(
                    f"tuning: {c.name} validation MAPE {r.best_validation_mape:.4f}"
                ),
            )
    else:
        columns = (TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, TextColumn("val MAPE {task.fields[mape]:.3f}"), console=console) as progress:
            task = progress.add_task("train", total=run.max_epochs, mape=float("nan"))
            metrics = fit_and_save(data, out, run, lambda epoch, m: progress.update(task, completed=epoch, mape=m))
    summary = [f"saved {out}/cost_model.pt in {metrics['train_seconds']:.0f} s"]
    for split, body in metrics["evaluation"].items():
        n = body["estimators"]["neural"]
        summary.append(f"{split}: MAPE {n['mape']:.3f}, ranking accuracy {n['ranking_accuracy']:.3f}")
    console.print("; ".join(summary))
    return metrics


@app.command("eval")
@friendly_errors
def eval_cmd(
    model: Annotated[Path, typer.Option(help="A model folder (or cost_model.pt).", rich_help_panel=PROFILE)],
    traces: Annotated[
        list[Path],
        typer.Option(
            help="Trace file with the held-out samples; repeat it to add "
            "plan-set traces (split c: `autoshard bench plans --split test`).",
            rich_help_panel=TRACES,
        ),
    ],
    fresh_pool: Annotated[
        Path | None,
        typer.Option(
            help="Traces of a pool drawn with a fresh seed (no model trained "
            "or tuned on it): every set is scored as split `fresh_pool`.",
            rich_help_panel=TRACES,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """MAPE, Spearman and ranking accuracy of every estimator on the held-out splits.

    The splits: (a) unseen sets, (b) unseen tables and, with plan-set traces, (c) the device sets
    of plans, with how often the model names the faster of two plans."""
    from cost_model.accuracy import evaluate_all
    from cost_model.checkpoint import CHECKPOINT_NAME, load_cost_model
    from cost_model.dataset import every_set, make_splits

    data = read_all(traces)
    cost_model = load_cost_model(model, expected_profile=data.profile.id)
    extra = None
    if fresh_pool is not None:
        fresh = read_all([fresh_pool])
        if fresh.profile.id != data.profile.id:
            raise InputError(
                "--fresh-pool",
                f"traces of profile {fresh.profile.id}, the model is {data.profile.id}",
                "pass a fresh pool measured on the model's device profile",
            )
        extra = {"fresh_pool": every_set(fresh)}
    seed = split_seed(model.parent if model.name == CHECKPOINT_NAME else model)  # the model's own split
    report = evaluate_all(cost_model, make_splits(data, seed), data, extra)
    if json_out:
        print_json(report.to_dict())
    else:
        _print_accuracy(report)


def _print_accuracy(report) -> None:
    """``cost eval``'s report as a table per split, with the plan choices where there are plan sets."""
    from rich.console import Console
    from rich.table import Table as RichTable

    for split, body in report.splits.items():
        table = RichTable(title=f"{split} (noise floor: pass-to-pass MAPE {body.noise_floor.pass_to_pass_mape})")
        for col in ("estimator", "MAPE", "Spearman", "ranking acc.", "samples"):
            table.add_column(col)
        for name, s in body.estimators.items():
            table.add_row(name, f"{s.mape:.3f}", f"{s.spearman:.3f}", f"{s.ranking_accuracy:.3f}", str(s.samples))
        Console().print(table)
        if body.plan_choices is not None:
            c = body.plan_choices
            Console().print(
                f"plans of one task whose measured max differs by > {c.margin:.0%}: the model names the "
                f"faster one in {c.named_the_faster} of {c.pairs} pairs ({c.plans} plans, {c.tasks} tasks)"
            )


@app.command("add-ranges")
@friendly_errors
def add_ranges_cmd(
    model: Annotated[
        Path,
        typer.Option(
            help="A model folder (holding cost_model.pt); its checkpoint is re-saved in place.",
            rich_help_panel=PROFILE,
        ),
    ],
    traces: Annotated[
        list[Path],
        typer.Option(
            help="The trace file (.jsonl or .jsonl.gz) the model was trained on; "
            "repeat it for every file it was trained on.",
            rich_help_panel=TRACES,
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the ranges as JSON.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Record what a model was trained on (the ranges of its training split), so that it refuses
    inputs it cannot answer and warns on extrapolation; weights and predictions are unchanged."""
    from cost_model.checkpoint import CHECKPOINT_NAME, add_trained_ranges

    folder = profile_folder(model)
    for path in traces:
        if not path.is_file():
            raise InputError("--traces", f"no trace file at {path}", "pass the traces the model was trained on")
    seed = split_seed(folder)
    ranges = add_trained_ranges(folder, traces, seed)
    if json_out:
        print_json(ranges.to_dict())
        return
    console.print(
        f"saved {folder / CHECKPOINT_NAME} with the trained ranges of {', '.join(map(str, traces))} (seed {seed}): "
        f"{ranges.tables_per_set[0]}-{ranges.tables_per_set[1]} tables per set, rows "
        f"{ranges.rows[0]:,}-{ranges.rows[1]:,}, dim {ranges.dim[0]}-{ranges.dim[1]}, pooling "
        f"{ranges.pooling[0]:g}-{ranges.pooling[1]:g}, bytes per element "
        f"{', '.join(map(str, ranges.bytes_per_element))}, optimizers {', '.join(ranges.optimizers)}",
        highlight=False,
    )


@app.command("linear-beyond")
@friendly_errors
def linear_beyond_cmd(
    model: Annotated[
        Path,
        typer.Option(
            help="A model folder (holding cost_model.pt); its checkpoint is re-saved in place.",
            rich_help_panel=PROFILE,
        ),
    ],
    tables: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Price sets of more than this many tables linearly in "
            "their size; omit it for the largest trained set.",
            rich_help_panel="Pricing",
        ),
    ] = None,
) -> None:
    """Price sets of more than --tables tables linearly in their size.

    Past --tables, where the network stops answering for a set's size, a set of n tables costs
    n / tables times a set of that size with the same mean and max table (docs/decisions.md, 7).
    Choose it on measured large sets (`benchmarks/large_sets.py --limits`); smaller sets' predictions
    are unchanged. Recorded in the folder's metrics.json, whose held-out evaluation is measured again
    on the traces and split seed it names (0 where it names none, the default of `cost train` and
    `cost adapt`; not for a model adapted on measured plans)."""
    from cost_model.accuracy import evaluate_all
    from cost_model.checkpoint import CHECKPOINT_NAME, set_linear_beyond, trace_sources
    from cost_model.dataset import make_splits

    folder = profile_folder(model)
    found = set_linear_beyond(folder, tables)
    metrics_file = folder / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    metrics["linear_beyond"] = {
        "tables": tables,
        "size_limit": found.size_limit,
        "command": f"autoshard cost linear-beyond --model {shlex.quote(str(model))}"
        + (f" --tables {tables}" if tables is not None else ""),
    }
    sources = [Path(s) for s in trace_sources(metrics)]
    if metrics.get("evaluation") and sources and all(p.is_file() for p in sources) and "measured_sets" not in metrics:
        data = read_all(sources)
        metrics["evaluation"] = evaluate_all(found, make_splits(data, metrics.get("split_seed", 0)), data).to_dict()
    metrics_file.write_text(json.dumps(metrics, indent=1) + "\n")
    console.print(
        f"saved {folder / CHECKPOINT_NAME}: sets of more than {found.size_limit} tables are priced linearly "
        f"in their size" + ("" if tables is not None else " (the largest trained set)"),
        highlight=False,
    )
