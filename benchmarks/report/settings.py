"""What the report runs in each mode, and the goals it judges against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root: every benchmark runs there."""

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
    judges_suite: str = "hosts"  # the judges side by side: benchmarks/sharding_4d.py on these tasks
    judges_tasks: str = "syn80_2x4,syn80_2x8"
    judges_time_limit_s: float = 30.0


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
    judges_tasks="syn80_2x4",
    judges_time_limit_s=10.0,
)
