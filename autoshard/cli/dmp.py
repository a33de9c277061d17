"""`plan --verify dmp` and `evaluate --dmp`: the best distinct plans run under TorchRec's DMP on
this machine, one process a rank (``autoshard.torchrec.dmp_verification``); what the commands
print and add to their JSON."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from typer.core import TyperCommand

from autoshard.core.communication import CommunicationModel
from autoshard.core.errors import InputError
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload

if TYPE_CHECKING:
    from rich.console import Console

    from autoshard.planning.options import Models
    from autoshard.planning.report import PlanningReport
    from autoshard.torchrec.dmp_verification import DmpVerification
    from autoshard.torchrec.judges import Judges

VERIFY_METHODS = ("bench", "dmp")
"""``--verify``'s methods: ``bench`` measures each device's shards with the microbenchmark (the
all-to-all modelled), ``dmp`` runs the plans end to end under TorchRec's DMP."""
DMP_STEPS, DMP_WARMUPS = 5, 2


class VerifyMethodCommand(TyperCommand):
    """A command whose ``--verify`` takes an optional method: alone, it means ``bench``
    (``autoshard plan W --verify`` as before; ``--verify dmp`` for DMP)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: Typer's own click Context
        return super().parse_args(ctx, with_verify_method(args))


def with_verify_method(args: Sequence[str]) -> list[str]:
    """``args`` with ``bench`` after each ``--verify`` that names no method (before any ``--``)."""
    out: list[str] = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg == "--":
            return out + list(args[i + 1 :])
        if arg == "--verify" and (i + 1 == len(args) or args[i + 1] not in VERIFY_METHODS):
            out.append("bench")
    return out


def verify_method(value: str | None) -> str | None:
    """``--verify``'s value, checked (None: no verification)."""
    if value is not None and value not in VERIFY_METHODS:
        raise InputError("--verify", f"unknown method {value!r}", f"use {' or '.join(VERIFY_METHODS)}")
    return value


def run_dmp_verification(
    plans: Sequence[ShardingPlan],
    workload: Workload,
    topology: Topology,
    cost_model: CostModel | None,
    communication: CommunicationModel | None,
    top: int,
    rounds: int,
    row_cap_mb: int,
    seed: int = 0,
) -> DmpVerification:
    """The ``top`` best-predicted distinct plans under DMP: one rank a device of ``topology``
    (its hosts emulated on this machine), the workload's batch per rank, tables capped at
    ``row_cap_mb`` MiB of rows (as the traces are)."""
    from autoshard.torchrec.dmp_run import DistributedConfig
    from autoshard.torchrec.dmp_verification import verify_dmp
    from autoshard.torchrec.dmp_verify import DmpVerifyConfig

    if cost_model is None:
        raise InputError("--verify", "dmp verification sets each rank's prediction beside it", "give a cost model")
    run = DistributedConfig(
        world_size=topology.num_devices,
        local_world_size=topology.local_world_size,
        steps=DMP_STEPS,
        warmups=DMP_WARMUPS,
        batch_size=workload.batch_size,
        row_cap_bytes=row_cap_mb * 2**20,
        seed=seed,
    )
    config = DmpVerifyConfig(
        run, rounds=rounds, namespaces=emulates_hosts(topology), link_gbit=link_gbit(topology), pipeline=True
    )
    return verify_dmp(plans, workload, topology, cost_model, communication, config, top)


def emulates_hosts(topology: Topology) -> bool:
    """Whether each host's ranks run in their own network namespace: on 2 hosts, as root
    (``cost_model.bench.netns``); else every rank on this host's loopback (the report says which)."""
    from cost_model.bench.netns import missing_privilege

    return topology.num_hosts == 2 and missing_privilege() is None


def link_gbit(topology: Topology) -> float:
    """The emulated inter-host link's rate: the topology's, where the user set one, else the
    10 Gbit/s `bench comm` measures the inter tier at."""
    from autoshard.core.types import GIB, INTER_HOST_BW_GBPS

    given = topology.inter_host_bw_gbps
    return 10.0 if given == INTER_HOST_BW_GBPS else given * GIB * 8 / 1e9


def verify_plan_dmp(
    data: dict[str, Any],
    report: PlanningReport,
    models: Models,
    settings: tuple[int, int, int],
    stats: bool,
) -> tuple[PlanningReport, ShardingPlan]:
    """`plan --verify dmp`: the best-predicted distinct plans under DMP (``settings``: how many,
    in how many rounds, the MiB of rows built per table); the verification and the judges join
    ``data`` (the JSON), the tables go to stderr. The plan measured fastest, with its ``stats``
    if asked."""
    from autoshard.cli.support import console

    top, rounds, row_cap_mb = settings
    topology = report.topology
    console.print(
        f"verifying under TorchRec's DMP: the {top} best-predicted distinct plans, {topology.num_devices} ranks "
        f"({topology.num_hosts} emulated hosts of {topology.local_world_size}), {rounds} rounds",
        highlight=False,
    )
    if (note := oversubscription_note(topology)) is not None:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    verification = run_dmp_verification(
        report.plans, report.workload, topology, models.cost_model, models.communication, top, rounds, row_cap_mb
    )
    add_to_report(data, verification)
    print_dmp_verification(verification, console)
    if not stats:
        return report, verification.plan
    report = report.with_stats(verification.plan, models)
    data["plans"][report.stats_of]["stats"] = report.stats.to_dict() if report.stats else None
    return report, verification.plan


def oversubscription_note(topology: Topology) -> str | None:
    """Why timings of this many ranks run slow here, if they do (more ranks than cores)."""
    cores = os.cpu_count() or 1
    if topology.num_devices <= cores:
        return None
    return (
        f"{topology.num_devices} ranks on {cores} cores: oversubscribed, ranks time-share the cores and "
        "their steps measure slower than on their own devices"
    )


def add_to_report(report: dict[str, Any], verification: DmpVerification, plans_key: str = "plans") -> None:
    """The JSON: every plan entry (under ``plans_key``) of a measured candidate gains its
    ``verify``; the report gains ``verification`` (the candidates, the choice) and ``judges``."""
    by_planner = {name: c.to_dict() for c in verification.candidates for name in c.planners}
    for entry in report.get(plans_key, []):
        if entry.get("planner") in by_planner:
            entry["verify"] = by_planner[entry["planner"]]
    summary = verification.to_dict()
    report["judges"] = summary.pop("judges")
    report["verification"] = summary


def print_dmp_verification(verification: DmpVerification, console: Console) -> None:
    """Each candidate's ranks: predicted beside measured, part by part; then the choice and the judges."""
    from rich.table import Table as RichTable

    for candidate in verification.candidates:
        v = candidate.to_dict()
        match = {True: "outputs match the unsharded model", False: "OUTPUTS DIFFER", None: "outputs not checked"}
        table = RichTable(
            title=f"{', '.join(candidate.planners)} under DMP: {v['world_size']} ranks, {v['ranks_per_host']} a host, "
            f"{v['rounds']} rounds ({match[v['outputs_match']]}; {v['network']}); ms, predicted / measured"
        )
        for column in (
            "rank",
            "step",
            "input dist",
            "lookup",
            "output dist",
            "all-reduce",
            "pipelined",
            "TorchRec est.",
        ):
            table.add_column(column)
        for rank in v["ranks"]:
            parts = {p["part"]: p for p in rank["parts"]}
            cells = [_pair(parts[g]["predicted_ms"], parts[g]["measured_ms"]) for g in parts]
            estimate = rank["torchrec_estimate_ms"]
            table.add_row(
                str(rank["rank"]),
                _pair(rank["predicted_ms"], rank["measured_ms"]),
                *cells,
                "-" if rank["pipeline_ms"] is None else f"{rank['pipeline_ms']:.3g}",
                "-" if estimate is None else f"{estimate:.3g}",
            )
        console.print(table)
    chosen = verification.candidates[verification.chosen]
    console.print(f"verified under DMP: the plan of {', '.join(chosen.planners)} (its slowest rank measured fastest)")
    print_judges(verification.judges, console)


def print_judges(judges: Judges, console: Console | None = None) -> None:
    """The judges side by side: each one's max per plan and the plan it prefers; a disagreement,
    said (on ``console``; default: stdout)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = console or Console()
    table = RichTable(title="three judges: each plan's slowest rank (ms; TorchRec's estimate in its own units)")
    table.add_column("judge")
    for name in judges.plans:
        table.add_column(name)
    table.add_column("prefers")
    for verdict in judges.verdicts:
        prefers = verdict.prefers
        table.add_row(
            verdict.judge,
            *("-" if m is None else f"{m:.4g}" for m in verdict.max_ms),
            "-" if prefers is None else judges.plans[prefers],
        )
    console.print(table)
    notes = [f"{v.judge}: {v.note}" for v in judges.verdicts if v.note]
    for note in notes:
        console.print(f"[dim]{note}[/dim]", highlight=False)
    if (message := judges.disagreement()) is not None:
        console.print(f"[yellow]note:[/yellow] {message}", highlight=False)


def _pair(predicted: float | None, measured: float) -> str:
    return f"{'-' if predicted is None else f'{predicted:.3g}'} / {measured:.3g}"


__all__ = [
    "VERIFY_METHODS",
    "VerifyMethodCommand",
    "verify_plan_dmp",
    "with_verify_method",
    "add_to_report",
    "oversubscription_note",
    "print_dmp_verification",
    "print_judges",
    "run_dmp_verification",
    "verify_method",
]
