"""The judges side by side (issue 61): cost_greedy's plan and TorchRec's planner's on a small
bundled task, each judged by our model, by TorchRec's ``EmbeddingPerfEstimator`` at the topology's
declared links and at the profile's measured links, with the plan each prefers and, where they
disagree, the cause. ``benchmarks/sharding_4d.py`` makes the figures and its judges table; DMP is
not run here (``autoshard plan ... --verify dmp`` measures it)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.report.page import Page, failed
from benchmarks.report.running import Run, load, run_command
from benchmarks.report.settings import ROOT

BENCHMARK = "benchmarks/sharding_4d.py"


def stage_judges(run: Run) -> None:
    """Both planners on the settings' judges tasks (``sharding_4d.py``), its report to ``judges.json``."""
    s = run.settings
    folder = run.work / "judges"
    shutil.rmtree(folder, ignore_errors=True)
    argv = [sys.executable, BENCHMARK, s.judges_suite, "--tasks", s.judges_tasks]
    argv += ["--time-limit", f"{s.judges_time_limit_s:g}", "--model", _shown(run.model), "--out", _shown(folder)]
    ok = run_command(run, "judges", argv)
    written = sorted(folder.glob("*.json")) if ok else []
    if len(written) == 1:
        shutil.copyfile(written[0], run.stage_file("judges"))
    else:
        run.stage_file("judges").unlink(missing_ok=True)


def _shown(path: Path) -> str:
    """A path as the command shows it: relative to the repository, where the benchmark runs."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def section_judges(page: Page, run: Run) -> None:
    """The section: what was judged, then ``sharding_4d``'s judges table."""
    from benchmarks.sharding_4d import judges_markdown

    page.add("## 2. The judges side by side: our model and TorchRec's estimator", "")
    report = load(run.stage_file("judges"))
    if report is None or not report.get("rows"):
        page.add(failed(run, "judges"), "")
        return
    rows = [r for r in report["rows"] if "judges" in r]
    planner = report.get("torchrec_planner", "torchrec")
    page.add(
        f"`{report['command']}`: cost_greedy and TorchRec's planner (`{planner}`: "
        f"{report['torchrec_search_space']}) plan the same task, and each plan is judged by *ours* (the cost "
        "model plus the profile's communication, per collective and link tier), by *TR est.* (TorchRec's "
        "`EmbeddingPerfEstimator` on each plan's shards at the topology's declared links, TorchRec's "
        "600 / 12.5 GiB/s) and by *TR est. at measured links* (the same estimator with the profile's "
        "measured bandwidths as its `Topology`'s comms bandwidths; only where the profile measured its "
        "links). The issue's third judge, DMP measured, is not run here: `autoshard plan ... --verify dmp` "
        "runs it.",
        "",
        f"Communication: {report.get('communication', 'as the profile')}.",
        "",
    )
    if not rows:
        page.add(
            "", "No task had both plans: " + "; ".join(f"{k}: {v}" for k, v in report["summary"]["failed"].items())
        )
    page.add(*judges_markdown(report, heading=None), "")


__all__ = ["section_judges", "stage_judges"]
