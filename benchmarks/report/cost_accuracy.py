"""Section 3, the cost model's accuracy: ``autoshard cost eval`` on held-out splits, the neural set
model's MAPE against simpler estimators' and the labels' own noise."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.report.page import Page, failed, pyplot, relative
from benchmarks.report.running import Run, autoshard_argv, load, run_command
from benchmarks.report.settings import ACCURACY_TARGET, ROOT

SPLITS = {
    "unseen_sets": "(a) unseen sets",
    "unseen_tables": "(b) unseen tables",
    "plan_sets": "(c) device sets of plans",
    "fresh_pool": "fresh pool",
}
ESTIMATORS = {
    "sum_of_singles": "sum of single-table costs",
    "linear_aggregate": "linear fit on aggregates",
    "bandwidth_analytical": "bandwidth model",
    "neural": "neural set model (shipped)",
}


def accuracy_traces(model: Path, which: str) -> tuple[list[Path], list[Path], Path | None]:
    """(the traces the model trained on, which ``cost eval`` splits as training did, held-out
    plan-set traces of its profile, a fresh pool's traces), as repository paths. ``first``: the
    first training file alone (a smoke run)."""
    metrics = json.loads((model / "metrics.json").read_text())
    trained = [Path(t) for t in metrics["traces"]]
    profile = metrics["profile"]["id"]
    if which == "first":
        return trained[:1], [], None
    traces = ROOT / "data" / "traces"
    plan_tests = sorted(
        p.relative_to(ROOT)
        for p in traces.glob(f"{profile}.plans*test*.jsonl.gz")
        if p.relative_to(ROOT) not in trained
    )
    fresh = traces / f"{profile}.fresh.jsonl.gz"
    return trained, plan_tests, fresh.relative_to(ROOT) if fresh.is_file() else None


def stage_cost_accuracy(run: Run) -> None:
    """Score every estimator on the model's traces; the report, with the trace files it read, to
    ``cost_accuracy.json``."""
    trained, plan_tests, fresh = accuracy_traces(run.model, run.settings.accuracy_traces)
    argv = ["cost", "eval", "--model", str(run.model)]
    for trace in [*trained, *plan_tests]:
        argv += ["--traces", str(trace)]
    if fresh:
        argv += ["--fresh-pool", str(fresh)]
    ok = run_command(run, "cost_accuracy", autoshard_argv(*argv, "--json"), run.stage_file("cost_accuracy"))
    if ok:
        report = json.loads(run.stage_file("cost_accuracy").read_text())
        files = {"trained_on": [str(t) for t in trained], "plan_set_tests": [str(t) for t in plan_tests]}
        report["_traces"] = files | {"fresh_pool": str(fresh) if fresh else None}
        run.stage_file("cost_accuracy").write_text(json.dumps(report, indent=1) + "\n")
    else:
        run.stage_file("cost_accuracy").unlink(missing_ok=True)


def _samples(split: dict) -> int:
    """A split's set count: the most any estimator scored."""
    return max((e.get("samples", 0) for e in split["estimators"].values()), default=0)


def figure_cost_accuracy(accuracy: dict, path: Path) -> None:
    """Bars of each estimator's MAPE per split, the labels' noise floor dotted, the target dashed."""
    plt = pyplot()
    splits = [s for s in accuracy if not s.startswith("_")]
    estimators = [e for e in ESTIMATORS if any(e in accuracy[s]["estimators"] for s in splits)]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(estimators)
    colours = dict(zip(ESTIMATORS, ("tab:gray", "tab:olive", "tab:purple", "tab:blue")))
    for i, estimator in enumerate(estimators):
        xs, ys = [], []
        for j, split in enumerate(splits):
            got = accuracy[split]["estimators"].get(estimator)
            if got:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(100 * got["mape"])
        bars = ax.bar(xs, ys, width * 0.95, label=ESTIMATORS[estimator], color=colours[estimator])
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    for j, split in enumerate(splits):
        floor = accuracy[split].get("noise_floor", {}).get("pass_to_pass_mape")
        if floor is not None:
            ax.hlines(100 * floor, j - 0.45, j + 0.45, colors="black", linestyles=":", linewidth=1.2)
    ax.plot([], [], color="black", linestyle=":", label="noise floor (pass-to-pass MAPE)")
    ax.axhline(100 * ACCURACY_TARGET["mape"], color="tab:red", linestyle="--", linewidth=0.9, label="8% target (b, c)")
    ax.set_xticks(range(len(splits)))
    ax.set_xticklabels([f"{SPLITS.get(s, s)}\n{_samples(accuracy[s])} sets" for s in splits])
    ax.set_ylabel("MAPE, %")
    ax.set_title("Cost-model accuracy on held-out splits: the neural set model against simpler estimators")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section_cost_accuracy(page: Page, run: Run) -> None:
    """The section: which traces were scored, the figure, the goals and a row per split."""
    page.add("## 4. Cost-model accuracy", "")
    accuracy = load(run.stage_file("cost_accuracy"))
    if accuracy is None:
        page.add(failed(run, "cost_accuracy"), "")
        return
    traces = accuracy.get("_traces", {})
    splits = {k: v for k, v in accuracy.items() if not k.startswith("_")}
    image = run.images / "cost_accuracy.png"
    figure_cost_accuracy(splits, image)
    page.add(
        f"`autoshard cost eval --model {relative(run.model, ROOT)}` on the traces the model was trained on "
        f"({len(traces.get('trained_on', []))} files, split again with the training's seed: (a) sets and (b) tables "
        "it never saw), held-out plan-set traces for (c) ("
        + (", ".join(f"`{Path(t).name}`" for t in traces.get("plan_set_tests", [])) or "none")
        + ") and a pool drawn with a fresh seed ("
        + (f"`{Path(traces['fresh_pool']).name}`" if traces.get("fresh_pool") else "none")
        + "). MAPE of each estimator against the measured labels (medians over passes); the dotted line is the "
        "labels' own pass-to-pass MAPE.",
        "",
        f"![Cost-model accuracy]({relative(image, run.out.parent)})",
        "",
    )
    page.add(*_accuracy_goals(page, splits), "")
    page.add(
        "| split | sets | " + " | ".join(ESTIMATORS[e] for e in ESTIMATORS) + " | noise floor |",
        "| --- | --- |" + " --- |" * (len(ESTIMATORS) + 1),
    )
    for key, split in splits.items():
        cells = [f"{split['estimators'][e]['mape']:.1%}" if e in split["estimators"] else "-" for e in ESTIMATORS]
        floor = split.get("noise_floor", {}).get("pass_to_pass_mape")
        page.add(
            f"| {SPLITS.get(key, key)} | {_samples(split)} | "
            + " | ".join(cells)
            + f" | {f'{floor:.1%}' if floor is not None else '-'} |"
        )
    page.add(
        "",
        "(The sum of single-table costs needs every table of a set measured alone; splits without such "
        "measurements have no figure for it.) This section reads traces measured on the profile's own machine; "
        "nothing is timed here.",
        "",
    )


def _accuracy_goals(page: Page, splits: dict) -> list[str]:
    """Judge the MAPE goals on (b) and (c), the plan-choice goal and the beats-every-estimator goal;
    a line for each."""
    lines = []
    for key in ("unseen_tables", "plan_sets"):
        if key in splits:
            mape = splits[key]["estimators"]["neural"]["mape"]
            v = page.goal(
                f"neural MAPE <= {ACCURACY_TARGET['mape']:.0%} on {SPLITS[key]}",
                f"{mape:.1%}",
                mape <= ACCURACY_TARGET["mape"],
            )
            lines.append(f"- {SPLITS[key]}: neural MAPE **{mape:.1%}** (goal <= {ACCURACY_TARGET['mape']:.0%}: {v}).")
    choices = splits.get("plan_sets", {}).get("plan_choices")
    if choices:
        v = page.goal(
            f"names the faster of two plans (measured > {choices['margin']:.0%} apart) >= "
            f"{ACCURACY_TARGET['plan_choices']:.0%}",
            f"{choices['named_the_faster']:.1%} of {choices['pairs']} pairs",
            choices["named_the_faster"] >= ACCURACY_TARGET["plan_choices"],
        )
        lines.append(
            f"- Of {choices['pairs']} pairs of plans of one task whose measured max differs by more than "
            f"{choices['margin']:.0%}, the model names the faster in **{choices['named_the_faster']:.1%}** "
            f"(goal >= {ACCURACY_TARGET['plan_choices']:.0%}: {v})."
        )
    beats = {k: v.get("neural_beats_all") for k, v in splits.items()}
    v = page.goal(
        "the neural model's MAPE below every simpler estimator's on every split",
        ", ".join(f"{SPLITS.get(k, k)}: {'yes' if b else 'no'}" for k, b in beats.items()),
        all(beats.values()),
    )
    lines.append(f"- The neural model beats every simpler estimator on every split: {v}.")
    return lines
