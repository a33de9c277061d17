"""Plan-aware traces: measure the device sets that planners create, in passes, into a trace file.

A cost model trained on random sets is accurate on random sets; planners build other sets (a
giant with small company, many similar tables) and a search goes exactly where the model is
wrong. This module measures the sets it is given (which come from planning tasks: see
``autoshard bench plans``), each distinct set once per pass at its task's batch size, with the
anchor traces' other benchmark settings, so that the two files train and evaluate one model
together (``cost_model.traces.store.merge_traces``). Every sample is ``kind: "plan"``, records its
``batch`` and lists the ``(task, planner, device)`` that hold it; a rerun with the same sets resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from autoshard.core.errors import InputError
from autoshard.core.types import DeviceSet, Table
from cost_model.bench.harness import check_benchable, measure
from cost_model.profile import DeviceProfile, detect_profile, malloc_settings_active
from cost_model.traces.store import TraceSet, TraceWriter, make_header, measured_passes

PlanMembership = tuple[str, str, int]
"""(task, planner, device)"""


def distinct_sets(device_sets: Sequence[DeviceSet]) -> list[tuple[tuple[Table, ...], int, list[PlanMembership]]]:
    """Each distinct (table set, batch size) once (order of first appearance), with every plan
    device holding it."""
    found: dict[tuple[frozenset[str], int], tuple[tuple[Table, ...], int, list[PlanMembership]]] = {}
    for d in device_sets:
        key = (frozenset(t.name for t in d.tables), d.batch_size)
        found.setdefault(key, (tuple(sorted(d.tables, key=lambda t: t.name)), d.batch_size, []))[2].append(d.member)
    return list(found.values())


def check_same_machine(here: DeviceProfile, anchors: DeviceProfile) -> None:
    """Plan sets are labels beside the anchors': refuse to measure them on another machine (or
    mode) than the anchors'. Anchors recorded before traces named the CPU's family and model
    (``cpu`` None) cannot tell whether a machine is theirs, and the error says so."""
    if here.id == anchors.id:
        return
    if anchors.cpu is None and here.cpu is not None and replace(here, cpu=None).id == anchors.id:
        raise InputError(
            "traces",
            f"this machine is profile {here.id}; the anchor traces ({anchors.id}) were recorded "
            "before traces named the CPU's family and model, so they cannot tell whether this machine "
            "is theirs",
            "collect anchor traces here (`autoshard bench collect`) and measure plan sets "
            "against them; `autoshard bench drift` tells how this machine compares with the old ones",
        )
    raise InputError(
        "traces",
        f"this machine is profile {here.id}, the anchor traces are {anchors.id}",
        "measure plan sets on the machine (and with the mode) the anchor traces came from",
    )


def collect_plan_sets(
    memberships: Sequence[DeviceSet],
    anchors: TraceSet,
    split: str,
    out: Path,
    passes: int,
    plan: dict,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> int:
    """Measure every distinct set of ``memberships`` (``passes`` times, pass by pass) into ``out``
    with the benchmark settings of ``anchors``; ``plan`` (how the sets were made) goes into the
    header, so that a resume with other settings is refused. Returns how many were measured now."""
    bench = anchors.bench_config()
    sets = distinct_sets(memberships)
    check_benchable([t for tables, _, _ in sets for t in tables], bench.mode)
    profile = detect_profile(bench.device, bench.mode, bench.threads)
    check_same_machine(profile, anchors.profile)
    bench_dict = {**asdict(bench), "mode": bench.mode.value, "malloc_settings": malloc_settings_active()}
    header = make_header(
        profile,
        bench_dict,
        plan,
        [(t, split) for t in sorted({t for tables, _, _ in sets for t in tables}, key=lambda t: t.name)],
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    done = measured_passes(out, header)
    todo = [(p, i) for p in range(passes) for i in range(len(sets)) if (i, p) not in done]
    total, measured = len(sets) * passes, 0
    on_progress(total - len(todo), total)
    if not todo:
        return 0
    writer = TraceWriter(out, header)
    try:
        for pass_index, i in todo:
            tables, batch, members = sets[i]
            m = measure(tables, replace(bench, batch_size=batch), seed=1_000_003 * (pass_index + 1) + i)
            writer.append(
                {
                    "type": "sample",
                    "id": i,
                    "pass": pass_index,
                    "kind": "plan",
                    "split": split,
                    "tables": [t.name for t in tables],
                    "batch": batch,
                    "plans": [list(p) for p in members],
                    "fwd": m.forward.to_dict(),
                    "bwd": m.backward.to_dict(),
                    "total": m.total.to_dict(),
                }
            )
            measured += 1
            on_progress(total - len(todo) + measured, total)
    finally:
        writer.close()
    return measured
