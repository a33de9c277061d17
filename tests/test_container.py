"""The Docker image: build it, run it, plan 80 tables through it, check it runs as a non-root user
and stops cleanly on SIGTERM.

Uses podman where it is installed (on a machine without a Docker engine, source
``../shared/tools/podman-env.sh`` first: it sets CONTAINERS_CONF, a local python:3.11-slim and
PODMAN_BUILD_ARGS), else docker. Without either the test skips, except in CI (CI=true), where a
missing container tool is a failure.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from autoshard.planning.registry import HEURISTICS
from tests.service_support import free_port, plan_body

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/autoshard:test"
READY_TIMEOUT_S = 120


def _works(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _engine() -> tuple[str, list[str]] | None:
    """(engine, its build flags), or None when no usable container tool is here."""
    if shutil.which("podman") and _works(["podman", "info"]):
        return "podman", [
            "--pull=never",
            "--network",
            "host",
            "--format",
            "docker",
            *shlex.split(os.environ.get("PODMAN_BUILD_ARGS", "")),
        ]
    if shutil.which("docker") and _works(["docker", "info"]):
        return "docker", ["--network", "host"]
    return None


def _run(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{shlex.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


# This workplace's podman set-up script (scripts/test.sh sources it when it finds it).
PODMAN_ENVS = (ROOT.parent / "shared" / "tools" / "podman-env.sh", Path("/work/shared/tools/podman-env.sh"))


@pytest.fixture(scope="module")
def engine():
    found = _engine()
    message = None
    if found is None:
        message = (
            "no container tool: install podman (on this kind of machine: source "
            "../shared/tools/podman-env.sh) or run a Docker engine"
        )
    elif found[0] == "podman" and any(p.exists() for p in PODMAN_ENVS) and not os.environ.get("CONTAINERS_CONF"):
        message = "podman here needs its settings first: source ../shared/tools/podman-env.sh"
    if message:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the container test: {message}")
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def image(engine):
    tool, flags = engine
    started = time.monotonic()
    _run(tool, "build", *flags, "-t", IMAGE, str(ROOT), timeout=1800)
    print(f"{tool} build: {time.monotonic() - started:.0f} s")
    return IMAGE


def _shipped_profiles() -> set[str]:
    models = ROOT / "data" / "models"
    return (
        {p.name for p in models.glob("*") if p.is_dir() and not p.is_symlink() and (p / "cost_model.pt").exists()}
        if models.is_dir()
        else set()
    )


@pytest.mark.timeout(2400)
def test_the_image_serves_plans_as_a_non_root_user_and_stops_cleanly(engine, image):
    tool, _ = engine
    port = free_port()
    name = f"autoshard-test-{os.getpid()}"
    url = f"http://127.0.0.1:{port}"
    _run(tool, "rm", "-f", name, check=False)
    _run(tool, "run", "-d", "--name", name, "--network", "host", "-e", f"AUTOSHARD_PORT={port}", image)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = None
        while ready is None:
            try:
                response = httpx.get(f"{url}/readyz", timeout=5)
                if response.status_code == 200:
                    ready = response.json()
            except httpx.HTTPError:
                pass
            state = _run(tool, "inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            assert state == "true", _run(tool, "logs", name, check=False).stdout
            assert time.monotonic() < deadline, f"not ready in {READY_TIMEOUT_S} s"
            time.sleep(0.5)
        shipped = _shipped_profiles()
        assert set(ready["profiles"]) == shipped
        assert ready["status"] == ("ready" if shipped else "degraded")

        response = httpx.post(f"{url}/v1/plans", json=plan_body(80), timeout=60)
        assert response.status_code == 200, response.text
        report = response.json()
        planners = [p["planner"] for p in report["plans"]]
        assert planners == [
            *HEURISTICS,
            *(["cost_greedy", "rl", "rl+refine", "rl+refine_raw"] if shipped else []),
        ]  # the shipped profile has a policy
        for plan in report["plans"]:
            tables = {t.split("[")[0] for d in plan["devices"] for t in d["tables"]}  # a table's shards: name[...]
            assert len(plan["devices"]) == 8 and len(tables) == 80
        assert report["best"] in planners and not report["partial"]

        uid = _run(tool, "exec", name, "id", "-u").stdout.strip()
        assert uid.isdigit() and int(uid) != 0, f"the service runs as uid {uid}"
        assert "/healthz" in _run(tool, "image", "inspect", image).stdout  # the HEALTHCHECK

        _run(tool, "stop", "--time", "20", name, timeout=60)
        exit_code = _run(tool, "inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        logs = _run(tool, "logs", name, check=False)
        assert exit_code == "0", f"exit code {exit_code} after SIGTERM:\n{logs.stdout}{logs.stderr}"
        assert "Application shutdown complete" in logs.stdout + logs.stderr
    finally:
        _run(tool, "rm", "-f", name, check=False)
