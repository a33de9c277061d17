"""`autoshard evaluate SUITE`: every planner on every task of a suite, predicted and measured."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoshard.cli.support import (
    COLUMN_SPLIT_HELP,
    MEASUREMENT,
    OUTPUT,
    PLANNERS,
    ComputeDeviceOption,
    DdrCapOption,
    console,
    ensure_malloc_settings,
    friendly_errors,
    planner_names,
    print_json,
)
from autoshard.core.errors import InputError
from autoshard.planning.registry import planner_names as every_planner
from autoshard.planning.registry import policy_warnings
from autoshard.profiles import DEFAULT_MODEL

if TYPE_CHECKING:
    from autoshard.core.task import Task
    from autoshard.core.types import ShardingPlan
    from autoshard.evaluation.suite import TaskResult
    from autoshard.profiles import LoadedModel
    from autoshard.torchrec.dmp_verification import DmpVerification

VERIFY_TOP, VERIFY_ROUNDS = 4, 6  # --verify measures as `autoshard plan --verify` does by default
SEED = 0  # of the random planner and rl+refine's sampling (the report records it)

Suite = Annotated[str, typer.Argument(help="A suite JSON file, or 'default' (bundled).")]
Planners = Annotated[
    str, typer.Option(help="'all' or a comma-separated list of planner names.", rich_help_panel=PLANNERS)
]
Model = Annotated[
    Path | None,
    typer.Option(
        help="Cost model folder (default: the shipped one); 'torchrec': TorchRec's own estimators for "
        "--compute-device.",
        rich_help_panel=PLANNERS,
    ),
]
ColumnSplit = Annotated[
    bool | None, typer.Option("--column-split/--no-column-split", help=COLUMN_SPLIT_HELP, rich_help_panel=PLANNERS)
]
Communication = Annotated[
    bool, typer.Option(help="Add each device's all-to-all to its predicted cost.", rich_help_panel=PLANNERS)
]
Out = Annotated[Path, typer.Option(help="Folder for the per-task Markdown, CSV and PNG.", rich_help_panel=OUTPUT)]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)]
Resume = Annotated[
    bool,
    typer.Option(
        help="Take the tasks an unfinished run with the same options wrote to OUT/<suite>/report.json as they "
        "are; plan (and measure) the rest.",
        rich_help_panel=OUTPUT,
    ),
]
Measure = Annotated[
    bool,
    typer.Option(
        help="Measure every device's shard with the microbenchmark (interleaved).", rich_help_panel=MEASUREMENT
    ),
]
Rounds = Annotated[
    int,
    typer.Option(
        min=1,
        help="Measurement rounds (plans interleaved in each; an even number balances the order).",
        rich_help_panel=MEASUREMENT,
    ),
]
RowCapMb = Annotated[
    int,
    typer.Option(
        min=1,
        help="With --measure: benchmark at most this many MiB of rows per table (the traces' cap; raise it to "
        "measure tables uncapped).",
        rich_help_panel=MEASUREMENT,
    ),
]
DriftSamples = Annotated[
    int,
    typer.Option(
        min=0,
        help="With --measure: re-measure this many of the profile's traced sets before and after (`bench drift`) "
        "and record how this machine compares with its traces (0: off).",
        rich_help_panel=MEASUREMENT,
    ),
]
Verify = Annotated[
    bool,
    typer.Option(
        help="With --measure: add the plan `autoshard plan --verify` would choose (its own measurement rounds, "
        "before the evaluation's) as 'verified'.",
        rich_help_panel=MEASUREMENT,
    ),
]
Dmp = Annotated[
    bool,
    typer.Option(
        "--dmp",
        help="Also run every plan end to end under TorchRec's DMP, one process a rank: each rank's step and its "
        "parts measured beside the prediction, and three judges (our model, TorchRec's estimator, DMP).",
        rich_help_panel=MEASUREMENT,
    ),
]


@dataclass(frozen=True)
class Run:
    """One ``autoshard evaluate``: what plans the tasks, what measures them, where the report goes."""

    suite: str
    tasks: tuple[Task, ...]
    names: list[str] | None
    context: Any  # PlannerContext
    profile: LoadedModel | None
    communication: Any  # the profile's CommunicationModel, or None (--no-communication, no profile)
    measurer: Any
    verifier: Any
    dmp: Callable[[Task, Sequence[ShardingPlan]], DmpVerification] | None
    folder: Path
    json_out: bool


@friendly_errors
def evaluate_cmd(
    suite: Suite,
    planners: Planners = "all",
    model: Model = None,
    compute_device: ComputeDeviceOption = None,
    ddr_cap_gb: DdrCapOption = None,
    column_split: ColumnSplit = None,
    communication: Communication = True,
    out: Out = Path("runs/evaluate"),
    json_out: JsonOut = False,
    resume: Resume = False,
    measure: Measure = False,
    rounds: Rounds = 4,
    row_cap_mb: RowCapMb = 128,
    drift_samples: DriftSamples = 12,
    verify: Verify = False,
    dmp: Dmp = False,
) -> None:
    """Plan every task of a suite with every planner; with --measure, run the plans for real."""
    if verify and not measure:
        raise InputError("--verify", "verifies by measuring, and --measure is off", "add --measure")
    if resume and (dmp or verify):
        raise InputError("--resume", "resumes measured and planned tasks only", "run --dmp or --verify afresh")
    if measure:
        ensure_malloc_settings()
    chosen = (model, compute_device, ddr_cap_gb)
    run = _run(suite, planners, chosen, column_split, communication, out, json_out, measure, rounds, row_cap_mb)
    run = replace(run, verifier=_verifier(run, row_cap_mb) if verify else None)
    run = replace(run, dmp=_dmp(run, rounds, row_cap_mb) if dmp else None)
    warnings_of = _priceable(run.tasks, run.context.cost_model)  # before anything is planned or measured
    report = _report(run, communication, measure, rounds, row_cap_mb)
    if not json_out:
        for warning in report["warnings"]:
            console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    done = _unfinished(run.folder / "report.json", report) if resume else {}
    drift_traces = _anchor_traces(run.profile) if measure and drift_samples and run.profile else None
    if drift_traces is not None:
        report["machine_drift"] = {"traces": str(drift_traces), "before": _drift(drift_traces, drift_samples, "before")}
    results, against, held_out = _evaluate_tasks(run, report, done, warnings_of)
    if drift_traces is not None:
        report["machine_drift"]["after"] = _drift(drift_traces, drift_samples, "after")
    _summarise(run, report, results, against, held_out)
    if json_out:
        print_json(report)
    elif measure and run.profile is not None:
        console.print(
            f"the model's error on these plans, for the expected max of every plan it makes: `autoshard "
            f"cost errors --model {model or DEFAULT_MODEL} --measured {run.folder}`",
            highlight=False,
        )


def _run(suite, planners, model, column_split, communication, out, json_out, measure, rounds, row_cap_mb) -> Run:
    """The run the options describe: the suite's tasks, the profile and planners, the measurer.
    ``model``: (``--model``, ``--compute-device``, ``--ddr-cap-gb``)."""
    from autoshard.core.task import load_suite
    from autoshard.evaluation.measurers import plans_measurer
    from autoshard.planners.context import PlannerContext
    from autoshard.profiles import load_profile_or_none
    from cost_model.process import one_thread

    name, tasks = load_suite(suite)
    one_thread()
    profile, why = load_profile_or_none(model[0], compute_device=model[1], ddr_cap_gb=model[2])
    if why:
        console.print(f"[yellow]note:[/yellow] {why}: predicted costs are proxies", highlight=False)
    context = PlannerContext(
        profile.model if profile else None, profile.policy if profile else None, SEED, column_split
    )
    return Run(
        suite=name,
        tasks=tuple(tasks),
        names=planner_names(planners, "--planners"),
        context=context,
        profile=profile,
        communication=profile.communication if communication and profile else None,
        measurer=plans_measurer(rounds, row_cap_mb, profile) if measure else None,
        verifier=None,
        dmp=None,
        folder=out / name,
        json_out=json_out,
    )


def _verifier(run: Run, row_cap_mb: int):
    """``--verify``: the plan ``autoshard plan --verify`` would choose, measured as it measures."""
    from autoshard.evaluation.measurers import plans_verifier

    return plans_verifier(VERIFY_ROUNDS, row_cap_mb, run.profile, run.communication, VERIFY_TOP)


def _dmp(run: Run, rounds: int, row_cap_mb: int) -> Callable[[Task, Sequence[ShardingPlan]], DmpVerification]:
    """``--dmp``: every plan of a task run end to end under TorchRec's DMP (``autoshard.cli.dmp``)."""
    from autoshard.cli.dmp import run_dmp_verification

    def verify(task: Task, plans: Sequence[ShardingPlan]) -> DmpVerification:
        model, comm = run.context.cost_model, run.communication
        return run_dmp_verification(plans, task.workload, task.topology, model, comm, len(plans), rounds, row_cap_mb)

    return verify


def _report(run: Run, communication: bool, measure: bool, rounds: int, row_cap_mb: int) -> dict[str, Any]:
    """The report's head: the JSON written and printed, the edge of the typed rows and summaries."""
    return {
        "suite": run.suite,
        "cost_unit": "ms" if run.context.cost_model else "proxy",
        "settings": _settings(run.profile, run.context, run.names, communication, measure, rounds),
        "tasks": [],
        **({"row_cap_mb": row_cap_mb} if measure else {}),
        "warnings": list(policy_warnings(run.context.policy, run.context.cost_model, run.names or every_planner())),
    }


def _evaluate_tasks(
    run: Run, report: dict, done: dict[str, dict], warnings_of: dict[str, tuple[str, ...]]
) -> tuple[list, list, list]:
    """Plan (and measure) every task, or take it from the unfinished run (``done``); each task's
    entry joins ``report``, written after every task. (results, against the best heuristic,
    against the held-out heuristic), per task."""
    from autoshard.evaluation.measured_reports import reported_result
    from autoshard.evaluation.suite import against_best_heuristic, against_held_out_heuristic, evaluate_task

    results, against, held_out = [], [], []
    for task in run.tasks:
        if task.name in done:  # --resume: as the unfinished run planned (and measured) it
            console.print(f"[bold]{task.name}[/bold]: taken from the unfinished run", highlight=False)
            results.append(reported_result(task, done[task.name]))
        else:
            console.print(
                f"[bold]{task.name}[/bold]: {len(task.workload.tables)} tables, {task.topology.num_devices} devices",
                highlight=False,
            )
            for warning in warnings_of[task.name]:
                console.print(f"[yellow]warning:[/yellow] {task.name}: {warning}", highlight=False)
            results.append(
                evaluate_task(task, run.names, run.context, run.measurer, None, run.communication, run.verifier)
            )
        against.append(against_best_heuristic(results[-1]))
        held_out.append(against_held_out_heuristic(results[-1]))
        if task.name in done:
            report["tasks"].append(done[task.name])
            continue
        report["tasks"].append(_task_entry(run, task, results[-1], warnings_of[task.name], against[-1], held_out[-1]))
        if run.dmp is not None:
            _add_dmp(run, run.dmp(task, results[-1].comparison.plans), report["tasks"][-1])
        _write_report(report | {"complete": False}, run.folder)  # a run cut short keeps the tasks it finished
        if not run.json_out:
            console.print(Path(report["tasks"][-1]["files"]["markdown"]).read_text(), highlight=False, markup=False)
    return results, against, held_out


def _add_dmp(run: Run, verification: DmpVerification, entry: dict[str, Any]) -> None:
    """``--dmp``: the task's planner rows gain their ``verify``; printed unless --json."""
    from autoshard.cli.dmp import add_to_report, print_dmp_verification

    add_to_report(entry, verification, "planners")
    if not run.json_out:
        print_dmp_verification(verification, console)


def _task_entry(run: Run, task: Task, result: TaskResult, warnings, against, held_out) -> dict[str, Any]:
    """One task's entry in the report, its outputs (Markdown, CSV, charts) written."""
    from autoshard.core.workload_file import workload_to_dict
    from autoshard.evaluation.measurers import verification_measures
    from autoshard.evaluation.suite import task_rows, write_task_outputs

    files = write_task_outputs(result, run.folder)
    verification = result.verification
    return {
        "task": task.name,
        "tables": len(task.workload.tables),
        "num_devices": task.topology.num_devices,
        "device_memory_gb": task.topology.device_memory_gb,
        "reference": result.reference,
        "planners": [r.to_dict() for r in task_rows(result)],
        "workload": workload_to_dict(task.workload, task.topology),
        "warnings": list(warnings),
        **(
            {"verification": {"measures": verification_measures(run.communication), **verification.to_dict()}}
            if verification
            else {}
        ),
        "skipped": [{"planner": p, "reason": r} for p, r in result.comparison.skipped],
        **({"against_best_heuristic": [_row(a) for a in against]} if against else {}),
        **({"against_held_out_heuristic": [_row(a) for a in held_out]} if held_out else {}),
        "files": files,
    }


def _summarise(run: Run, report: dict, results: list, against: list, held_out: list) -> None:
    """The suite's summaries joined to ``report`` (printed unless --json), written complete."""
    from autoshard.evaluation.suite import suite_summary

    if any(against):
        report["against_best_heuristic"] = {p: s.to_dict() for p, s in suite_summary(against).items()}
        if run.communication is None and run.context.cost_model is not None:
            _add_expected(report, results, run.profile)  # both compute-only ms: the model's errors compare them
        if not run.json_out:
            _print_summary(report["against_best_heuristic"])
    if any(held_out):
        report["against_held_out_heuristic"] = {p: s.to_dict() for p, s in suite_summary(held_out).items()}
    report["complete"] = True
    _write_report(report, run.folder)


def _write_report(report: dict, folder: Path) -> None:
    """``folder/report.json``: written after each task (``complete: false``), so that a run
    stopped part-way (a kill, a lost machine) keeps every task it measured, and once more at the
    end with the suite's summaries (``complete: true``)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def _unfinished(path: Path, new: dict) -> dict[str, dict]:
    """``--resume``: the tasks of the unfinished report at ``path``, by name, if it was made with
    the settings and row cap of the ``new`` report (its start time aside); none if there is no
    report yet."""
    import json

    if not path.is_file():
        console.print(f"[yellow]note:[/yellow] no unfinished run at {path}: starting afresh", highlight=False)
        return {}
    report = json.loads(path.read_text())
    if report.get("complete", True):
        raise InputError("--resume", f"the run at {path} is finished", "run again without --resume to start afresh")

    def made_with(run: dict) -> dict:  # what a run's figures depend on: its settings but the start, its row cap
        settings = {k: v for k, v in run.get("settings", {}).items() if k != "started"}
        return settings | {"row_cap_mb": run.get("row_cap_mb")}

    same, old = made_with(new), made_with(report)
    differ = sorted(k for k in same.keys() | old.keys() if same.get(k) != old.get(k))
    if differ:
        raise InputError(
            "--resume",
            f"the unfinished run at {path} was made with other {', '.join(differ)}",
            "resume with the options it ran with, or run again without --resume",
        )
    return {t["task"]: t for t in report["tasks"]}


def _priceable(tasks, cost_model) -> dict[str, tuple[str, ...]]:
    """Each task's warnings from the cost model, checked for every task up front: a task the
    model cannot price (``InputError``, e.g. fp16 tables for a model trained on fp32 only) stops
    the run before any task is planned or measured, naming the task, not after the others."""
    if cost_model is None:
        return {task.name: () for task in tasks}
    found = {}
    for task in tasks:
        try:
            found[task.name] = tuple(cost_model.check_workload(task.workload))
        except InputError as error:
            fix = (
                f"{error.fix}; or evaluate a suite without task {task.name!r} (autoshard/core/suites/fp32.json: "
                "the default suite's fp32 + SGD tasks)"
            )
            raise InputError(error.field, error.message, fix, f"task {task.name!r} {error.where}".strip()) from None
    return found


def _settings(profile, context, names: list[str] | None, communication: bool, measure: bool, rounds: int) -> dict:
    """What the report was made with, so that a figure can be read without its command."""
    from datetime import datetime

    return {
        "profile": getattr(getattr(profile.model, "profile", None), "id", profile.profile) if profile else None,
        "model_sha256": profile.sha256 if profile else None,
        "policy_sha256": profile.policy_sha256 if profile else None,
        "planners": names,
        "column_split": context.split_setting,
        "communication": communication,
        "seed": context.seed,
        "departure_margin": context.margin,
        "rounds": rounds if measure else None,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _add_expected(report: dict, results: list, profile) -> None:
    """Each task's planners against the best heuristic gain their predicted ratio and the ratio
    expected under the model's errors on the other tasks' devices, or, without another measured
    task, on the ``profile``'s measured device errors (the optimizer's curse); the suite's summary,
    their geometric means."""
    from autoshard.evaluation.suite import (
        expected_against_best_heuristic,
        expected_summary,
    )

    profile_errors = profile.device_errors.array if profile.device_errors is not None else None
    per_task = expected_against_best_heuristic(results, profile_errors)
    for task, expected in zip(report["tasks"], per_task):
        if expected:  # the task's Markdown gains the line (it was written before the other tasks ran)
            with open(task["files"]["markdown"], "a") as markdown:
                markdown.write(
                    f"\nagainst {expected[0].heuristic}, predicted / expected under the model's errors "
                    f"on {expected[0].errors_from}: "
                    + "; ".join(f"{e.planner} {e.predicted:.3f} / {e.expected:.3f}" for e in expected)
                    + "\n"
                )
        by_planner = {e.planner: e for e in expected}
        for row in task.get("against_best_heuristic", []):
            if row["planner"] in by_planner:
                row["predicted_ratio"] = round(by_planner[row["planner"]].predicted, 4)
                row["expected_ratio"] = round(by_planner[row["planner"]].expected, 4)
                row["expected_from"] = by_planner[row["planner"]].errors_from
    for planner, means in expected_summary(per_task).items():
        if planner in report["against_best_heuristic"]:
            report["against_best_heuristic"][planner].update(
                {"geomean_predicted": means.predicted, "geomean_expected": means.expected}
            )


def _row(against) -> dict:
    return {
        "planner": against.planner,
        "heuristic": against.heuristic,
        "ratio": round(against.ratio, 4),
        "ci95": [round(v, 4) for v in against.ci95],
        "verdict": against.verdict,
    }


def _print_summary(summary: dict) -> None:
    """Each planner against each task's best heuristic, measured, over the suite."""
    from rich.table import Table as RichTable

    table = RichTable(
        title="measured, against each task's best heuristic (paired by round, 95% CI); predicted, "
        "and expected under the model's errors on the other tasks' devices (in a suite of one, the "
        "profile's measured device errors)"
    )
    for col in ("planner", "geomean", "faster", "tie", "slower", "tasks", "predicted", "expected"):
        table.add_column(col)
    for planner, row in summary.items():
        table.add_row(
            planner,
            f"{row['geomean_vs_best_heuristic']:.3f}",
            *(str(row[k]) for k in ("faster", "tie", "slower", "tasks")),
            *(f"{row[k]:.3f}" if k in row else "-" for k in ("geomean_predicted", "geomean_expected")),
        )
    console.print(table)


def _anchor_traces(profile) -> Path | None:
    """The profile's anchor traces (the first file its model trained on), if they are here."""
    from cost_model.checkpoint import trace_sources

    for ref in trace_sources(profile.metrics)[:1]:
        for base in (Path.cwd(), Path(__file__).resolve().parents[2]):  # here, or the repository's root
            if (base / ref).is_file():
                return base / ref
    console.print(
        "[yellow]note:[/yellow] the profile's traces are not here: the machine's drift is not checked", highlight=False
    )
    return None


def _drift(traces: Path, samples: int, when: str) -> dict:
    """``bench drift`` on ``samples`` of the traces' sets, printed and as a dict."""
    from cost_model.bench.drift import check_drift
    from cost_model.traces.store import read_traces

    drift = check_drift(read_traces(traces), samples)
    line = f"machine {when} measuring: {drift.verdict()}"
    console.print(
        line if drift.holds else f"[yellow]warning:[/yellow] {line}; measured figures are not on the traces' scale",
        highlight=False,
    )
    return {key: value for key, value in drift.to_dict().items() if key != "sets"}
