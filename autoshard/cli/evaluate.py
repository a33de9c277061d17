"""`autoshard evaluate SUITE`: every planner on every task of a suite, predicted and measured."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoshard.cli.support import (
    ADVANCED,
    COLUMN_SPLIT_HELP,
    DEFAULT_MODEL,
    DEPARTURE_MARGIN_HELP,
    MEASUREMENT,
    OUTPUT,
    PLANNERS,
    console,
    ensure_malloc_settings,
    friendly_errors,
    load_profile_or_none,
    one_thread,
    planner_names,
    plans_measurer,
    plans_verifier,
    print_json,
    verification_measures,
)
from autoshard.core.errors import InputError

if TYPE_CHECKING:
    from autoshard.evaluation.suite import DistributedMeasurer


@friendly_errors
def evaluate_cmd(
    suite: Annotated[str, typer.Argument(help="A suite JSON file, or 'default' (bundled).")],
    planners: Annotated[
        str, typer.Option(help="'all' or a comma-separated list of planner names.", rich_help_panel=PLANNERS)
    ] = "all",
    model: Annotated[
        Path | None, typer.Option(help="Cost model folder (default: the shipped one).", rich_help_panel=PLANNERS)
    ] = None,
    column_split: Annotated[
        bool | None,
        typer.Option("--column-split/--no-column-split", help=COLUMN_SPLIT_HELP, rich_help_panel=PLANNERS),
    ] = None,
    communication: Annotated[
        bool, typer.Option(help="Add each device's all-to-all to its predicted cost.", rich_help_panel=PLANNERS)
    ] = True,
    out: Annotated[
        Path, typer.Option(help="Folder for the per-task Markdown, CSV and PNG.", rich_help_panel=OUTPUT)
    ] = Path("runs/evaluate"),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.", rich_help_panel=OUTPUT)] = False,
    resume: Annotated[
        bool,
        typer.Option(
            help="Take the tasks an unfinished run with the same options wrote "
            "to OUT/<suite>/report.json as they are; plan (and measure) the "
            "rest.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    measure: Annotated[
        bool,
        typer.Option(
            help="Measure every device's shard with the microbenchmark (interleaved).", rich_help_panel=MEASUREMENT
        ),
    ] = False,
    rounds: Annotated[
        int,
        typer.Option(
            min=1,
            help="Measurement rounds (plans interleaved in each; an even number balances the order).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = 4,
    row_cap_mb: Annotated[
        int,
        typer.Option(
            min=1,
            help="With --measure: benchmark at most this many MiB of rows "
            "per table (the traces' cap; raise it to measure tables uncapped).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = 128,
    drift_samples: Annotated[
        int,
        typer.Option(
            min=0,
            help="With --measure: re-measure this many of the profile's "
            "traced sets before and after (`bench drift`) and record "
            "how this machine compares with its traces (0: off).",
            rich_help_panel=MEASUREMENT,
        ),
    ] = 12,
    verify: Annotated[
        bool,
        typer.Option(
            help="With --measure: add the plan `autoshard plan --verify` would choose "
            "(its own measurement rounds, before the evaluation's) as 'verified'.",
            rich_help_panel=MEASUREMENT,
        ),
    ] = False,
    verify_top: Annotated[
        int,
        typer.Option(min=2, help="With --verify: how many distinct plans to measure.", rich_help_panel=MEASUREMENT),
    ] = 4,
    verify_rounds: Annotated[
        int, typer.Option(min=2, help="With --verify: its measurement rounds.", rich_help_panel=MEASUREMENT)
    ] = 6,
    distributed: Annotated[
        bool,
        typer.Option(
            help="Also run every plan with TorchRec DMP, one process per device.", rich_help_panel=MEASUREMENT
        ),
    ] = False,
    distributed_steps: Annotated[
        int,
        typer.Option(min=1, help="With --distributed: training steps timed per plan.", rich_help_panel=MEASUREMENT),
    ] = 10,
    seed: Annotated[
        int,
        typer.Option(
            min=0,
            help="Seed of the random planner, rl+refine's sampling and --distributed's batches.",
            rich_help_panel=ADVANCED,
        ),
    ] = 0,
    departure_margin: Annotated[
        float | None, typer.Option(min=0.0, max=0.99, help=DEPARTURE_MARGIN_HELP, rich_help_panel=ADVANCED)
    ] = None,
) -> None:
    """Plan every task of a suite with every planner; with --measure, run the plans for real."""
    if verify and not measure:
        raise InputError("--verify", "verifies by measuring, and --measure is off", "add --measure")
    if measure:
        ensure_malloc_settings()
    from autoshard.core.task import load_suite
    from autoshard.core.workload_file import workload_to_dict
    from autoshard.evaluation.measured_reports import reported_result
    from autoshard.evaluation.suite import (
        against_best_heuristic,
        against_held_out_heuristic,
        evaluate_task,
        suite_summary,
        task_rows,
        write_task_outputs,
    )
    from autoshard.planners.context import PlannerContext

    name, tasks = load_suite(suite)
    one_thread()
    profile, why = load_profile_or_none(model)
    cost_model = profile.model if profile else None
    if why:
        console.print(f"[yellow]note:[/yellow] {why}: predicted costs are proxies", highlight=False)
    comm = profile.communication if communication and profile else None
    context = PlannerContext(
        cost_model,
        profile.policy if profile else None,
        seed,
        column_split,
        departure_margin=departure_margin,
    )
    measurer = plans_measurer(rounds, row_cap_mb, profile) if measure else None
    verifier = plans_verifier(verify_rounds, row_cap_mb, profile, comm, verify_top) if verify else None
    run_distributed: DistributedMeasurer | None = None
    if distributed:
        from autoshard.torchrec.dmp_run import (
            DistributedConfig,
            compare_distributed,
        )

        run_distributed = lambda plans, workload: compare_distributed(  # noqa: E731
            plans,
            workload,
            DistributedConfig(
                world_size=len(plans[0].devices), steps=distributed_steps, batch_size=workload.batch_size, seed=seed
            ),
            rounds,
        )
    names = planner_names(planners, "--planners")
    warnings_of = _priceable(tasks, cost_model)  # before anything is planned or measured
    report: dict[str, Any] = {  # the JSON written and printed: the edge of the typed rows and summaries
        "suite": name,
        "cost_unit": "ms" if cost_model else "proxy",
        "settings": _settings(profile, context, names, communication, measure, rounds),
        "tasks": [],
        **({"row_cap_mb": row_cap_mb} if measure else {}),
    }
    against = []  # per task: every planner but the heuristics against the best heuristic, measured
    held_out = []  # the same, each round against the heuristic chosen on the other rounds' pairs
    results = []
    if resume and (distributed or verify):
        raise InputError("--resume", "resumes measured and planned tasks only", "run --distributed or --verify afresh")
    done = _unfinished(out / name / "report.json", report) if resume else {}
    drift_traces = _anchor_traces(profile) if measure and drift_samples and profile else None
    if drift_traces is not None:
        report["machine_drift"] = {"traces": str(drift_traces), "before": _drift(drift_traces, drift_samples, "before")}
    for task in tasks:
        if task.name in done:  # --resume: as the unfinished run planned (and measured) it
            console.print(f"[bold]{task.name}[/bold]: taken from the unfinished run", highlight=False)
            results.append(reported_result(task, done[task.name]))
            against.append(against_best_heuristic(results[-1]))
            held_out.append(against_held_out_heuristic(results[-1]))
            report["tasks"].append(done[task.name])
            continue
        console.print(
            f"[bold]{task.name}[/bold]: {len(task.workload.tables)} tables, {task.topology.num_devices} devices",
            highlight=False,
        )
        warnings = warnings_of[task.name]
        for warning in warnings:
            console.print(f"[yellow]warning:[/yellow] {task.name}: {warning}", highlight=False)
        result = evaluate_task(task, names, context, measurer, run_distributed, comm, verifier)
        results.append(result)
        files = write_task_outputs(result, out / name)
        against.append(against_best_heuristic(result))
        held_out.append(against_held_out_heuristic(result))
        report["tasks"].append(
            {
                "task": task.name,
                "tables": len(task.workload.tables),
                "num_devices": task.topology.num_devices,
                "device_memory_gb": task.topology.device_memory_gb,
                "reference": result.reference,
                "planners": [r.to_dict() for r in task_rows(result)],
                "workload": workload_to_dict(task.workload, task.topology),
                "warnings": list(warnings),
                **(
                    {"verification": {"measures": verification_measures(comm), **result.verification.to_dict()}}
                    if result.verification
                    else {}
                ),
                "skipped": [{"planner": p, "reason": r} for p, r in result.comparison.skipped],
                **({"against_best_heuristic": [_row(a) for a in against[-1]]} if against[-1] else {}),
                **({"against_held_out_heuristic": [_row(a) for a in held_out[-1]]} if held_out[-1] else {}),
                "files": files,
            }
        )
        _write_report(report | {"complete": False}, out / name)  # a run cut short keeps the tasks it finished
        if not json_out:
            console.print(Path(files["markdown"]).read_text(), highlight=False, markup=False)
    if drift_traces is not None:
        report["machine_drift"]["after"] = _drift(drift_traces, drift_samples, "after")
    if any(against):
        report["against_best_heuristic"] = {p: s.to_dict() for p, s in suite_summary(against).items()}
        if comm is None and cost_model is not None:  # both compute-only milliseconds: the model's errors compare them
            _add_expected(report, results, profile)
        if not json_out:
            _print_summary(report["against_best_heuristic"])
    if any(held_out):
        report["against_held_out_heuristic"] = {p: s.to_dict() for p, s in suite_summary(held_out).items()}
    report["complete"] = True
    _write_report(report, out / name)
    if json_out:
        print_json(report)
    elif measure and profile is not None:
        console.print(
            f"the model's error on these plans, for the expected max of every plan it makes: `autoshard "
            f"cost errors --model {model or DEFAULT_MODEL} --measured {out / name}`",
            highlight=False,
        )


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
        "profile": profile.model.profile.id if profile else None,
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
