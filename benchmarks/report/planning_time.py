"""Section 2, planning time: ``benchmarks/planning_speed.py`` sweeps tables and devices, every
default planner and TorchRec's on one core, against the 1,000 x 128 target."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.report.page import Page, failed, pyplot, relative
from benchmarks.report.running import Run, load, run_command
from benchmarks.report.settings import COLOURS, OURS, Settings


def stage_planning_time(run: Run) -> None:
    """Time the planners on the mode's tasks; the rows to ``planning_time.json``."""
    s = run.settings
    run_command(
        run,
        "planning_time",
        [
            sys.executable,
            "benchmarks/planning_speed.py",
            "--tasks",
            s.speed_tasks,
            "--repeats",
            str(s.speed_repeats),
            "--timeout",
            f"{s.speed_timeout_s:g}",
            "--planners",
            s.speed_planners,
            "--model",
            str(run.model),
            "--out",
            str(run.stage_file("planning_time")),
        ],
    )


def planning_time(report: dict) -> dict:
    """Rows by task, and the 1 s target: every default planner's time on its task."""
    rows = report["rows"]
    target = report.get("target", {"tables": 1000, "devices": 128, "seconds": 1.0})
    key = f"{target['tables']}x{target['devices']}"
    at_target = {r["planner"]: r for r in rows if r["task"] == key}
    ours = [p for p in report.get("planners", []) if not p.startswith("torchrec")]
    missing = [p for p in ours if p not in at_target or "median_s" not in at_target[p]]
    over = sorted(
        (p for p in ours if p in at_target and at_target[p].get("median_s", 0) > target["seconds"]),
        key=lambda p: -at_target[p]["median_s"],
    )
    return {
        "rows": rows,
        "target": target,
        "target_task": key,
        "at_target": at_target,
        "over_target": over,
        "target_not_run": missing,
        "planners": report.get("planners", []),
        "repeats": report.get("repeats"),
        "timeout_s": report.get("timeout_s"),
    }


def _task_size(task: str) -> tuple[int, int]:
    """``TxD`` as (tables, devices)."""
    t, d = task.split("x")
    return int(t), int(d)


# ---------------------------------------------------------------------------------------------
# the figure


def figure_planning_time(speed: dict, settings: Settings, path: Path) -> None:
    """Two log-log panels: time against tables at a fixed device count, and against devices at a
    fixed table count; planners stopped at the timeout drawn as open triangles."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    sweeps = (
        (axes[0], 1, settings.speed_tables_at, 0, f"tables, at {settings.speed_tables_at} devices"),
        (axes[1], 0, settings.speed_devices_at, 1, f"devices, at {settings.speed_devices_at} tables"),
    )
    for ax, fixed_index, fixed, x_index, label in sweeps:
        _draw_sweep(ax, speed, (fixed_index, fixed, x_index))
        ax.set_xlabel(label)
        ax.grid(which="major", alpha=0.3)
    axes[0].set_ylabel("planning time, s (median, one core)")
    handles, labels = axes[0].get_legend_handles_labels()
    more = [(h, lab) for h, lab in zip(*axes[1].get_legend_handles_labels()) if lab not in labels]
    handles += [h for h, _ in more]
    labels += [lab for _, lab in more]
    fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.suptitle("Planning time against table count and device count (log-log)")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw_sweep(ax, speed: dict, sweep: tuple[int, int, int]) -> None:
    """One panel: each planner's times on the tasks whose size at ``fixed_index`` is ``fixed``,
    against the size at ``x_index``; the target as a dashed line."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    fixed_index, fixed, x_index = sweep
    planners = list(dict.fromkeys(r["planner"] for r in speed["rows"]))
    markers = dict(zip(planners, "os^v<>pPX*hd"))
    for planner in planners:
        points, stopped = [], []
        for r in speed["rows"]:
            size = _task_size(r["task"])
            if r["planner"] != planner or size[fixed_index] != fixed:
                continue
            if "median_s" in r:
                points.append((size[x_index], r["median_s"]))
            else:
                stopped.append((size[x_index], r["timed_out_after_s"]))
        points.sort()
        colour = COLOURS.get("torchrec" if planner.startswith("torchrec") else planner)
        style = "-" if planner in OURS or planner.startswith("torchrec") else ":"
        if points:
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker=markers[planner],
                linestyle=style,
                color=colour,
                label=planner,
                markersize=4,
            )
        if stopped:
            ax.plot(
                [p[0] for p in stopped],
                [p[1] for p in stopped],
                marker="^",
                markerfacecolor="none",
                linestyle="none",
                color=colour or "black",
                markersize=8,
                label=f"{planner}: timed out (at least)",
            )
    ax.axhline(speed["target"]["seconds"], color="grey", linestyle="--", linewidth=0.9)
    ax.text(
        0.02,
        speed["target"]["seconds"] * 1.12,
        f"{speed['target']['seconds']:g} s target ({speed['target_task']})",
        fontsize=7,
        color="grey",
        transform=ax.get_yaxis_transform(),
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = [_task_size(r["task"]) for r in speed["rows"]]
    xs = sorted({size[x_index] for size in sizes if size[fixed_index] == fixed})
    if xs:
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_major_formatter(FixedFormatter([f"{x:,}" for x in xs]))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(xs[0] / 1.5, xs[-1] * 1.5)


# ---------------------------------------------------------------------------------------------
# the section


def section_planning_time(page: Page, run: Run) -> None:
    """The section: how the planners were timed, the figure, the 1 s goal and a row per task."""
    page.add("## 3. Planning time", "")
    report = load(run.stage_file("planning_time"))
    if report is None:
        page.add(failed(run, "planning_time"), "")
        return
    speed = planning_time(report)
    image = run.images / "planning_time.png"
    figure_planning_time(speed, run.settings, image)
    page.add(
        f"`benchmarks/planning_speed.py`: synthetic workloads of T tables on D devices (memory binding: 1.3x an "
        f"even share), every default planner and TorchRec's planner (`torchrec`) on one core, "
        f"{speed['repeats']} round(s) interleaved after an untimed warm-up; median wall time. A planner past "
        f"{speed['timeout_s']:g} s is stopped and not run on larger tasks (open triangles: at least that long).",
        "",
        f"![Planning time]({relative(image, run.out.parent)})",
        "",
    )
    _target_goal(page, run, speed)
    page.add("| task (T x D) | " + " | ".join(speed["planners"]) + " |", "| --- |" + " --- |" * len(speed["planners"]))
    # by size (tables x devices), ties by name: a set's order alone would change from run to run
    for task in sorted({r["task"] for r in speed["rows"]}, key=lambda t: (_task_size(t)[0] * _task_size(t)[1], t)):
        cells = []
        for planner in speed["planners"]:
            r = next((x for x in speed["rows"] if x["task"] == task and x["planner"] == planner), None)
            cells.append(
                "-" if r is None else f"{r['median_s']:.3f}" if "median_s" in r else f"> {r['timed_out_after_s']:g}"
            )
        page.add(f"| {task} | " + " | ".join(cells) + " |")
    page.add("", "Seconds, median. Predicted max of each plan: in the run's JSON.", "")


def _target_goal(page: Page, run: Run, speed: dict) -> None:
    """Judge the target (every default planner within its seconds on its task), or say why not."""
    target = speed["target"]
    over = speed["over_target"]
    at = speed["at_target"]
    listed = ", ".join(f"{p} {at[p]['median_s']:.2f} s" for p in speed["planners"] if p in at and "median_s" in at[p])
    timed = [p for p in speed["planners"] if p in at and "median_s" not in at[p]]
    goal = (
        f"every default planner plans {target['tables']:,} tables x {target['devices']} devices in <= "
        f"{target['seconds']:g} s on one core"
    )
    if not at or run.settings.speed_planners != "default":
        why = "not every default planner" if at else f"no {speed['target_task']} task"
        page.goal(goal, f"not judged: this run timed {why}", None)
        page.add(f"The goal ({goal}) is not judged: this run timed {why}.", "")
        return
    met = not over and not speed["target_not_run"]
    verdict = page.goal(
        goal,
        (f"slowest: {over[0]} {at[over[0]]['median_s']:.2f} s" if over else "all within")
        + (f" ({speed['repeats']} round)" if speed["repeats"] == 1 else ""),
        met,
    )
    page.add(
        f"At {speed['target_task']}: {listed}"
        + (f"; {', '.join(timed)} stopped at {speed['timeout_s']:g} s" if timed else "")
        + f". Goal (every default planner <= {target['seconds']:g} s): {verdict}"
        + (f": {', '.join(over)} over it" if over else "")
        + (f"; not timed: {', '.join(speed['target_not_run'])}" if speed["target_not_run"] else "")
        + ".",
        "",
    )
    if not met and speed["repeats"] == 1:
        page.add(
            "This is one round on a shared 2-core machine; the full mode's three rounds give the medians the "
            "goal is judged on.",
            "",
        )
