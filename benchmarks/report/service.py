"""Section 4, the service: ``benchmarks/load_test.py`` against ``autoshard serve``, distinct bodies
(every request planned) and one body repeated (the plan cache), against the throughput and p99 bar."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.report.page import Page, failed, pyplot, relative
from benchmarks.report.running import Run, load, run_command
from benchmarks.report.settings import LOAD_TARGET


def stage_service(run: Run) -> None:
    """Two load tests, distinct bodies and a repeated one; each to ``service_KIND.json``."""
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


def figure_service(fresh: dict | None, repeated: dict | None, path: Path) -> None:
    """Throughput (left) and p50/p99 latency (right) of each run, log scales, the bars dashed."""
    plt = pyplot()
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


def section_service(page: Page, run: Run) -> None:
    """The section: the load test's setting, the figure, a row per run and the bar's verdict."""
    page.add("## 5. The service: latency and throughput", "")
    fresh, repeated = load(run.work / "service_fresh.json"), load(run.work / "service_repeated.json")
    if fresh is None and repeated is None:
        page.add(failed(run, "service"), "")
        return
    image = run.images / "service.png"
    figure_service(fresh, repeated, image)
    setting = (fresh or repeated or {})["setting"]
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
    if fresh:
        _load_goal(page, run, fresh)
    sent = [r["setting"]["requests"] for r in (fresh, repeated) if r]
    if min(sent) < 2000:
        page.add(
            f"{' and '.join(str(n) for n in sent)} requests (the issue's setting is 2,000): fewer requests leave "
            "p99 resting on a handful of answers. The full mode sends 2,000 of each.",
            "",
        )


def _load_goal(page: Page, run: Run, fresh: dict) -> None:
    """Judge the bar on the distinct bodies' run, where it ran in the bar's setting; CPU per request."""
    bar_setting = (
        fresh["setting"]["tables"],
        fresh["setting"]["devices"],
        fresh["setting"]["concurrency"],
    ) == (80, 8, 16) and run.settings.load_planners is None
    if not bar_setting:
        page.add("This run's setting is not the bar's (80 x 8, every default planner, concurrency 16): not judged.", "")
        return
    met = fresh["throughput_rps"] >= LOAD_TARGET["throughput_rps"] and fresh["latency_ms"]["p99"] <= 150
    v = page.goal(
        "the service (distinct bodies, 80 x 8, every default planner, concurrency 16) >= 100 req/s with p99 <= 150 ms",
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
