"""Load test of the planning service on 127.0.0.1: a bounded async client loop.

Starts ``autoshard serve`` itself on a free port, then sends ``--requests`` POST /v1/plans
(80 synthetic tables on 8 devices, every default planner) at ``--concurrency``, while a probe in
its own process times GET /healthz every 50 ms. Reports throughput, latency percentiles, errors, the server's RSS
before and after (from /proc), per-planner server-side time (from /metrics) and the machine's
load, then writes them to ``--out`` (default runs/benchmarks/load_test.json).

    python benchmarks/load_test.py                      # the issue's setting: 2,000 requests, 16 at once
    python benchmarks/load_test.py --requests 500 --planners random,round_robin,size_greedy \
        --out runs/benchmarks/load_test_heuristics.json        # the service without cost_greedy
    python benchmarks/load_test.py --fresh --requests 200 --out runs/benchmarks/load_test_fresh.json
                                                              # every request planned (no plan cache)

The load comes from ApacheBench when it is installed (``apt-get install apache2-utils``; ``--client
ab``) and every request is alike, else from an async aiohttp loop (``--client aiohttp``; ``--client
httpx``, the loop of the figures before 2026-12-04 22:00, spends about twice its CPU per request:
3.1-3.7 against 1.5-1.6 ms on 80 x 8 answers). On two cores the client shares the CPU with the
server, and the Python loop spends about as much of it per request as the server's cache does: its
own scheduling then is most of the latency it reports. ab, in C, takes a small share of a core,
so its latencies are the server's. (``--fresh`` sends distinct bodies, which ab cannot: there
planning dominates and the Python loop's share matters less.)

One body, sent again and again, is what launch scripts and CI send: after the first, the plan
cache answers it (``service/plan_cache.py``). ``--fresh`` gives each request its own tables
(another draw of 80 from the pool) and seed, so every planner plans every request, and no
planner has seen its workload before: the service's planning throughput.

The cost model: data/models when it holds one, else an untrained network of the same shape
(the same planning work; its predictions are meaningless, which a load test does not mind).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing
import multiprocessing.synchronize
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task  # noqa: E402
from autoshard.core.workload_file import workload_to_dict  # noqa: E402


@dataclass(frozen=True)
class Config:
    requests: int = 2000
    concurrency: int = 16
    tables: int = 80
    devices: int = 8
    device_memory_gb: float = 16.0
    warmup: int = 50
    workers: int = 1
    out: Path = ROOT / "runs" / "benchmarks" / "load_test.json"
    note: str = ""
    profile: Path | None = None
    planners: tuple[str, ...] | None = None  # None: the service's defaults
    fresh: bool = False  # every request its own tables and seed: none is answered from the plan cache
    client: str = "auto"  # ab (ApacheBench, when on PATH and one body is sent), else aiohttp (or httpx): an async loop
    same_names: bool = False  # with fresh: every request's tables named t0, t1, ... as one model's workloads are


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children (the planning workers), from /proc."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def model_dir() -> tuple[Path, str]:
    shipped = ROOT / "data" / "models"
    if any(shipped.glob("*/cost_model.pt")):
        return shipped, "shipped (data/models)"
    import torch

    from cost_model.checkpoint import save_checkpoint
    from cost_model.features import NUM_FEATURES
    from cost_model.network import NetworkConfig, SetCostNetwork
    from cost_model.predictor import NeuralCostModel
    from cost_model.profile import ExecutionMode, detect_profile

    torch.manual_seed(0)
    profile = detect_profile("cpu", ExecutionMode.EMBEDDING_BAG, 1)
    # str(): detect_profile keeps torch's TorchVersion, which torch.load(weights_only=True) refuses
    profile = replace(profile, torch_version=str(profile.torch_version))
    model = NeuralCostModel(
        SetCostNetwork(NetworkConfig()), torch.zeros(NUM_FEATURES), torch.ones(NUM_FEATURES), profile, 128 * 2**20, 2048
    )
    folder = Path(tempfile.mkdtemp(prefix="autoshard-load-models-"))
    save_checkpoint(model, folder / model.profile.id)
    return folder, "untrained network of the shipped shape (no model in data/models)"


@functools.cache
def _pool() -> tuple:
    return generate_pool(PoolConfig(size=500, seed=0, max_log10_rows=7.0)).train


def request_body(config: Config, draw: int = 0) -> dict:
    """``config.tables`` tables of the pool, drawn with seed ``draw`` (``--fresh``: each request
    its own draw, so that no planner sees a workload twice)."""
    workload = sample_task(_pool(), config.tables, np.random.default_rng(draw), name=f"load{config.tables}")
    if config.same_names:  # the pool's tables, named as every request names them
        workload = replace(workload, tables=tuple(replace(t, name=f"t{i}") for i, t in enumerate(workload.tables)))
    body = {
        "workload": workload_to_dict(workload),
        "topology": {"num_devices": config.devices, "device_memory_gb": config.device_memory_gb},
    }
    if config.planners:
        body["planners"] = list(config.planners)
    return body


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def latency_summary(ms: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "max": max(ms) if ms else None,
        "mean": statistics.fmean(ms) if ms else None,
    }


def run_ab(url: str, body: dict, config: Config, rss: Callable[[], int], cpu: CpuReader) -> dict:
    """The same load from ApacheBench (``ab -n requests -c concurrency``, one process in C); the
    server's RSS sampled every 0.25 s meanwhile. One body for every request, so not for --fresh."""
    with tempfile.TemporaryDirectory() as tmp:
        body_file, percentiles = Path(tmp) / "body.json", Path(tmp) / "percentiles.csv"
        body_file.write_text(json.dumps(body))
        for _ in range(config.warmup):
            httpx.post(f"{url}/v1/plans", json=body, timeout=60).raise_for_status()
        rss_samples: list[float] = []
        with HealthProbe(url) as probe:
            cpu_before = cpu()
            # -l: every answer has its own elapsed_s, so lengths differ (ab would count that as a failure)
            ab = subprocess.Popen(
                [
                    "ab",
                    "-q",
                    "-l",
                    "-s",
                    "60",
                    "-n",
                    str(config.requests),
                    "-c",
                    str(config.concurrency),
                    "-e",
                    str(percentiles),
                    "-p",
                    str(body_file),
                    "-T",
                    "application/json",
                    f"{url}/v1/plans",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            while ab.poll() is None:
                rss_samples.append(rss() / 2**20)
                time.sleep(0.25)
            out = ab.stdout.read() if ab.stdout else ""
            cpu_after = cpu()
        if ab.returncode != 0 or "Complete requests" not in out:
            raise RuntimeError(f"ab failed ({ab.returncode}): {out[-2000:]}")
        at = dict(tuple(map(float, line.split(","))) for line in percentiles.read_text().splitlines()[1:])
    field = lambda name: float(re.search(rf"{name}:\s+([\d.]+)", out).group(1)) if name in out else 0.0  # noqa: E731
    answered, failed, non_2xx = field("Complete requests"), field("Failed requests"), field("Non-2xx responses")
    last = httpx.post(f"{url}/v1/plans", json=body, timeout=60).json()
    return {
        "elapsed_s": field("Time taken for tests"),
        "answered": answered,
        "latency_ms": {"p50": at[50], "p90": at[90], "p99": at[99], "max": at[100], "mean": None},
        "statuses": {"2xx": int(answered - non_2xx), "non_2xx": int(non_2xx)},
        "errors": [out[out.index("Failed requests") :][:300]] if failed or non_2xx else [],
        "error_count": int(failed + non_2xx),
        "partial": None,
        "planners": sorted(p["planner"] for p in last["plans"]),
        "health": probe.latencies,
        "metrics": httpx.get(f"{url}/metrics").text,
        "cpu_s": cpu_spent(cpu_before, cpu_after),
        # the RSS curve over time, in ten equal spans (a soak compares the first with the last)
        "rss_every_1000": [float(np.mean(c)) for c in np.array_split(rss_samples, 10) if len(c)],
    }


async def run_load(
    url: str, body: dict, config: Config, rss: Callable[[], int], cpu: CpuReader, client_kind: str
) -> dict:
    """The load from an async Python loop on this process: aiohttp (``--client aiohttp``, about
    half httpx's CPU per request, which the two cores share with the server) or httpx."""
    # --fresh: tables and a seed no request used before, each body drawn and encoded before
    # the clock starts, so that the client's own share of the two cores is the HTTP alone
    count = config.warmup + config.requests
    encoded = iter(
        [json.dumps({**request_body(config, draw), "seed": draw}).encode() for draw in range(1, count + 1)]
        if config.fresh
        else [json.dumps(body).encode()] * count
    )
    async with http_session(url, config.concurrency + 2, client_kind) as post:
        for _ in range(config.warmup):
            status, _ = await post(next(encoded))
            if status != 200:
                raise RuntimeError(f"a warm-up request answered {status}")
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        errors: list[str] = []
        partial = 0
        planners: set[str] = set()
        rss_every_1000: list[float] = []  # the server's RSS (MB) after each 1,000 answers: a soak's memory curve
        remaining = config.requests

        async def worker() -> None:
            nonlocal remaining, partial
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                try:
                    status, text = await post(next(encoded))
                    latencies.append(time.perf_counter() - started)
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 200:
                        report = json.loads(text)
                        partial += bool(report["partial"])
                        planners.update(p["planner"] for p in report["plans"])
                    else:
                        errors.append(text[:200].decode(errors="replace"))
                except (TimeoutError, aiohttp.ClientError, httpx.HTTPError) as error:
                    errors.append(f"{type(error).__name__}: {error}")
                if (len(latencies) + len(errors)) % 1000 == 0:
                    rss_every_1000.append(rss() / 2**20)

        with HealthProbe(url) as probe:
            cpu_before, started = cpu(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(config.concurrency)))
            elapsed, cpu_after = time.perf_counter() - started, cpu()
    metrics = httpx.get(f"{url}/metrics").text
    return {
        "elapsed_s": elapsed,
        "answered": len(latencies),
        "error_count": len(errors),  # a non-200 or a failure each
        "latency_ms": latency_summary([x * 1000 for x in latencies]),
        "statuses": statuses,
        "errors": errors,
        "partial": partial,
        "planners": sorted(planners),
        "health": probe.latencies,
        "metrics": metrics,
        "rss_every_1000": rss_every_1000,
        "cpu_s": cpu_spent(cpu_before, cpu_after),
    }


Post = Callable[[bytes], Awaitable[tuple[int, bytes]]]
"""POST /v1/plans with this JSON body -> (status, body)."""


@contextlib.asynccontextmanager
async def http_session(url: str, connections: int, kind: str) -> AsyncIterator[Post]:
    """``Post`` over ``connections`` kept-alive connections, from aiohttp or httpx."""
    headers = {"content-type": "application/json"}
    if kind == "aiohttp":
        async with aiohttp.ClientSession(
            url, connector=aiohttp.TCPConnector(limit=connections), timeout=aiohttp.ClientTimeout(total=60)
        ) as session:

            async def post(data: bytes) -> tuple[int, bytes]:
                async with session.post("/v1/plans", data=data, headers=headers) as response:
                    return response.status, await response.read()

            yield post
        return
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def post(data: bytes) -> tuple[int, bytes]:
            response = await client.post("/v1/plans", content=data, headers=headers)
            return response.status_code, response.content

        yield post


def probe_health(url: str, stop: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    """GET /healthz every 50 ms until ``stop``, in its own process (so the load generator's own
    event loop does not delay it); puts the latencies (s) on ``out``."""
    latencies = []
    with httpx.Client(base_url=url, timeout=10) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/healthz").raise_for_status()
            latencies.append(time.perf_counter() - started)
            time.sleep(0.05)
    out.put(latencies)


class HealthProbe:
    """``probe_health`` in its own process while the ``with`` block runs; ``latencies`` after it."""

    def __init__(self, url: str) -> None:
        self._results: multiprocessing.Queue = multiprocessing.Queue()
        self._stop = multiprocessing.Event()
        self._process = multiprocessing.Process(target=probe_health, args=(url, self._stop, self._results))
        self.latencies: list[float] = []

    def __enter__(self) -> HealthProbe:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.latencies = self._results.get(timeout=30)
        self._process.join(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far, from /proc (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_part(server: int) -> dict[str, float]:
    """CPU seconds so far of the server's own process (HTTP, validation, answers), its planning
    workers and this process (the Python client; with ab, only its RSS sampling)."""
    return {
        "server": cpu_seconds(server),
        "planning_workers": sum(cpu_seconds(c) for c in _children(server)),
        "client": cpu_seconds(os.getpid()),
    }


CpuReader = Callable[[], dict[str, float]]


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {part: after[part] - before[part] for part in before}


def planner_times(metrics: str) -> dict[str, float]:
    """Mean server-side seconds per planner per request, from the Prometheus histograms."""
    sums = dict(re.findall(r'autoshard_planner_duration_seconds_sum\{planner="([^"]+)"\} (\S+)', metrics))
    counts = dict(re.findall(r'autoshard_planner_duration_seconds_count\{planner="([^"]+)"\} (\S+)', metrics))
    return {p: float(sums[p]) / float(counts[p]) for p in sums if float(counts.get(p, 0)) > 0}


def start_profiler(pid: int, out: Path) -> subprocess.Popen:
    """py-spy sampling the server (and its workers) until SIGINT; collapsed stacks to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--rate",
            "200",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def busy_processes(own: set[int]) -> list[str]:
    """Other processes using the CPU (so a reader knows what shared the machine)."""
    try:
        out = subprocess.run(["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    except OSError:
        return []
    rows = []
    for line in out.splitlines()[1:8]:
        pid, cpu, args = line.strip().split(None, 2)
        if int(pid) not in own and float(cpu) >= 10:
            rows.append(f"{cpu}% {args[:120]}")
    return rows


def start_service(root: Path, models: Path, *options: str) -> tuple[subprocess.Popen, str]:
    """The service of the checkout ``root`` (models from ``models``; more ``autoshard serve``
    options) on a free port, once ``/readyz`` says ready: (the process, its URL). Fails with the
    server's output if it stops first, or after 180 s."""
    url = f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autoshard",
            "serve",
            "--port",
            url.rsplit(":", 1)[1],
            "--model-dir",
            str(models),
            "--no-access-log",
            "--log-level",
            "warning",
            *options,
        ],
        cwd=root,
        env={**os.environ, "AUTOSHARD_NO_REEXEC": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            try:
                ready = httpx.get(f"{url}/readyz", timeout=2)
                if ready.status_code == 200:
                    assert ready.json()["status"] == "ready", f"the server is degraded: {ready.json()}"
                    return server, url
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
    except BaseException:
        server.kill()
        raise


def stop_service(server: subprocess.Popen) -> int | None:
    """SIGTERM, then the exit code (None: still running after 30 s, killed)."""
    server.send_signal(signal.SIGTERM)
    try:
        return server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        return None


def main(config: Config) -> dict:
    client = (
        config.client if config.client != "auto" else ("ab" if shutil.which("ab") and not config.fresh else "aiohttp")
    )
    if client == "ab" and (config.fresh or not shutil.which("ab")):
        sys.exit(
            "error: --client ab needs ab on PATH (apt-get install apache2-utils) and one body (not --fresh); "
            "or use --client aiohttp"
        )
    folder, model_note = model_dir()
    server, url = start_service(ROOT, folder, "--workers", str(config.workers))
    try:
        body = request_body(config)
        rss_before = rss_bytes(server.pid)
        load_before = os.getloadavg()
        profiler = start_profiler(server.pid, config.profile) if config.profile else None
        rss = lambda: rss_bytes(server.pid)  # noqa: E731
        cpu = functools.partial(cpu_by_part, server.pid)
        result = (
            run_ab(url, body, config, rss, cpu)
            if client == "ab"
            else asyncio.run(run_load(url, body, config, rss, cpu, client))
        )
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        rss_after = rss_bytes(server.pid)
        load_after = os.getloadavg()
        others = busy_processes({os.getpid(), server.pid})
    finally:
        exit_code = stop_service(server)

    health_ms = [x * 1000 for x in result["health"]]
    errors = result["error_count"]
    report = {
        "setting": {
            "requests": config.requests,
            "concurrency": config.concurrency,
            "tables": config.tables,
            "devices": config.devices,
            "device_memory_gb": config.device_memory_gb,
            "requests_alike": "no: each its own tables and seed, every planner runs"
            if config.fresh
            else "yes: one body, answered from the plan cache after the first",
            "planners": result["planners"],
            "workers": config.workers,
            "cost_model": model_note,
            "client": {
                "ab": "ApacheBench (ab, one process in C)",
                "aiohttp": "aiohttp.ClientSession",
                "httpx": "httpx.AsyncClient",
            }[client]
            + " on the same machine",
            "cpus": os.cpu_count(),
        },
        "throughput_rps": result["answered"] / result["elapsed_s"],
        "elapsed_s": result["elapsed_s"],
        "latency_ms": result["latency_ms"],
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(result["statuses"].items())},
        "partial_answers": result["partial"],
        "healthz_under_load_ms": {
            "probes": len(health_ms),
            "p50": percentile(health_ms, 50),
            "p99": percentile(health_ms, 99),
            "max": max(health_ms) if health_ms else None,
        },
        "server_rss_mb": {
            "before": rss_before / 2**20,
            "after": rss_after / 2**20,
            # Python loop: after every 1,000 answers; ab: the means of ten equal spans of time
            "every_1000_requests": result["rss_every_1000"],
            "last_over_first_1000": (
                result["rss_every_1000"][-1] / result["rss_every_1000"][0]
                if len(result["rss_every_1000"]) > 1
                else None
            ),
        },
        # CPU time per answered request, over the timed run: where the two cores went
        "cpu_ms_per_request": {
            part: 1000 * seconds / max(result["answered"], 1) for part, seconds in result["cpu_s"].items()
        },
        "server_planner_ms_per_request": {p: 1000 * t for p, t in planner_times(result["metrics"]).items()},
        "plan_cache": {
            k: float(v)
            for k, v in re.findall(r'autoshard_plan_cache_total\{result="([^"]+)"\} (\S+)', result["metrics"])
        },
        "server_exit_code_after_sigterm": exit_code,
        "machine": {"loadavg_before": load_before, "loadavg_after": load_after, "other_busy_processes": others},
        "target": {"p99_ms": 150, "throughput_rps": 100},
        "note": config.note,
        "error_samples": result["errors"][:5],
    }
    report["meets_target"] = report["latency_ms"]["p99"] <= 150 and report["throughput_rps"] >= 100 and errors == 0
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def parse(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Config()
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--tables", type=int, default=defaults.tables)
    parser.add_argument("--devices", type=int, default=defaults.devices)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--out", type=Path, default=defaults.out)
    parser.add_argument("--note", default="", help="Free text stored with the figures (e.g. what else ran).")
    parser.add_argument("--profile", type=Path, help="Also record the server with py-spy (collapsed stacks).")
    parser.add_argument("--planners", help="Comma-separated planners (default: the service's defaults).")
    parser.add_argument(
        "--client",
        choices=("auto", "ab", "aiohttp", "httpx"),
        default=defaults.client,
        help="The load generator (auto: ab when it is on PATH and the requests are alike, else "
        "aiohttp; httpx, the loop of figures before 2026-12-04 22:00, spends twice its CPU).",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="Give every request its own seed, so that none is answered from the plan cache.",
    )
    parser.add_argument(
        "--same-names",
        action="store_true",
        help="With --fresh: name every request's tables t0, t1, ..., as a model's workloads are named "
        "from one request to the next (distinct tables under names the server has seen).",
    )
    args = parser.parse_args(argv)
    return Config(
        args.requests,
        args.concurrency,
        args.tables,
        args.devices,
        defaults.device_memory_gb,
        args.warmup,
        args.workers,
        args.out,
        args.note,
        args.profile,
        tuple(args.planners.split(",")) if args.planners else None,
        args.fresh,
        args.client,
        args.same_names,
    )


if __name__ == "__main__":
    figures = main(parse())
    print(json.dumps({k: v for k, v in figures.items() if k not in ("error_samples",)}, indent=1))
