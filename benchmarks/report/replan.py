"""Section 5, re-planning: ``benchmarks/replan_measured.py`` keeps a deployed plan, moves a few of its
shards or plans from scratch, each with what it moves (and, in the full mode, measured)."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.report.page import Page, failed, fmt_ratio, pyplot, relative
from benchmarks.report.running import Run, load, run_command


def stage_replan(run: Run) -> None:
    """Run the re-planning scenarios; their summary to ``replan/summary.json``."""
    s = run.settings
    run_command(
        run,
        "replan",
        [
            sys.executable,
            "benchmarks/replan_measured.py",
            "--rounds",
            str(s.replan_rounds),
            "--max-moves",
            s.replan_moves,
            *(["--scenarios", s.replan_scenarios] if s.replan_scenarios else []),
            "--model",
            str(run.model),
            "--out",
            str(run.work / "replan"),
        ],
    )


def _short_plan(name: str) -> str:
    """A plan's name as the figure and the table show it."""
    if name.startswith("replan (<= "):
        return f"<= {name.split('<= ')[1].split()[0]} moves"
    return "from scratch" if name == "cost_greedy" else name


def figure_replan(replan: dict, path: Path) -> None:
    """A panel per scenario: each plan's predicted max (bars, labelled with what it moves) and its
    measured max where measured (dots)."""
    plt = pyplot()
    scenarios = replan["scenarios"]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.2 * len(scenarios), 4.2), squeeze=False)
    for ax, (name, scenario) in zip(axes[0], scenarios.items()):
        plans = scenario["plans"]
        labels = [_short_plan(p["plan"]) for p in plans]
        colours = ["tab:gray"] + ["tab:blue"] * (len(plans) - 2) + ["tab:green"]
        bars = ax.bar(range(len(plans)), [p["max_cost_ms"] for p in plans], color=colours[: len(plans)], alpha=0.85)
        ax.bar_label(
            bars,
            labels=[f"{p['shards_moved']} sh.\n{p['bytes_moved'] / 2**30:.1f} GiB" for p in plans],
            fontsize=6,
            padding=1,
        )
        measured = [(i, p) for i, p in enumerate(plans) if p.get("measured_max_ms") is not None]
        if measured:
            ax.plot(
                [i for i, _ in measured],
                [p["measured_max_ms"] for _, p in measured],
                "ko",
                markersize=4,
                label="measured max",
            )
            ax.legend(fontsize=7, loc="lower left")
        ax.set_xticks(range(len(plans)))
        ax.set_xticklabels(labels, rotation=25, ha="right")
        ax.set_title(
            f"{name}\n{scenario['tables_before']} -> {scenario['tables_after']} tables, {scenario['devices']} devices",
            fontsize=8,
        )
        ax.set_ylim(0, max(p["max_cost_ms"] for p in plans) * 1.3)
    axes[0][0].set_ylabel("max device cost, ms (bars: predicted)")
    fig.suptitle("Re-planning a deployed plan: keep it, move a few shards, or plan from scratch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section_replan(page: Page, run: Run) -> None:
    """The section: the scenarios, the figure, a row per plan and how much of the gain each
    scenario's largest move budget recovers."""
    page.add("## 6. Re-planning a deployed plan", "")
    replan = load(run.work / "replan" / "summary.json")
    if replan is None:
        page.add(failed(run, "replan"), "")
        return
    image = run.images / "replan.png"
    figure_replan(replan, image)
    measured = replan["rounds"] > 0
    page.add(
        "`benchmarks/replan_measured.py`: each scenario plans the workload as it was (`autoshard plan --planner "
        "cost_greedy --format torchrec`), changes it, then runs `autoshard replan` on the changed one: the plan "
        "kept as it is (new tables placed, nothing moved), re-plans moving at most "
        f"{', '.join(str(m) for m in replan['max_moves'])} of its shards, and cost_greedy from scratch, each "
        "with the shards and GiB (weights and optimizer state) it moves. "
        + (
            f"Each plan measured here over {replan['rounds']} interleaved rounds (dots)."
            if measured
            else "Quick mode: predicted only (the full mode measures each plan here too)."
        ),
        "",
        f"![Re-planning]({relative(image, run.out.parent)})",
        "",
    )
    _plans_table(page, replan, measured)
    page.add(*_recovered(replan), "", "No numeric goal was set for re-planning.", "")


def _plans_table(page: Page, replan: dict, measured: bool) -> None:
    """A row per scenario and plan: predicted (and measured) max against keeping the plan, and moves."""
    page.add(
        "| scenario | plan | predicted max ms | expected max ms | vs keep (predicted) | "
        + ("measured max ms | measured vs keep [95% CI] | " if measured else "")
        + "shards moved | GiB moved |",
        "| --- | --- | --- | --- | --- |" + (" --- | --- |" if measured else "") + " --- | --- |",
    )
    for name, scenario in replan["scenarios"].items():
        keep = scenario["plans"][0]["max_cost_ms"]
        for p in scenario["plans"]:
            expected = f"{p['expected_max_ms']:.2f}" if p.get("expected_max_ms") is not None else "-"
            cells = [
                name,
                _short_plan(p["plan"]),
                f"{p['max_cost_ms']:.2f}",
                expected,
                f"{p['max_cost_ms'] / keep:.3f}",
            ]
            if measured:
                cells += [
                    f"{p['measured_max_ms']:.2f}" if p["measured_max_ms"] is not None else "-",
                    fmt_ratio({"ratio": p["measured_vs_keep"], "ci95": p["ci95"]}) + f" {p['verdict']}"
                    if p["measured_vs_keep"] is not None
                    else "-",
                ]
            cells += [str(p["shards_moved"]), f"{p['bytes_moved'] / 2**30:.2f}"]
            page.add("| " + " | ".join(cells) + " |")
    page.add("")


def _recovered(replan: dict) -> list[str]:
    """Per scenario where scratch beats keeping: the share of that predicted gain the largest move
    budget recovers, and what each moves."""
    lines = []
    for name, scenario in replan["scenarios"].items():
        plans = scenario["plans"]
        keep, scratch = plans[0], plans[-1]
        gap = keep["max_cost_ms"] - scratch["max_cost_ms"]
        if gap <= 0:
            continue
        budgets = plans[1:-1]
        if budgets:
            best = budgets[-1]
            share = (keep["max_cost_ms"] - best["max_cost_ms"]) / gap
            lines.append(
                f"- {name}: {_short_plan(best['plan'])} recovers {share:.0%} of the predicted gain from scratch "
                f"moving {best['shards_moved']} shards ({best['bytes_moved'] / 2**30:.1f} GiB) against "
                f"{scratch['shards_moved']} ({scratch['bytes_moved'] / 2**30:.1f} GiB)."
            )
    return lines
