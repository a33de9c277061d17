"""Answers to identical plan requests, planned once.

Every planner is deterministic given its inputs (the seeded ones take ``seed`` from the request),
and the models load once at start-up, so the same request body against the same server always
gets the same plans. Launch scripts and CI send exactly that: the same workload on every run. So
the answer of a complete plan request is kept (least recently used first out), and identical requests that arrive while it is being planned wait for that one planning instead
of starting their own. What is kept is bounded by its weight (the caller's measure of an
answer's size: tables x planners, about the shard entries it holds). Partial answers (a time budget ran out) and errors are shared with the
requests already waiting but never kept: a later request plans afresh.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer as it is sent: its JSON object (rendered once, after validation against the
    response schema) without the one field that is each request's own, ``elapsed_s``."""

    json: bytes
    partial: bool  # a time budget ran out: never kept

    def body(self, elapsed_s: float) -> bytes:
        """The JSON sent to one request: the kept object with its own ``elapsed_s`` last."""
        return b'%s,"elapsed_s":%s}' % (self.json[:-1], repr(float(elapsed_s)).encode())


class PlanCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # total weight kept; 0 keeps nothing (identical requests in flight still share)
        self.weight = 0
        self._answers: OrderedDict[str, tuple[Answer, int]] = OrderedDict()
        self._planning: dict[str, asyncio.Future[Answer]] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def peek(self, key: str) -> Answer | None:
        """The kept answer for ``key`` (most recently used now), or None."""
        kept = self._answers.get(key)
        if kept is None:
            return None
        self._answers.move_to_end(key)
        return kept[0]

    async def get_or_plan(self, key: str, plan: Callable[[], Awaitable[Answer]], weight: int) -> tuple[Answer, str]:
        """The answer for ``key`` and where it came from: ``hit`` (kept), ``joined`` (planned
        by an identical request in flight) or ``miss`` (planned now by ``plan``; kept if it is
        complete and ``weight`` fits)."""
        kept = self.peek(key)
        if kept is not None:
            return kept, "hit"
        if key in self._planning:
            return await asyncio.shield(self._planning[key]), "joined"
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._planning[key] = future
        try:
            answer = await plan()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as error:
            future.set_exception(error)
            future.exception()  # retrieved: no "never retrieved" warning when no one waits
            raise
        finally:
            del self._planning[key]
        future.set_result(answer)
        if not answer.partial and weight <= self.capacity:
            self._answers[key] = (answer, weight)
            self.weight += weight
            while self.weight > self.capacity:
                self.weight -= self._answers.popitem(last=False)[1][1]
        return answer, "miss"
