"""Planning off the event loop, with a time budget per request.

A request's planners run as tasks (``service.tasks``) in a pool sized to the cores: by default a
pool of processes (the planners are CPU-bound Python, so threads would share one core through
the GIL and slow the event loop down; processes plan in parallel and leave /healthz alone), or
a pool of threads (``AUTOSHARD_POOL=thread``, e.g. for tests that register planners at run time).
Every worker starts from the models the server loaded at its start-up (handed over in memory,
not re-read from disk), so a worker restarted after a crash plans exactly as before, even if a
model file has since changed or vanished. Worker processes run at a lower CPU priority
(``AUTOSHARD_PLANNER_NICENESS``), so that the server's event loop answers at once even when every
core plans.

The budget counts from the request's arrival, queueing included. When it runs out, the request
answers with the planners that finished (flagged ``partial``), or 504 when none did. Tasks not
started are cancelled (or skip themselves when they start late); a planner already running
cannot be interrupted: it finishes and its result is dropped.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import partial

from autoshard.core.errors import AutoShardError, PlannerErrorKind
from autoshard.planning.registry import import_planners
from autoshard.planning.runs import PlannerRun, RunOutcome
from autoshard.profiles import LoadedModel, ModelStore
from service.tasks import (
    ErrorInfo,
    PlannerResult,
    PlannerTask,
    ReplanResult,
    ReplanTask,
    planner_run,
    run_replan,
    run_task,
)

log = logging.getLogger("autoshard.service")
TaskFunction = Callable[[PlannerTask], list[PlannerResult]]


@dataclass
class PlanningOutcome:
    """A request's planner runs, in its tasks' order (``LATE``: a task cut off by the budget, or a
    planner its task did not start in time); ``worker_failed``: the planners whose worker process
    failed (skipped, and not timed)."""

    runs: list[PlannerRun] = field(default_factory=list)
    worker_failed: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


class PlanningUnavailable(AutoShardError):
    """The planning workers failed (a worker process died); the pool has been restarted."""


class PlanningPool:
    """Runs a request's tasks in an executor; subclasses choose threads or processes."""

    kind = "base"

    def __init__(self, size: int) -> None:
        self.size = size
        self._executor = self._new_executor()

    def _new_executor(self) -> Executor:
        raise NotImplementedError

    def _function(self) -> TaskFunction:
        raise NotImplementedError

    async def start(self) -> None:
        """Start every worker now (loading the models), not on the first request."""

    async def run(self, tasks: Sequence[PlannerTask], budget_s: float, started: float) -> PlanningOutcome:
        if not tasks:
            return PlanningOutcome(elapsed_s=time.monotonic() - started)
        try:
            futures = self._submit(tasks)
        except BrokenProcessPool:  # a worker died since the last request: start afresh
            self._restart()
            futures = self._submit(tasks)
        done, pending = await asyncio.wait(futures, timeout=max(budget_s, 0.0))
        for future in pending:
            future.cancel()
        outcome = PlanningOutcome()
        broken = False
        for task, future in zip(tasks, futures):
            if future not in done or future.cancelled():
                outcome.runs.extend(PlannerRun(name, RunOutcome.LATE) for name in task.names)
            elif future.exception() is not None:
                broken = broken or isinstance(future.exception(), BrokenProcessPool)
                log.error("planners %s: %r", ", ".join(task.names), future.exception())
                failed = "the planning worker failed"
                outcome.runs.extend(PlannerRun(name, RunOutcome.SKIPPED, reason=failed) for name in task.names)
                outcome.worker_failed.extend(task.names)
            else:
                outcome.runs.extend(planner_run(result, task.workload) for result in future.result())
        outcome.elapsed_s = time.monotonic() - started
        if broken:
            self._restart()
            if not any(run.plan is not None for run in outcome.runs):
                raise PlanningUnavailable(
                    "a planning worker process died (out of memory?); the pool has been restarted: retry the request"
                )
        return outcome

    async def replan(self, task: ReplanTask, budget_s: float) -> ReplanResult:
        """One re-plan in the pool; ``asyncio.TimeoutError`` past ``budget_s`` (a re-plan already
        running finishes, and its answer is dropped), ``PlanningUnavailable`` if its worker died."""
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, self._replan_function(), task)
        except BrokenProcessPool:  # a worker died since the last request: start afresh
            self._restart()
            future = loop.run_in_executor(self._executor, self._replan_function(), task)
        try:
            return await asyncio.wait_for(future, timeout=max(budget_s, 0.0))
        except BrokenProcessPool:
            self._restart()
            raise PlanningUnavailable(
                "a planning worker process died (out of memory?); the pool has been restarted: retry the request"
            ) from None

    def _replan_function(self) -> Callable[[ReplanTask], ReplanResult]:
        raise NotImplementedError

    def _submit(self, tasks: Sequence[PlannerTask]) -> list[asyncio.Future]:
        loop = asyncio.get_running_loop()
        function = self._function()
        return [loop.run_in_executor(self._executor, function, task) for task in tasks]

    def _restart(self) -> None:
        log.error("restarting the %s planning pool", self.kind)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = self._new_executor()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class ThreadPlanningPool(PlanningPool):
    """Threads of this process; each uses its own copy of each model."""

    kind = "thread"

    def __init__(self, size: int, store: ModelStore) -> None:
        self.store = store
        super().__init__(size)

    def _new_executor(self) -> Executor:
        return ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="autoshard-plan")

    def _function(self) -> TaskFunction:
        return self._call

    async def start(self) -> None:
        import_planners()  # in this process, where the threads plan

    def _replan_function(self) -> Callable[[ReplanTask], ReplanResult]:
        return self._replan

    def _replan(self, task: ReplanTask) -> ReplanResult:
        loaded = self.store[task.profile]
        return run_replan(task, self.store.for_thread(task.profile), loaded.communication, loaded.device_errors)

    def _call(self, task: PlannerTask) -> list[PlannerResult]:
        if not task.profile:
            return run_task(task, None)
        loaded = self.store[task.profile]
        return run_task(task, self.store.for_thread(task.profile), loaded.communication, loaded.policy)


_WORKER: dict[str, ModelStore] = {}


def _init_worker(models: dict[str, LoadedModel], default_profile: str | None, niceness: int) -> None:
    import os

    import torch

    if niceness:  # the server process (its event loop, /healthz) gets the CPU first
        os.nice(niceness)
    torch.set_num_threads(1)
    _WORKER["store"] = ModelStore(models, default_profile)
    gc.freeze()  # see service.main: the collector need not walk torch and the models


def _worker_call(task: PlannerTask) -> list[PlannerResult]:
    store = _WORKER["store"]
    model = store.get(task.profile) if task.profile else None
    if task.profile and model is None:  # not a profile the server loaded (a guard: the router resolves it first)
        error = ErrorInfo(
            "planner",
            f"profile {task.profile!r} did not load in the planning worker",
            PlannerErrorKind.UNAVAILABLE.value,
        )
        return [PlannerResult(name, "skipped", reason=error.message, error=error) for name in task.names]
    if model is None:
        return run_task(task, None)
    return run_task(task, model.model, model.communication, model.policy)


def _worker_replan(task: ReplanTask) -> ReplanResult:
    model = _WORKER["store"].get(task.profile)
    if model is None:  # a guard: the router resolves the profile first
        return ReplanResult(
            error=ErrorInfo(
                "planner",
                f"profile {task.profile!r} did not load in the planning worker",
                PlannerErrorKind.UNAVAILABLE.value,
            )
        )
    return run_replan(task, model.model, model.communication, model.device_errors)


def _worker_ready(seconds: float) -> int:
    # ?format=torchrec exports with torchrec: import it at start (seconds on a busy machine), not
    # within the first such request's budget. Not in _init_worker: a pool restarted after a worker
    # died would then make the next request wait for it too.
    try:
        import autoshard.torchrec.bridge  # noqa: F401
    except (ImportError, OSError):
        pass
    import_planners()
    gc.freeze()  # torchrec's objects too (~165k): a full collection walking them took 70-90 ms
    time.sleep(seconds)  # hold this worker so that the next warm-up call starts another
    return len(_WORKER["store"].models)


def tracked_objects() -> int:
    """How many objects the collector walks in this process (a worker's, for tests): after
    start-up the models, torch and torchrec are frozen, so a full collection is cheap."""
    return len(gc.get_objects())


class ProcessPlanningPool(PlanningPool):
    """Worker processes (spawned: no threads or torch state forked), each with a copy of the
    server's models (pickled once per worker start, under 1 MB for the shipped profile)."""

    kind = "process"

    def __init__(self, size: int, store: ModelStore, niceness: int = 0) -> None:
        self.store, self.niceness = store, niceness
        super().__init__(size)

    def _new_executor(self) -> Executor:
        # Each worker plans on one core: BLAS / OpenMP thread pools (numpy's matmul in the cost
        # model's head) would otherwise spin one thread per core in every worker and fight each
        # other (4x slower plans under load). Spawned workers read these at their numpy import.
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")
        return ProcessPoolExecutor(
            max_workers=self.size,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(self.store.models, self.store.default_profile, self.niceness),
        )

    def _function(self) -> TaskFunction:
        return _worker_call  # module-level: the executor pickles it by name

    def _replan_function(self) -> Callable[[ReplanTask], ReplanResult]:
        return _worker_replan

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(self._executor, partial(_worker_ready, 0.3)) for _ in range(self.size))
        )


def make_pool(kind: str, size: int, store: ModelStore, niceness: int = 0) -> PlanningPool:
    if kind == "thread":
        return ThreadPlanningPool(size, store)
    return ProcessPlanningPool(size, store, niceness)


__all__ = [
    "PlanningOutcome",
    "PlanningPool",
    "PlanningUnavailable",
    "ProcessPlanningPool",
    "ThreadPlanningPool",
    "make_pool",
]
