"""The README's figure: one plan's devices (cost_greedy on Criteo Terabyte, 8 x 24 GiB), each
device's predicted compute stacked with its all-to-all."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from benchmarks.report.page import Page, failed, pyplot, relative
from benchmarks.report.running import Run, autoshard_argv, load, run_command


def stage_plan_devices(run: Run) -> None:
    """Plan Criteo Terabyte with cost_greedy; the plan's JSON to ``plan_devices.json``."""
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
    """A bar per device: compute, all-to-all stacked on it, each labelled with what it holds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    rows = devices["devices"]
    x = range(len(rows))
    ax.bar(x, [d["compute_ms"] for d in rows], color="tab:blue", label="compute (cost model)")
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


def section_plan_devices(page: Page, run: Run) -> None:
    """The section: the command, the communication model and the figure."""
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
