"""Section 1, plan quality: ``autoshard evaluate --measure`` on a suite, our planners' measured max
against the best heuristic's and TorchRec's planner's, paired by round, beside the predicted ratios."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.report.page import Page, failed, fmt_ratio, pyplot, relative
from benchmarks.report.running import Run, autoshard_argv, load, run_command
from benchmarks.report.settings import COLOURS, HEURISTICS, OURS, QUALITY_TARGET, ROOT

RATIO_TICKS = (0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)
"""The figure's y ticks (log scale), those within its range shown."""


def stage_plan_quality(run: Run) -> None:
    """Measure every plan of the suite's tasks; the report's JSON to ``plan_quality.json``."""
    s = run.settings
    folder = run.work / "evaluate"
    ok = run_command(
        run,
        "plan_quality",
        autoshard_argv(
            "evaluate",
            s.suite,
            "--measure",
            "--rounds",
            str(s.rounds),
            "--planners",
            s.planners,
            "--drift-samples",
            str(s.drift_samples),
            "--model",
            str(run.model),
            "--no-communication",  # one device measures compute: plan and predict what it measures
            "--out",
            str(folder),
            "--json",
        ),
        stdout_file=run.stage_file("plan_quality"),
    )
    if not ok:
        run.stage_file("plan_quality").unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# reading the evaluation


def round_maxes(row: dict) -> list[float]:
    """A planner's measured max device time in each round."""
    return [max(r) for r in row["measured_round_device_ms"]]


def plan_quality(report: dict) -> dict:
    """Per task and planner of ours: measured max against the best heuristic's (the evaluation's
    own pairing by round, 95% interval, verdict) and against TorchRec's planner's (paired by round
    the same way), each beside the predicted ratio; and the geometric means over the tasks."""
    rows = []
    reference = None
    for task in report["tasks"]:
        by = {p["planner"]: p for p in task["planners"] if p.get("measured_round_device_ms")}
        torchrec = next((n for n in ("torchrec_cpu", "torchrec") if n in by), None)
        reference = reference or torchrec
        rows += _task_rows(task, by, torchrec)
    drift = report.get("machine_drift", {})
    return {
        "suite": report["suite"],
        "settings": report["settings"],
        "torchrec": reference,
        "rows": rows,
        "summary": _summary(rows),
        "drift": {k: drift[k] for k in ("before", "after") if k in drift},
        "traces": drift.get("traces"),
    }


def _task_rows(task: dict, by: dict[str, dict], torchrec: str | None) -> list[dict]:
    """One task's rows: each planner of ours that the evaluation paired with a heuristic."""
    from autoshard.core.stats import ratio_ci95, verdict

    rows = []
    against = {a["planner"]: a for a in task.get("against_best_heuristic", [])}
    held_out = {a["planner"]: a for a in task.get("against_held_out_heuristic", [])}
    for planner in OURS:
        if planner not in by or planner not in against:
            continue
        a = against[planner]
        predicted = by[planner]["predicted_max_ms"]
        row = {
            "task": task["task"],
            "tables": task["tables"],
            "devices": task["num_devices"],
            "planner": planner,
            "measured_max_ms": by[planner]["measured_max_ms"],
            "predicted_max_ms": predicted,
            "heuristic": a["heuristic"],
            "vs_heuristic": {
                "ratio": a["ratio"],
                "ci95": a["ci95"],
                "verdict": a["verdict"],
                "predicted": predicted / by[a["heuristic"]]["predicted_max_ms"],
            },
        }
        if planner in held_out:
            h = held_out[planner]
            row["vs_held_out_heuristic"] = {"ratio": h["ratio"], "ci95": h["ci95"], "verdict": h["verdict"]}
        if torchrec:
            ratio, low, high = ratio_ci95(round_maxes(by[planner]), round_maxes(by[torchrec]))
            row["torchrec"] = torchrec
            row["vs_torchrec"] = {
                "ratio": ratio,
                "ci95": [low, high],
                "verdict": verdict(low, high) if not math.isnan(low) else "tie",
                "predicted": predicted / by[torchrec]["predicted_max_ms"],
            }
        rows.append(row)
    return rows


def _summary(rows: list[dict]) -> dict:
    """Per planner of ours: its task count, and against each reference the geometric means
    (measured, predicted) and the count of each verdict."""
    from autoshard.core.stats import geomean

    summary: dict[str, dict] = {}
    for planner in OURS:
        mine = [r for r in rows if r["planner"] == planner]
        if not mine:
            continue
        summary[planner] = {"tasks": len(mine)}
        for key in ("vs_heuristic", "vs_torchrec"):
            got = [r[key] for r in mine if key in r]
            if got:
                summary[planner][key] = {
                    "geomean": geomean([g["ratio"] for g in got]),
                    "geomean_predicted": geomean([g["predicted"] for g in got]),
                    **{v: sum(g["verdict"] == v for g in got) for v in ("faster", "tie", "slower")},
                }
    return summary


# ---------------------------------------------------------------------------------------------
# the figure


def figure_plan_quality(quality: dict, path: Path) -> None:
    """Measured ratios (dots, 95% CI) and predicted ones (diamonds), per task and planner, one panel
    per reference (the best heuristic, TorchRec's planner), on a shared log axis."""
    plt = pyplot()
    panels = [("vs_heuristic", "against the best heuristic (chosen per task after measuring)")]
    if quality["torchrec"]:
        panels.append(("vs_torchrec", f"against TorchRec's planner ({quality['torchrec']})"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), sharey=True, squeeze=False)
    values: list[float] = []
    for ax, (key, title) in zip(axes[0], panels):
        values += _draw_panel(ax, quality["rows"], key, title)
    _ratio_axis(axes[0], values)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"Plan quality: measured (dots, 95% CI over {quality['settings'].get('rounds')} rounds) and predicted")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw_panel(ax, rows: list[dict], key: str, title: str) -> list[float]:
    """One reference's panel; returns the values drawn (for the shared axis range)."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    planners = [p for p in OURS if any(r["planner"] == p for r in rows)]
    width = 0.8 / max(len(planners), 1)
    heuristic = {r["task"]: r["heuristic"] for r in rows}
    values = []
    for i, planner in enumerate(planners):
        for j, task in enumerate(tasks):
            row = next((r for r in rows if r["task"] == task and r["planner"] == planner), None)
            if row is None or key not in row:
                continue
            got = row[key]
            x = j - 0.4 + width * (i + 0.5)
            low, high = got["ci95"]
            low = got["ratio"] if math.isnan(low) else low
            high = got["ratio"] if math.isnan(high) else high
            ax.errorbar(
                x - width * 0.15,
                got["ratio"],
                yerr=[[got["ratio"] - low], [high - got["ratio"]]],
                fmt="o",
                color=COLOURS[planner],
                capsize=3,
                label=f"{planner}, measured (95% CI)" if j == 0 else None,
            )
            ax.plot(
                x + width * 0.2,
                got["predicted"],
                marker="D",
                markerfacecolor="none",
                color=COLOURS[planner],
                linestyle="none",
                label=f"{planner}, predicted" if j == 0 else None,
            )
            values += [got["ratio"], got["predicted"], low, high]
    ax.axhline(1.0, color="grey", linewidth=0.9, linestyle="--")
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(
        [task + (f"\nvs {heuristic[task]}" if key == "vs_heuristic" and task in heuristic else "") for task in tasks],
        rotation=20,
        ha="right",
    )
    ax.set_title(title)
    ax.set_yscale("log")
    ax.grid(axis="y", which="both", alpha=0.3)
    return values


def _ratio_axis(axes, values: list[float]) -> None:
    """The panels' shared log axis: the values' range (within 0.25-4, always holding 0.9-1.1)."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    finite = [v for v in values if v > 0 and math.isfinite(v)]
    low, high = (max(min(finite) / 1.1, 0.25), min(max(finite) * 1.1, 4.0)) if finite else (0.5, 2.0)
    low, high = min(low, 0.9), max(high, 1.1)
    ticks = [t for t in RATIO_TICKS if low <= t <= high]
    for ax in axes:
        ax.set_ylim(low, high)
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0].set_yticklabels([f"{t:g}" for t in ticks])
    axes[0].set_ylabel("max device time, ratio (< 1: ours faster)")


# ---------------------------------------------------------------------------------------------
# the section


def section_plan_quality(page: Page, run: Run) -> None:
    """The section: how the plans were measured, the figure, the goals, the drift check and a row
    per task and planner."""
    page.add("## 1. Plan quality, predicted and measured", "")
    report = load(run.stage_file("plan_quality"))
    if report is None:
        page.add(failed(run, "plan_quality"), "")
        return
    quality = plan_quality(report)
    if not quality["rows"]:
        page.add("The evaluation measured no plan of ours against a heuristic: nothing to show.", "")
        return
    image = run.images / "plan_quality.png"
    figure_plan_quality(quality, image)
    s = quality["settings"]
    heuristics = [p for p in s.get("planners") or HEURISTICS if p in HEURISTICS]
    page.add(
        f"`autoshard evaluate {run.settings.suite} --measure --rounds {s.get('rounds')} --no-communication`: every "
        "plan of every task run on this machine (FBGEMM TBE, forward + backward + update, one thread), planned and "
        "predicted for compute alone, which is what one device measures (communication is judged in section 2), "
        "plans interleaved in each "
        f"round; the ratio of two plans' max device time is paired by round, with a 95% t-interval. Profile "
        f"`{s.get('profile')}`; planners {', '.join(f'`{p}`' for p in s.get('planners') or ['all'])}. The best "
        f"heuristic is the one of {', '.join(heuristics)} with the lowest measured max on each task, chosen after "
        "measuring (which flatters the heuristics). Verdict: faster or slower when the whole interval is below "
        "or above 1, else tie.",
        "",
        f"![Plan quality]({relative(image, run.out.parent)})",
        "",
    )
    page.add(*_goals_and_notes(page, quality), "")
    if any(r["vs_heuristic"]["verdict"] == "tie" for r in quality["rows"]) and run.settings.rounds <= 4:
        page.add(
            f"With {run.settings.rounds} rounds the intervals are wide (a t-interval on {run.settings.rounds - 1} "
            "degrees of freedom): a tie here says the run could not tell the plans apart, not that they are equal.",
            "",
        )
    _drift_note(page, quality)
    _rows_table(page, quality)


def _goals_and_notes(page: Page, quality: dict) -> list[str]:
    """Judge cost_greedy's and rl's goals against the best heuristic; a note per planner and
    reference (TorchRec's planner has no goal)."""
    summary = quality["summary"]
    cg = summary.get("cost_greedy", {})
    notes = []
    if "vs_heuristic" in cg:
        got = cg["vs_heuristic"]
        v1 = page.goal(
            "cost_greedy's measured max <= the best heuristic's on every task (no task slower)",
            f"{got['slower']} slower, {got['tie']} tied, {got['faster']} faster of {cg['tasks']} tasks",
            got["slower"] == 0,
        )
        v2 = page.goal(
            f"cost_greedy's measured max over the best heuristic's, geometric mean <= {QUALITY_TARGET}",
            f"{got['geomean']:.3f} (predicted {got['geomean_predicted']:.3f})",
            got["geomean"] <= QUALITY_TARGET,
        )
        notes.append(
            f"- cost_greedy against the best heuristic: geometric mean **{got['geomean']:.3f}** measured "
            f"(predicted {got['geomean_predicted']:.3f}); {got['faster']} faster, {got['tie']} tied, "
            f"{got['slower']} slower. Goal no task slower: {v1}; goal geometric mean <= {QUALITY_TARGET}: {v2}."
        )
    rl = summary.get("rl", {}).get("vs_heuristic")
    if rl:
        v = page.goal(
            "rl's measured max <= the best heuristic's on every task",
            f"{rl['slower']} slower of {summary['rl']['tasks']} tasks (geometric mean {rl['geomean']:.3f})",
            rl["slower"] == 0,
        )
        notes.append(
            f"- rl against the best heuristic: geometric mean **{rl['geomean']:.3f}** measured (predicted "
            f"{rl['geomean_predicted']:.3f}); {rl['slower']} slower. Goal no task slower: {v}."
        )
    for planner, got in summary.items():
        tr = got.get("vs_torchrec")
        if tr:
            notes.append(
                f"- {planner} against TorchRec's planner (`{quality['torchrec']}`): geometric mean "
                f"**{tr['geomean']:.3f}** measured (predicted {tr['geomean_predicted']:.3f}); {tr['faster']} "
                f"faster, {tr['tie']} tied, {tr['slower']} slower (no goal set)."
            )
    return notes


def _drift_note(page: Page, quality: dict) -> None:
    """Whether this machine measures like the profile's traces (``bench drift`` before and after)."""
    drift = quality["drift"]
    if not drift:
        return
    before, after = drift.get("before", {}), drift.get("after", {})
    holds = all(d.get("holds") for d in (before, after) if d)
    text = "; ".join(
        f"{when}: median ratio {d['median_ratio']:.2f} (range {d['ratio_range'][0]:.2f}-{d['ratio_range'][1]:.2f})"
        for when, d in (("before", before), ("after", after))
        if d
    )
    if holds:
        page.add(f"The machine measures like the profile's traces (`bench drift`, {text}).", "")
        return
    device = before.get("this_device") or after.get("this_device")
    traced = before.get("traced_device") or after.get("traced_device")
    page.add(
        f"**The profile's traces do not describe this machine** (`bench drift` on "
        f"`{relative(Path(quality['traces']), ROOT) if quality['traces'] else '?'}`: {text}; traced on "
        f"'{traced}', measured here on '{device}'). Predictions are on the traces' scale, not this "
        "machine's, and cost_greedy optimised for the profile's machine: the measured ratios are what this "
        "profile's plans give here. Measured figures against each other (paired by round) still hold.",
        "",
    )


def _rows_table(page: Page, quality: dict) -> None:
    """A row per task and planner: against the best heuristic and TorchRec's planner."""
    page.add(
        "| task | planner | best heuristic | measured vs it [95% CI] | verdict | predicted | "
        f"measured vs {quality['torchrec'] or 'TorchRec'} [95% CI] | verdict | predicted |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    )
    for r in quality["rows"]:
        h, t = r["vs_heuristic"], r.get("vs_torchrec")
        page.add(
            f"| {r['task']} ({r['tables']} x {r['devices']}) | {r['planner']} | {r['heuristic']} | {fmt_ratio(h)} | "
            f"{h['verdict']} | {h['predicted']:.3f} | "
            + (f"{fmt_ratio(t)} | {t['verdict']} | {t['predicted']:.3f} |" if t else "- | - | - |")
        )
    page.add("")
