"""The benchmark report: run the maintained benchmarks and write docs/benchmarks.md with its figures.

    python -m benchmarks.report --quick              # <= 15 minutes on 2 cores: fewer tasks, rounds, requests
    python -m benchmarks.report                      # the full run (an hour or more)
    python -m benchmarks.report --quick --render-only   # the page again from the last run's outputs

Each benchmark runs as a subprocess (the allocator settings of docs/decisions.md #3 set before it
starts; the CLI times one thread) and writes JSON to the work folder (``runs/benchmarks/<mode>/``,
not committed): plan quality (``autoshard evaluate SUITE --measure``), planning time
(``benchmarks/planning_speed.py``), the cost model's accuracy (``autoshard cost eval``), the
service's latency and throughput (``benchmarks/load_test.py``), re-planning
(``benchmarks/replan_measured.py``) and one plan's per-device cost (``autoshard plan``). Then the
page is rendered from those files alone, with the machine, the versions, the command and the
date: every number on it comes from the run. Where a goal is missed the page says so beside the
figure. A stage that fails leaves its section saying so, and the command exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1000000000000", "MALLOC_TOP_PAD_": "1073741824"}
"""glibc's allocator settings for timing (``cost_model.profile.MALLOC_SETTINGS``), set before each
measuring process starts."""

OURS = ("cost_greedy", "rl", "rl+refine")
"""The planners compared with the heuristics and TorchRec's planner, in the figures' order."""

HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")
QUICK_PLANNERS = "round_robin,size_greedy,dim_greedy,lookup_greedy,size_lookup_greedy,cost_greedy,rl,torchrec_cpu"
LOAD_TARGET = {"throughput_rps": 100.0, "p99_ms": 150.0}
"""The issue's bar for the service: 80 tables x 8 devices, every default planner, concurrency 16,
distinct bodies (docs/decisions.md #29)."""
ACCURACY_TARGET = {"mape": 0.08, "plan_choices": 0.90}
"""MAPE <= 8% on (b) unseen tables and (c) the device sets of plans; the model names the faster of
two plans (measured > 5% apart) >= 90% of the time."""
QUALITY_TARGET = 0.85
"""cost_greedy's measured max over the best heuristic's, geometric mean over the tasks."""
COLOURS = {"cost_greedy": "tab:blue", "rl": "tab:orange", "rl+refine": "tab:green", "torchrec": "tab:red"}


@dataclass(frozen=True)
class Settings:
    """What one mode of the report runs."""

    mode: str
    suite: str  # autoshard evaluate's suite (a file or a bundled name)
    planners: str  # autoshard evaluate --planners
    rounds: int
    drift_samples: int
    speed_tasks: str  # planning_speed.py --tasks
    speed_repeats: int
    speed_timeout_s: float
    speed_planners: str = "default"
    speed_tables_at: int = 128  # the planning-time figure: tables swept at this many devices
    speed_devices_at: int = 200  # and devices swept at this many tables
    accuracy_traces: str = "trained"  # "trained": the model's training traces and its held-out files; "first"
    load_requests: int = 2000  # distinct bodies (the bar); the repeated body's run the same
    load_repeated_requests: int = 2000
    load_warmup: int = 50
    load_concurrency: int = 16
    load_planners: str | None = None  # None: the service's defaults (the bar's setting)
    replan_rounds: int = 6  # 0: predicted only
    replan_moves: str = "2,4,8"
    replan_scenarios: str | None = None
    load_tables: int = 80
    load_devices: int = 8


FULL = Settings(
    mode="full",
    suite="default",
    planners="all",
    rounds=6,
    drift_samples=12,
    speed_tasks="100x128,1000x128,5000x128,1000x8,1000x64,1000x512",
    speed_repeats=3,
    speed_timeout_s=120.0,
    speed_tables_at=128,
    speed_devices_at=1000,
)
QUICK = Settings(
    mode="quick",
    suite=str(Path("benchmarks") / "quick_suite.json"),
    planners=QUICK_PLANNERS,
    rounds=6,
    drift_samples=6,
    speed_tasks="50x128,200x128,1000x128,200x8,200x32",
    speed_repeats=1,
    speed_timeout_s=20.0,
    speed_tables_at=128,
    speed_devices_at=200,
    load_requests=300,
    load_repeated_requests=1000,
    load_warmup=10,
    replan_rounds=0,
)


@dataclass
class Run:
    """Where a run writes, and what it records of itself."""

    settings: Settings
    work: Path
    out: Path
    images: Path
    model: Path
    command: str
    stages: dict[str, dict] = field(default_factory=dict)  # name -> {command, seconds, rc, log}

    def stage_file(self, name: str) -> Path:
        return self.work / f"{name}.json"


# ---------------------------------------------------------------------------------------------
# running


def run_command(run: Run, name: str, argv: Sequence[str], stdout_file: Path | None = None) -> bool:
    """``argv`` in the repository's root with the allocator settings, its output to the work
    folder's ``name.log`` (stdout to ``stdout_file`` if given); records the command, its wall
    time and exit code under ``name``. True when it exited 0."""
    log = run.work / f"{name}.log"
    env = {**os.environ, **MALLOC, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    print(f"[{name}] {shlex.join(argv)}", flush=True)
    started = time.perf_counter()
    with open(log, "w") as err:
        out = open(stdout_file, "w") if stdout_file else err
        try:
            done = subprocess.run(list(argv), cwd=ROOT, env=env, stdout=out, stderr=err)
        finally:
            if stdout_file:
                out.close()
    seconds = time.perf_counter() - started
    shown = ["python" if a == sys.executable else a.replace(f"{ROOT}{os.sep}", "") for a in argv]
    entry = run.stages.setdefault(name, {"commands": [], "seconds": 0.0, "rc": 0})
    entry["commands"].append(shlex.join(shown))
    entry["seconds"] += seconds
    entry["rc"] = entry["rc"] or done.returncode
    entry["log"] = str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log)
    print(f"[{name}] exit {done.returncode} after {seconds:.0f} s", flush=True)
    if done.returncode != 0:
        entry["error"] = log.read_text()[-1500:]
    return done.returncode == 0


def autoshard_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "autoshard", *args]


def stage_plan_quality(run: Run) -> None:
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
            "--out",
            str(folder),
            "--json",
        ),
        stdout_file=run.stage_file("plan_quality"),
    )
    if not ok:
        run.stage_file("plan_quality").unlink(missing_ok=True)


def stage_planning_time(run: Run) -> None:
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


def stage_service(run: Run) -> None:
    s = run.settings
    common = [
        "--concurrency",
        str(s.load_concurrency),
        "--tables",
        str(s.load_tables),
        "--devices",
        str(s.load_devices),
        "--warmup",
        str(s.load_warmup),
        *(["--planners", s.load_planners] if s.load_planners else []),
    ]
    for kind, requests, extra in (
        ("fresh", s.load_requests, ["--fresh"]),
        ("repeated", s.load_repeated_requests, []),
    ):
        run_command(
            run,
            "service",
            [
                sys.executable,
                "benchmarks/load_test.py",
                "--requests",
                str(requests),
                *common,
                *extra,
                "--out",
                str(run.work / f"service_{kind}.json"),
            ],
        )


def stage_replan(run: Run) -> None:
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


def stage_plan_devices(run: Run) -> None:
    ok = run_command(
        run,
        "plan_devices",
        autoshard_argv(
            "plan",
            "criteo_terabyte",
            "--devices",
            "8",
            "--memory-gb",
            "24",
            "--planner",
            "cost_greedy",
            "--model",
            str(run.model),
            "--json",
        ),
        run.stage_file("plan_devices"),
    )
    if not ok:
        run.stage_file("plan_devices").unlink(missing_ok=True)


STAGES = {
    "plan_quality": stage_plan_quality,
    "planning_time": stage_planning_time,
    "cost_accuracy": stage_cost_accuracy,
    "service": stage_service,
    "replan": stage_replan,
    "plan_devices": stage_plan_devices,
}


# ---------------------------------------------------------------------------------------------
# the machine and the versions


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def environment() -> dict:
    """The machine, the versions and the checkout, as the page records them."""
    changed = [line for line in git("status", "--porcelain", "--untracked-files=no").splitlines() if line]
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "loadavg_start": os.getloadavg(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "torchrec": package_version("torchrec"),
        "fbgemm_gpu": package_version("fbgemm-gpu-cpu", "fbgemm_gpu_cpu", "fbgemm-gpu", "fbgemm_gpu"),
        "commit": git("rev-parse", "--short=12", "HEAD") or "unknown",
        "commit_subject": git("log", "-1", "--format=%s"),
        "uncommitted_files": len(changed),
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------------------------------------
# reading the outputs


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def round_maxes(row: dict) -> list[float]:
    return [max(r) for r in row["measured_round_device_ms"]]


def plan_quality(report: dict) -> dict:
    """Per task and planner of ours: measured max against the best heuristic's (the evaluation's
    own pairing by round, 95% interval, verdict) and against TorchRec's planner's (paired by round
    the same way), each beside the predicted ratio; and the geometric means over the tasks."""
    from autoshard.core.stats import geomean, ratio_ci95, verdict

    rows = []
    reference = None
    for task in report["tasks"]:
        by = {p["planner"]: p for p in task["planners"] if p.get("measured_round_device_ms")}
        torchrec = next((n for n in ("torchrec_cpu", "torchrec") if n in by), None)
        reference = reference or torchrec
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
    summary = {}
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
    drift = report.get("machine_drift", {})
    return {
        "suite": report["suite"],
        "settings": report["settings"],
        "torchrec": reference,
        "rows": rows,
        "summary": summary,
        "drift": {k: drift[k] for k in ("before", "after") if k in drift},
        "traces": drift.get("traces"),
    }


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


# ---------------------------------------------------------------------------------------------
# figures


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10})
    return plt


def figure_plan_quality(quality: dict, path: Path) -> None:
    plt = _pyplot()
    tasks = list(dict.fromkeys(r["task"] for r in quality["rows"]))
    planners = [p for p in OURS if any(r["planner"] == p for r in quality["rows"])]
    panels = [("vs_heuristic", "against the best heuristic (chosen per task after measuring)")]
    if quality["torchrec"]:
        panels.append(("vs_torchrec", f"against TorchRec's planner ({quality['torchrec']})"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), sharey=True, squeeze=False)
    width = 0.8 / max(len(planners), 1)
    heuristic = {r["task"]: r["heuristic"] for r in quality["rows"]}
    values = []
    for ax, (key, title) in zip(axes[0], panels):
        for i, planner in enumerate(planners):
            for j, task in enumerate(tasks):
                row = next((r for r in quality["rows"] if r["task"] == task and r["planner"] == planner), None)
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
            [
                task + (f"\nvs {heuristic[task]}" if key == "vs_heuristic" and task in heuristic else "")
                for task in tasks
            ],
            rotation=20,
            ha="right",
        )
        ax.set_title(title)
        ax.set_yscale("log")
        ax.grid(axis="y", which="both", alpha=0.3)
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    low, high = (max(min(finite) / 1.1, 0.25), min(max(finite) * 1.1, 4.0)) if finite else (0.5, 2.0)
    low, high = min(low, 0.9), max(high, 1.1)
    from matplotlib.ticker import FixedLocator, NullFormatter

    ticks = [
        t for t in (0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0) if low <= t <= high
    ]
    for ax in axes[0]:
        ax.set_ylim(low, high)
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0][0].set_yticklabels([f"{t:g}" for t in ticks])
    axes[0][0].set_ylabel("max device time, ratio (< 1: ours faster)")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"Plan quality: measured (dots, 95% CI over {quality['settings'].get('rounds')} rounds) and predicted")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _task_size(task: str) -> tuple[int, int]:
    t, d = task.split("x")
    return int(t), int(d)


def figure_planning_time(speed: dict, settings: Settings, path: Path) -> None:
    plt = _pyplot()
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    sweeps = (
        (axes[0], 1, settings.speed_tables_at, 0, f"tables, at {settings.speed_tables_at} devices"),
        (axes[1], 0, settings.speed_devices_at, 1, f"devices, at {settings.speed_devices_at} tables"),
    )
    planners = list(dict.fromkeys(r["planner"] for r in speed["rows"]))
    markers = dict(zip(planners, "os^v<>pPX*hd"))
    for ax, fixed_index, fixed, x_index, label in sweeps:
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


def figure_cost_accuracy(accuracy: dict, path: Path) -> None:
    plt = _pyplot()
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


def _samples(split: dict) -> int:
    return max((e.get("samples", 0) for e in split["estimators"].values()), default=0)


def figure_service(fresh: dict | None, repeated: dict | None, path: Path) -> None:
    plt = _pyplot()
    runs = [(label, r) for label, r in (("distinct bodies", fresh), ("repeated body (plan cache)", repeated)) if r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    names = [label for label, _ in runs]
    bars = left.bar(names, [r["throughput_rps"] for _, r in runs], color=["tab:blue", "tab:gray"][: len(runs)])
    left.bar_label(bars, fmt="%.1f", fontsize=8)
    left.axhline(LOAD_TARGET["throughput_rps"], color="tab:red", linestyle="--", label=">= 100 req/s bar")
    left.set_yscale("log")
    left.set_ylim(1, max([LOAD_TARGET["throughput_rps"], *(r["throughput_rps"] for _, r in runs)]) * 10)
    left.set_ylabel("requests / s")
    left.legend(fontsize=7, loc="upper right")
    left.set_title("throughput")
    x = range(len(runs))
    p50 = right.bar([i - 0.2 for i in x], [r["latency_ms"]["p50"] for _, r in runs], 0.4, label="p50")
    p99 = right.bar([i + 0.2 for i in x], [r["latency_ms"]["p99"] for _, r in runs], 0.4, label="p99")
    right.bar_label(p50, fmt="%.0f", fontsize=7)
    right.bar_label(p99, fmt="%.0f", fontsize=7)
    right.axhline(LOAD_TARGET["p99_ms"], color="tab:red", linestyle="--", label="p99 <= 150 ms bar")
    right.set_xticks(list(x))
    right.set_xticklabels(names)
    right.set_yscale("log")
    right.set_ylim(1, max([LOAD_TARGET["p99_ms"], *(r["latency_ms"]["p99"] for _, r in runs)]) * 10)
    right.set_ylabel("latency, ms")
    right.legend(fontsize=7, loc="upper right")
    right.set_title("latency")
    setting = runs[0][1]["setting"] if runs else {}
    fig.suptitle(
        f"The service: {setting.get('tables')} tables x {setting.get('devices')} devices, "
        f"concurrency {setting.get('concurrency')}, {setting.get('cpus')} cores shared with the client"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_replan(replan: dict, path: Path) -> None:
    plt = _pyplot()
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


def _short_plan(name: str) -> str:
    if name.startswith("replan (<= "):
        return f"<= {name.split('<= ')[1].split()[0]} moves"
    return "from scratch" if name == "cost_greedy" else name


def plan_devices(plan: dict, model: Path) -> dict:
    """Each device of the plan: its cost, and the communication share of it (the plan's own
    split: ``communication_ms``), so compute = cost - communication."""
    from autoshard.core.communication import COMMUNICATION_FILE, CommunicationModel

    best = next(p for p in plan["plans"] if p["planner"] == "cost_greedy")
    comm_file = model / COMMUNICATION_FILE
    comm = CommunicationModel.load(comm_file) if comm_file.is_file() else None
    devices = [
        {
            "cost_ms": device["cost_ms"],
            "all_to_all_ms": device["communication_ms"],
            "compute_ms": device["compute_ms"],
            "shards": device["tables"],
            "memory_gib": device["memory_bytes"] / 2**30,
        }
        for device in best["devices"]
    ]
    return {
        "max_cost_ms": best["max_cost_ms"],
        "expected_max_ms": best.get("expected_max_ms"),
        "devices": devices,
        "communication": asdict(comm) if comm else None,
        "profile": plan.get("profile"),
    }


def figure_plan_devices(devices: dict, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    rows = devices["devices"]
    x = range(len(rows))
    compute = ax.bar(x, [d["compute_ms"] for d in rows], color="tab:blue", label="compute (cost model)")
    if devices["communication"]:
        ax.bar(
            x,
            [d["all_to_all_ms"] for d in rows],
            bottom=[d["compute_ms"] for d in rows],
            color="tab:orange",
            label="all-to-all (communication model)",
        )
    for i, d in enumerate(rows):
        shards = d["shards"]
        text = shards[0] if len(shards) == 1 else f"{len(shards)} tables"
        ax.text(i, d["cost_ms"] * 1.01, text, ha="center", va="bottom", fontsize=7)
    del compute
    ax.axhline(devices["max_cost_ms"], color="grey", linestyle="--", linewidth=0.9, label="predicted max")
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"dev {i}" for i in x])
    ax.set_ylabel("predicted ms per iteration")
    ax.set_ylim(0, devices["max_cost_ms"] * 1.25)
    shards = [s for d in rows for s in d["shards"]]
    split = sorted({s.split("[")[0] for s in shards if "[" in s})
    how = (
        "; ".join(
            f"{name} split column-wise over {sum(s.startswith(name + '[') for s in shards)} devices" for name in split
        )
        if split
        else "whole tables"
    )
    ax.set_title(
        f"cost_greedy's plan of Criteo Terabyte ({len({s.split('[')[0] for s in shards})} tables) on "
        f"{len(rows)} devices x 24 GiB: {how}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# the page


def fmt_ratio(got: dict) -> str:
    low, high = got.get("ci95") or (None, None)
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return f"{got['ratio']:.3f}"
    return f"{got['ratio']:.3f} [{low:.3f}, {high:.3f}]"


def yes_no(met: bool) -> str:
    return "met" if met else "**MISSED**"


def relative(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)


class Page:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.goals: list[tuple[str, str, str]] = []  # (goal, this run, met)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def goal(self, goal: str, latest: str, met: bool | None) -> str:
        verdict = "n/a" if met is None else yes_no(met)
        self.goals.append((goal, latest, verdict))
        return verdict


def section_plan_quality(page: Page, run: Run) -> None:
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
        f"`autoshard evaluate {run.settings.suite} --measure --rounds {s.get('rounds')}`: every plan of every task "
        f"run on this machine (FBGEMM TBE, forward + backward + update, one thread), plans interleaved in each "
        f"round; the ratio of two plans' max device time is paired by round, with a 95% t-interval. Profile "
        f"`{s.get('profile')}`; planners {', '.join(f'`{p}`' for p in s.get('planners') or ['all'])}. The best "
        f"heuristic is the one of {', '.join(heuristics)} with the lowest measured max on each task, chosen after "
        "measuring (which flatters the heuristics). Verdict: faster or slower when the whole interval is below "
        "or above 1, else tie.",
        "",
        f"![Plan quality]({relative(image, run.out.parent)})",
        "",
    )
    summary = quality["summary"]
    cg = summary.get("cost_greedy", {})
    notes = []
    if "vs_heuristic" in cg:
        got = cg["vs_heuristic"]
        slower_ok = got["slower"] == 0
        mean_ok = got["geomean"] <= QUALITY_TARGET
        v1 = page.goal(
            "cost_greedy's measured max <= the best heuristic's on every task (no task slower)",
            f"{got['slower']} slower, {got['tie']} tied, {got['faster']} faster of {cg['tasks']} tasks",
            slower_ok,
        )
        v2 = page.goal(
            f"cost_greedy's measured max over the best heuristic's, geometric mean <= {QUALITY_TARGET}",
            f"{got['geomean']:.3f} (predicted {got['geomean_predicted']:.3f})",
            mean_ok,
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
    page.add(*notes, "")
    if any(r["vs_heuristic"]["verdict"] == "tie" for r in quality["rows"]) and run.settings.rounds <= 4:
        page.add(
            f"With {run.settings.rounds} rounds the intervals are wide (a t-interval on {run.settings.rounds - 1} "
            "degrees of freedom): a tie here says the run could not tell the plans apart, not that they are equal.",
            "",
        )
    drift = quality["drift"]
    if drift:
        before, after = drift.get("before", {}), drift.get("after", {})
        holds = all(d.get("holds") for d in (before, after) if d)
        text = "; ".join(
            f"{when}: median ratio {d['median_ratio']:.2f} (range {d['ratio_range'][0]:.2f}-{d['ratio_range'][1]:.2f})"
            for when, d in (("before", before), ("after", after))
            if d
        )
        if holds:
            page.add(f"The machine measures like the profile's traces (`bench drift`, {text}).", "")
        else:
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


def section_planning_time(page: Page, run: Run) -> None:
    page.add("## 2. Planning time", "")
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
    else:
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
    page.add("| task (T x D) | " + " | ".join(speed["planners"]) + " |", "| --- |" + " --- |" * len(speed["planners"]))
    for task in sorted({r["task"] for r in speed["rows"]}, key=lambda t: _task_size(t)[0] * _task_size(t)[1]):
        cells = []
        for planner in speed["planners"]:
            r = next((x for x in speed["rows"] if x["task"] == task and x["planner"] == planner), None)
            cells.append(
                "-" if r is None else f"{r['median_s']:.3f}" if "median_s" in r else f"> {r['timed_out_after_s']:g}"
            )
        page.add(f"| {task} | " + " | ".join(cells) + " |")
    page.add("", "Seconds, median. Predicted max of each plan: in the run's JSON.", "")


def section_cost_accuracy(page: Page, run: Run) -> None:
    page.add("## 3. Cost-model accuracy", "")
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
    page.add(*lines, "")
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


def section_service(page: Page, run: Run) -> None:
    page.add("## 4. The service: latency and throughput", "")
    fresh, repeated = load(run.work / "service_fresh.json"), load(run.work / "service_repeated.json")
    if fresh is None and repeated is None:
        page.add(failed(run, "service"), "")
        return
    image = run.images / "service.png"
    figure_service(fresh, repeated, image)
    setting = (fresh or repeated)["setting"]
    page.add(
        f"`benchmarks/load_test.py`: `autoshard serve` on 127.0.0.1 ({setting['workers']} planning worker), "
        f"POST /v1/plans with {setting['tables']} tables x {setting['devices']} devices and "
        f"{len(setting['planners'])} planners ({', '.join(setting['planners'])}), concurrency "
        f"{setting['concurrency']}, from {setting['client']}; the client and the server share the "
        f"{setting['cpus']} cores. Distinct bodies: every request its own tables and seed, so every planner "
        "plans every request (the bar's setting). Repeated body: one body again and again, answered from the "
        "plan cache after the first.",
        "",
        f"![Service latency and throughput]({relative(image, run.out.parent)})",
        "",
        "| requests | answered | req/s | p50 ms | p90 ms | p99 ms | errors | /healthz p99 under load, ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    )
    for label, r in (("distinct bodies", fresh), ("repeated body", repeated)):
        if r:
            lat = r["latency_ms"]
            page.add(
                f"| {label}, {r['setting']['requests']} | {sum(r['statuses'].values())} | {r['throughput_rps']:.1f} "
                f"| {lat['p50']:.0f} | {lat['p90']:.0f} | {lat['p99']:.0f} | {r['errors']} | "
                f"{r['healthz_under_load_ms']['p99']:.0f} |"
            )
    page.add("")
    bar_setting = fresh is not None and (
        (fresh["setting"]["tables"], fresh["setting"]["devices"], fresh["setting"]["concurrency"]) == (80, 8, 16)
        and run.settings.load_planners is None
    )
    if fresh and not bar_setting:
        page.add("This run's setting is not the bar's (80 x 8, every default planner, concurrency 16): not judged.", "")
    if fresh and bar_setting:
        met = fresh["throughput_rps"] >= LOAD_TARGET["throughput_rps"] and fresh["latency_ms"]["p99"] <= 150
        v = page.goal(
            "the service (distinct bodies, 80 x 8, every default planner, concurrency 16) >= 100 req/s with "
            "p99 <= 150 ms",
            f"{fresh['throughput_rps']:.1f} req/s, p99 {fresh['latency_ms']['p99']:.0f} ms",
            met,
        )
        page.add(
            f"Goal >= {LOAD_TARGET['throughput_rps']:.0f} req/s with p99 <= {LOAD_TARGET['p99_ms']:.0f} ms on "
            f"distinct bodies: {v} ({fresh['throughput_rps']:.1f} req/s, p99 {fresh['latency_ms']['p99']:.0f} ms)."
            + (
                " This bar is known to be out of reach on two cores: HTTP, validation and the heuristics alone "
                "take most of the CPU a request may have, so faster planners cannot meet it "
                "([decisions.md](decisions.md), decision 29)."
                if not met
                else " (The bar was judged out of reach in [decisions.md](decisions.md), decision 29: re-read it.)"
            ),
            "",
        )
        cpu = fresh.get("cpu_ms_per_request", {})
        if cpu:
            page.add(
                "CPU per request on distinct bodies: "
                + ", ".join(f"{part.replace('_', ' ')} {ms:.1f} ms" for part, ms in cpu.items())
                + ". Server-side planning per request: "
                + ", ".join(f"{p} {ms:.1f} ms" for p, ms in fresh.get("server_planner_ms_per_request", {}).items())
                + ".",
                "",
            )
    sent = [r["setting"]["requests"] for r in (fresh, repeated) if r]
    if min(sent) < 2000:
        page.add(
            f"{' and '.join(str(n) for n in sent)} requests (the issue's setting is 2,000): fewer requests leave "
            "p99 resting on a handful of answers. The full mode sends 2,000 of each.",
            "",
        )


def section_replan(page: Page, run: Run) -> None:
    page.add("## 5. Re-planning a deployed plan", "")
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
    page.add(*lines, "", "No numeric goal was set for re-planning.", "")


def section_plan_devices(page: Page, run: Run) -> None:
    page.add("## One plan's devices (the README's figure)", "")
    plan = load(run.stage_file("plan_devices"))
    if plan is None:
        page.add(failed(run, "plan_devices"), "")
        return
    devices = plan_devices(plan, run.model)
    image = run.images / "plan_devices.png"
    figure_plan_devices(devices, image)
    comm = devices["communication"]
    page.add(
        "`autoshard plan criteo_terabyte --devices 8 --memory-gb 24 --planner cost_greedy --json`: predicted "
        "cost of each device, its compute (the cost model) stacked with its all-to-all (the profile's "
        + (
            f"communication model: {comm['bandwidth_gbps']:g} GB/s, {comm['latency_ms']:g} ms latency"
            if comm
            else "none: compute only"
        )
        + f"). Predicted max {devices['max_cost_ms']:.2f} ms"
        + (f", expected {devices['expected_max_ms']:.2f} ms" if devices["expected_max_ms"] else "")
        + ".",
        "",
        f"![Per-device cost]({relative(image, run.out.parent)})",
        "",
    )


def failed(run: Run, stage: str) -> str:
    entry = run.stages.get(stage)
    if entry is None:
        return f"**Not run** (stage `{stage}`): no output in `{relative(run.work, ROOT)}`."
    tail = (entry.get("error") or "").strip().splitlines()[-3:]
    return f"**This stage failed** (exit {entry['rc']}; log `{entry.get('log')}`): " + " / ".join(
        f"`{line.strip()[:200]}`" for line in tail
    )


def render(run: Run, meta: dict) -> str:
    run.images.mkdir(parents=True, exist_ok=True)
    page = Page()
    body = Page()
    body.goals = page.goals
    section_plan_quality(body, run)
    section_planning_time(body, run)
    section_cost_accuracy(body, run)
    section_service(body, run)
    section_replan(body, run)
    section_plan_devices(body, run)
    env = meta["environment"]
    s = run.settings
    page.add(
        "# Benchmarks",
        "",
        "<!-- Generated by benchmarks/report.py; do not edit by hand: every number below comes from the run. -->",
        "",
        f"Generated by `{meta['command']}` on {meta['started']} (UTC), in {meta['seconds'] / 60:.1f} minutes. "
        + (
            f"**This is the quick mode** ({s.rounds} measurement rounds, {_count_tasks(run)} tasks, "
            f"{s.load_requests} load-test requests, re-planning predicted only): its intervals are wider and its "
            "timings noisier than the full mode's (`python -m benchmarks.report`)."
            if s.mode == "quick"
            else f"Mode: {s.mode}."
        ),
        "",
        "| | |",
        "| --- | --- |",
        f"| CPU | {env['cpu']}, {env['cores']} cores"
        + (f", {env['memory_gib']:.0f} GiB" if env.get("memory_gib") else "")
        + " |",
        f"| load average (1, 5, 15 min) | at the start {_load(env['loadavg_start'])}; at the end "
        f"{_load(meta.get('loadavg_end'))} |",
        f"| Python | {env['python']} |",
        f"| torch / torchrec / fbgemm_gpu | {env['torch']} / {env['torchrec']} / {env['fbgemm_gpu']} |",
        f"| autoshard | commit `{env['commit']}` ({env['commit_subject']})"
        + (
            f", with uncommitted changes to {env['uncommitted_files']} tracked files"
            if env["uncommitted_files"]
            else ""
        )
        + " |",
        f"| cost model | `{relative(run.model, ROOT)}` -> `{run.model.resolve().name}` |",
        f"| timing | allocator settings {' '.join(f'`{k}={v}`' for k, v in MALLOC.items())} set before each "
        "measuring process starts; one thread, thread time |",
        "",
    )
    if meta.get("reused"):
        page.add(
            f"Stages taken from an earlier run's outputs, not run by this command: {', '.join(meta['reused'])}.", ""
        )
    if env["loadavg_start"][0] > (env["cores"] or 1) * 0.5:
        page.add(
            f"The machine was shared while this ran (load average {env['loadavg_start'][0]:.1f} on "
            f"{env['cores']} cores at the start): timings are noisy.",
            "",
        )
    page.add("## Goals", "", "| goal | this run | |", "| --- | --- | --- |")
    for goal, latest, verdict in body.goals:
        page.add(f"| {goal} | {latest} | {verdict} |")
    page.add("", *body.lines)
    page.add("## How each figure was made", "", "| stage | wall time | exit | commands |", "| --- | --- | --- | --- |")
    for name, entry in meta["stages"].items():
        commands = "<br>".join(f"`{c}`" for c in entry["commands"])
        page.add(f"| {name} | {entry['seconds']:.0f} s | {entry['rc']} | {commands} |")
    page.add(
        "",
        f"Outputs (JSON, logs): `{relative(run.work, ROOT)}/` (not committed). Regenerate with `{meta['command']}`.",
        "",
    )
    return "\n".join(page.lines)


def _load(values: Sequence[float] | None) -> str:
    return ", ".join(f"{v:.2f}" for v in values) if values else "-"


def _count_tasks(run: Run) -> int | str:
    report = load(run.stage_file("plan_quality"))
    return len(report["tasks"]) if report else "?"


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, settings: Settings | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="The quick mode: <= 15 minutes on 2 cores.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--images", type=Path, help="Folder of the PNGs (default: images/ beside --out).")
    parser.add_argument("--work", type=Path, help="Folder of the outputs (default: runs/benchmarks/<mode>).")
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "models" / "default")
    parser.add_argument("--stages", help=f"Run only these (comma-separated, of {', '.join(STAGES)}).")
    parser.add_argument(
        "--render-only", action="store_true", help="Run nothing: render the page from the work folder's outputs."
    )
    args = parser.parse_args(argv)
    settings = settings or (QUICK if args.quick else FULL)
    shown = ["python -m benchmarks.report", *(argv if argv is not None else sys.argv[1:])]
    work = args.work or ROOT / "runs" / "benchmarks" / settings.mode
    out = args.out.resolve()
    run = Run(
        settings,
        work.resolve(),
        out,
        (args.images or out.parent / "images").resolve(),
        args.model if args.model.is_absolute() else (Path.cwd() / args.model),
        " ".join(a for a in shown if a != "--render-only"),
    )
    run.work.mkdir(parents=True, exist_ok=True)
    meta_file = run.work / "meta.json"
    chosen = list(STAGES) if not args.stages else args.stages.split(",")
    unknown = [c for c in chosen if c not in STAGES]
    if unknown:
        parser.error(f"unknown stages {unknown}: choose from {', '.join(STAGES)}")
    if args.render_only:
        meta = load(meta_file)
        if meta is None:
            parser.error(f"--render-only: no earlier run in {run.work}")
        run.stages = meta["stages"]
    else:
        started = time.perf_counter()
        earlier = load(meta_file) if args.stages else None
        meta = {
            "command": run.command,
            "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
            "settings": asdict(settings),
            "environment": environment(),
            "reused": sorted(set(earlier["stages"]) - set(chosen)) if earlier else [],
        }
        if earlier:
            run.stages = {k: v for k, v in earlier["stages"].items() if k not in chosen}
        for name in chosen:
            run.stages.pop(name, None)
            STAGES[name](run)
        meta["seconds"] = time.perf_counter() - started
        meta["loadavg_end"] = os.getloadavg()
        meta["stages"] = {name: run.stages[name] for name in STAGES if name in run.stages}
        meta_file.write_text(json.dumps(meta, indent=1) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(run, meta))
    print(f"wrote {out} and its figures in {run.images} ({meta['seconds'] / 60:.1f} min)", flush=True)
    return 1 if any(entry["rc"] for entry in run.stages.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
