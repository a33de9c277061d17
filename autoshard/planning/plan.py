"""The one way to plan: ``plan`` takes a workload, a topology, the models and the options, and
answers a typed ``PlanningReport``. `autoshard plan`, the service's ``POST /v1/plans`` and the
drop-in TorchRec planner all plan through it; only where the planners run differs (``Runner``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from autoshard.core.communication import communication_warnings
from autoshard.core.costing import bound_to_task
from autoshard.core.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.core.types import Topology, Workload
from autoshard.planners.context import PlannerContext
from autoshard.planners.feasibility import check_total
from autoshard.planners.placement_rules import check_constraints
from autoshard.planners.placement_unit import proxy_costs
from autoshard.planners.proxies import size_proxy
from autoshard.planners.report import plans_report
from autoshard.planners.sharding_options import ROW_TYPES
from autoshard.planners.unit_preparation import prepare_units
from autoshard.planning.compare import shard_warnings
from autoshard.planning.kernels import kernel_notes, with_kernels
from autoshard.planning.options import Models, PlanOptions
from autoshard.planning.registry import PLANNERS, available_planners, planner_spec, policy_warnings
from autoshard.planning.report import PlanningReport
from autoshard.planning.runs import PlannerRun, RunOutcome, run_planners

Runner = Callable[[Sequence[str], Workload, Topology, PlanOptions], Sequence[PlannerRun]]
"""Runs the named planners on a task and answers each one's ``PlannerRun``, in the order given
(or grouped, cheap first): ``run_planners`` in this process by default; the service's runs them in
its planning workers, under the request's deadline."""


class NoPlanInTime(PlannerError):
    """No planner planned before the deadline (or its time budget): ``planners`` are those cut short."""

    def __init__(self, planners: Sequence[str]) -> None:
        super().__init__(
            PlannerErrorKind.TIME_BUDGET,
            f"no planner finished within the time budget ({', '.join(planners)})",
            ("allow more time", "or ask for cheaper planners (the heuristics plan in milliseconds)"),
        )
        self.planners = tuple(planners)

    def __reduce__(self):  # type: ignore[no-untyped-def]  # pickled whole across processes
        return (type(self), (self.planners,))


def plan(
    workload: Workload,
    topology: Topology,
    models: Models = Models(),
    options: PlanOptions = PlanOptions(),
    runner: Runner | None = None,
) -> PlanningReport:
    """Plan ``workload`` on ``topology`` with the planners ``options`` names (None: every one
    that can run with ``models``), priced by ``models``' cost model (with its all-to-all, if
    any) or, without one, by a proxy, and report the plans side by side, the best flagged.

    In order:

    1. The planners: an unknown name raises, and so do names of which none can run here;
       without names, those that cannot run are skipped.
       ``check_request``: tables the cost model cannot answer, constraints no plan can meet and a
       workload that fits no way raise (below); mild extrapolation becomes ``warnings``.
    2. The planners run (``runner``; default ``run_planners`` here): each planner's plan, or why
       it has none. Heuristics place by their proxies and are priced by the model after.
    3. The report (``PlanningReport``): every plan priced alike, its devices, expected max under
       the profile's measured device errors, the skipped planners with their reasons, what the
       deadline cut short, the warnings; with ``options.stats`` the best plan's stats, with
       ``options.torchrec_export`` each plan's TorchRec sharding. ``to_dict()`` is its JSON.

    Plans are deterministic given the inputs (the seeded planners take ``options.seed``).

    Raises:
        InputError: a table the cost model cannot answer (a precision or optimizer it never saw;
            ``where`` names the table), a placement pin past the topology (``where`` is
            ``placement``), an unknown planner name.
        PlannerError: constraints no plan can meet (``ConstraintsConflict``, with the
            workload's field), a workload that cannot fit whatever the planner
            (``INSUFFICIENT_MEMORY``), a planner named that cannot run here (``UNAVAILABLE``), or,
            when no planner planned, the first planner's error.
        NoPlanInTime: no planner planned before the deadline (``planners``: those cut short).
    """
    names, unavailable = _planners(options, models)
    workload = with_kernels(models.cost_model, workload, topology)
    warnings = check_request(workload, topology, models, options)
    run = runner or (lambda n, w, t, o: run_planners(n, w, t, models, o))
    runs = run(names, workload, topology, options)
    report = _report(workload, topology, models, options, unavailable, runs, warnings)
    report = replace(report, warnings=(*report.warnings, *kernel_notes(report.best_plan)))
    return report.with_stats(report.best_plan, models) if options.stats else report


def check_request(workload: Workload, topology: Topology, models: Models, options: PlanOptions) -> tuple[str, ...]:
    """What ``plan`` refuses before any planner runs (see its Raises), and the cost model's
    warnings on the workload's tables (inputs beyond its trained ranges)."""
    model = bound_to_task(models.cost_model, workload, topology)  # as it prices: a sharded shard's B x W bags
    warnings = model.check_workload(workload, None) if model is not None else ()
    try:
        check_constraints(workload, topology, options.sharding_types)
    except InputError as error:  # a pin past the topology: a placement constraint's field
        raise error.located("placement") from None
    if options.sharding_types & ROW_TYPES:  # a table too large for a device can be row-sharded
        check_total(workload.memory_bytes, topology)
    else:  # with splits if any planner may split
        any_splits = PlannerContext(allow_column_split=options.allow_column_split).any_splits
        prepare_units(workload, topology, proxy_costs(size_proxy), any_splits)
    return tuple(warnings)


def _planners(options: PlanOptions, models: Models) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """The planners to run, and (planner, why not) for those of "every planner" that cannot run;
    planners named of which none can run raise the first one's ``PlannerError(UNAVAILABLE)``."""
    context = PlannerContext(models.cost_model, models.policy)
    if options.planners is None:
        names, unavailable = available_planners(context, defaults_only=False)
        return tuple(names), unavailable
    unmet = [planner_spec(name).unmet(context) for name in options.planners]  # an unknown name: InputError
    if options.planners and all(unmet):  # none of them can run: say why the first cannot
        raise unmet[0]  # type: ignore[misc]
    return options.planners, []


def _report(
    workload: Workload,
    topology: Topology,
    models: Models,
    options: PlanOptions,
    unavailable: list[tuple[str, str]],
    runs: Sequence[PlannerRun],
    warnings: tuple[str, ...],
) -> PlanningReport:
    """The report of the runs (``NoPlanInTime`` or the first planner's error when none planned)."""
    planned = [r for r in runs if r.outcome is RunOutcome.OK and r.plan is not None]
    timed_out = tuple(r.name for r in runs if r.outcome is RunOutcome.LATE)
    skipped = [*unavailable, *((r.name, r.reason or "no plan") for r in runs if r.outcome in _FAILED)]
    if models.missing:  # say why the cost-model planners had no model
        skipped = [(n, f"{r} ({models.missing})" if _needs_model(n) else r) for n, r in skipped]
    if not planned:
        raise _no_plan(runs, timed_out, skipped)
    plans = tuple(r.plan for r in planned if r.plan is not None)
    comparison = plans_report(
        workload, topology, plans, skipped, models.cost_unit, models.device_errors, models.communication
    )
    return PlanningReport(
        workload,
        topology,
        comparison,
        plans,
        (
            *warnings,
            *policy_warnings(models.policy, models.cost_model, (p.planner for p in plans)),
            *shard_warnings(models.cost_model, plans),
            *communication_warnings(models.communication, topology),
        ),
        models.profile,
        timed_out,
        tuple(r.export for r in planned) if options.torchrec_export else (),
    )


_FAILED = (RunOutcome.SKIPPED, RunOutcome.ERROR)


def _needs_model(name: str) -> bool:
    return name in PLANNERS and PLANNERS[name].needs_cost_model


def _no_plan(runs: Sequence[PlannerRun], timed_out: tuple[str, ...], skipped: list[tuple[str, str]]) -> Exception:
    """Why no planner planned: the deadline, else the first typed error of a planner."""
    if timed_out:
        return NoPlanInTime(timed_out)
    for error in (r.error for r in runs if r.error is not None):
        if isinstance(error, PlannerError) and error.kind is PlannerErrorKind.TIME_BUDGET:
            return NoPlanInTime([name for name, _ in skipped])
        if isinstance(error, (PlannerError, InputError)):
            return error
    if any(r.outcome is RunOutcome.ERROR for r in runs):
        return RuntimeError("no planner returned a plan: " + "; ".join(f"{n}: {r}" for n, r in skipped))
    return PlannerError(PlannerErrorKind.UNAVAILABLE, "no planner could run", ("see the skipped planners",))
