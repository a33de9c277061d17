"""A small client of the planning service, for training launchers.

```python
from autoshard.client import AutoShardClient
from autoshard.core.types import Table, Topology

client = AutoShardClient("http://autoshard:8000", token=os.environ.get("AUTOSHARD_TOKEN"))
result = client.plan([Table("user", 4_000_000, 128, pooling_factor=1.0), ...], Topology(8, 16))
result.best_plan                 # our ShardingPlan (every planner's: result.plans)
result.torchrec_plan()           # TorchRec ShardingPlan for DistributedModelParallel(plan=...)
result.parameter_constraints()   # TorchRec ParameterConstraints, for TorchRec's own planner
result.warnings                  # inputs the service's cost model extrapolates to
report = client.replan(new_tables, Topology(8, 16), current_plan, max_moves=(2, 4))  # the model changed
report["plans"][1]["placement"]  # the 2-move re-plan, as the next re-plan's current_plan
```

The service's errors come back as the same typed errors the library raises in process:
``InputError`` (a bad field, or a table the cost model cannot answer such as an fp16 table for
a model trained on fp32: ``field`` is its path in the request), ``PlannerError`` (the tables do
not fit; a planner unavailable, e.g. ``rl`` without a policy), ``ModelError``; anything else (401, 413, 504) is a
``ServiceError`` with the status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from autoshard.core.errors import (
    AutoShardError,
    InputError,
    ModelError,
    PlannerError,
    PlannerErrorKind,
)
from autoshard.core.shard_labels import plan_shards
from autoshard.core.types import (
    DevicePlan,
    ShardingPlan,
    Table,
    Topology,
    Workload,
)
from autoshard.core.workload_file import table_to_dict

if TYPE_CHECKING:
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import ShardingPlan as TorchRecShardingPlan


class ServiceError(AutoShardError):
    """The service refused the request for a reason that is not the input's fault (401, 413,
    504, 5xx), or could not be reached."""

    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message
        super().__init__(f"HTTP {status}: {message}" if status else message)


@dataclass(frozen=True)
class PlanResult:
    """The service's answer, as our frozen types."""

    workload: Workload
    topology: Topology
    plans: dict[str, ShardingPlan]
    best: str
    improvement_over: dict[str, float]
    skipped: dict[str, str]
    partial: bool
    cost_unit: str
    profile: str | None
    torchrec_exports: dict[str, dict[str, Any]] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()  # inputs the service's cost model extrapolates to

    @property
    def best_plan(self) -> ShardingPlan:
        return self.plans[self.best]

    def torchrec_plan(self, planner: str | None = None, compute_device: str = "cuda") -> TorchRecShardingPlan:
        """The plan (default: the best) as a TorchRec ShardingPlan over the workload's
        EmbeddingBagCollection (module path ``""``). Needs torchrec."""
        from autoshard.torchrec.bridge import to_torchrec_plan

        topology = self.topology
        plan = self.plans[planner or self.best]
        return to_torchrec_plan(plan, self.workload, topology.num_devices, compute_device, topology.local_world_size)

    def parameter_constraints(self, planner: str | None = None) -> dict[str, ParameterConstraints]:
        """TorchRec ParameterConstraints of the plan (default: the best). Needs torchrec."""
        from autoshard.torchrec.bridge import to_parameter_constraints

        return to_parameter_constraints(self.plans[planner or self.best], self.topology.local_world_size)


class AutoShardClient:
    """HTTP client of the planning service (httpx). ``transport`` lets tests pass an in-process app."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            transport=transport or httpx.HTTPTransport(retries=retries),
        )

    def __enter__(self) -> AutoShardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def plan(
        self,
        tables: Workload | Sequence[Table],
        topology: Topology,
        planners: Sequence[str] | None = None,
        *,
        batch_size: int = 2048,
        name: str = "workload",
        profile: str | None = None,
        compute_device: str | None = None,
        ddr_cap_gb: float | None = None,
        allow_column_split: bool | None = None,
        sharding_types: Sequence[str] | None = None,
        seed: int = 0,
        time_budget_s: float | None = None,
        torchrec_export: bool = False,
    ) -> PlanResult:
        """Plan ``tables`` (a Workload, or tables with ``batch_size``) on ``topology`` with the
        named planners (default: every planner the service runs by default); ``allow_column_split``:
        which may split tables (None: the service's default, the cost-model planners; True: all; False: none);
        ``sharding_types``: TorchRec's names of the types planners may choose (None: all);
        ``compute_device``: with ``profile="torchrec"``, the device TorchRec's estimators price;
        ``ddr_cap_gb``: with it on cuda, each rank's host memory for UVM tables (TorchRec's ``ddr_cap``)."""
        workload = tables if isinstance(tables, Workload) else Workload(tuple(tables), batch_size, name)
        body: dict[str, Any] = {
            **_task_body(workload, topology),
            "planners": list(planners) if planners is not None else None,
            "profile": profile,
            **_torchrec_fields(compute_device, ddr_cap_gb),
            "allow_column_split": allow_column_split,
            "sharding_types": list(sharding_types) if sharding_types is not None else None,
            "seed": seed,
            "time_budget_s": time_budget_s,
        }
        params = {"format": "torchrec"} if torchrec_export else None
        report = self._request("POST", "/v1/plans", json=body, params=params)
        return _result(workload, topology, report)

    def replan(
        self,
        tables: Workload | Sequence[Table],
        topology: Topology,
        current_plan: Mapping[str, Any],
        max_moves: Sequence[int] = (4,),
        *,
        batch_size: int = 2048,
        name: str = "workload",
        profile: str | None = None,
        compute_device: str | None = None,
        ddr_cap_gb: float | None = None,
        allow_column_split: bool = True,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Re-plan ``current_plan`` (a ``--format torchrec`` export, or a previous answer's plan's
        ``placement``) for the workload as it is now, moving at most each of ``max_moves`` of its
        shards: the service's answer (``POST /v1/replans``), each plan with its ``placement``.
        ``compute_device`` and ``ddr_cap_gb`` as for ``plan``."""
        workload = tables if isinstance(tables, Workload) else Workload(tuple(tables), batch_size, name)
        body = {
            **_task_body(workload, topology),
            "current_plan": dict(current_plan),
            "max_moves": list(max_moves),
            "profile": profile,
            **_torchrec_fields(compute_device, ddr_cap_gb),
            "allow_column_split": allow_column_split,
            "time_budget_s": time_budget_s,
        }
        return self._request("POST", "/v1/replans", json=body)

    def torchrec_sharding_plan(
        self,
        tables: Workload | Sequence[Table],
        topology: Topology,
        planners: Sequence[str] | None = None,
        compute_device: str = "cuda",
        **options: Any,
    ) -> TorchRecShardingPlan:
        """The best plan as a TorchRec ShardingPlan, ready for ``DistributedModelParallel(plan=...)``."""
        return self.plan(tables, topology, planners, **options).torchrec_plan(compute_device=compute_device)

    def planners(self) -> dict[str, Any]:
        return self._request("GET", "/v1/planners")

    def profiles(self) -> dict[str, Any]:
        return self._request("GET", "/v1/profiles")

    def ready(self) -> dict[str, Any]:
        return self._request("GET", "/readyz")

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ServiceError(
                0, f"cannot reach the AutoShard service at {self._http.base_url} ({type(error).__name__}: {error})"
            ) from None
        if response.is_success:
            try:
                body = response.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):
                raise ServiceError(
                    response.status_code,
                    f"not an AutoShard service at {self._http.base_url}: {path} answered {response.text[:200]!r}",
                )
            return body
        raise _error(response)


def _task_body(workload: Workload, topology: Topology) -> dict[str, Any]:
    return {
        "workload": {
            "name": workload.name,
            "batch_size": workload.batch_size,
            "tables": [table_to_dict(t) for t in workload.tables],
            **workload.constraints.to_dict(),
        },
        "topology": topology.to_dict(),
    }


def _torchrec_fields(compute_device: str | None, ddr_cap_gb: float | None) -> dict[str, Any]:
    """The request's ``compute_device`` and ``ddr_cap_gb``, where given (the service's defaults else)."""
    given = {"compute_device": compute_device, "ddr_cap_gb": ddr_cap_gb}
    return {key: value for key, value in given.items() if value is not None}


def _error(response: httpx.Response) -> AutoShardError:
    try:
        detail = response.json()["detail"][0]
        loc, msg, kind = detail.get("loc", []), detail.get("msg", ""), detail.get("type", "")
        ctx: Mapping[str, Any] = detail.get("ctx") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ServiceError(response.status_code, response.text[:500])
    status = response.status_code
    if status == 422 and kind.startswith("infeasible."):  # the fixes once, as the error's list, not also inline
        fixes = tuple(ctx.get("fixes", ()))
        return PlannerError(_kind(ctx.get("kind")), msg.split(". Fixes: ")[0] if fixes else msg, fixes)
    if status == 422:  # msg already names the table and the fix; field is the path in the request
        return InputError(".".join(str(p) for p in loc) or "request", msg)
    if status == 503 and kind == "unavailable":
        return PlannerError(PlannerErrorKind.UNAVAILABLE, msg, tuple(ctx.get("fixes", ())))
    if status == 503 and kind == "model_unavailable":
        return ModelError(msg)
    return ServiceError(status, msg)


def _kind(value: Any) -> PlannerErrorKind:
    try:
        return PlannerErrorKind(value)
    except ValueError:
        return PlannerErrorKind.INSUFFICIENT_MEMORY


def _result(workload: Workload, topology: Topology, report: dict[str, Any]) -> PlanResult:
    tables = {t.name: t for t in workload.tables}
    plans = {}
    for entry in report["plans"]:
        labels = [device["tables"] for device in entry["devices"]]  # every sharding type's shards, read back
        shards = plan_shards(labels, tables, None if topology is None else topology.local_world_size)
        devices = [DevicePlan(s, float(d["cost_ms"])) for s, d in zip(shards, entry["devices"])]
        plans[entry["planner"]] = ShardingPlan(
            entry["planner"], tuple(devices), float(entry["plan_time_s"]), reused_s=float(entry.get("reused_s", 0.0))
        )
    return PlanResult(
        workload,
        topology,
        plans,
        report["best"],
        dict(report["improvement_over"]),
        {s["planner"]: s["reason"] for s in report["skipped"]},
        bool(report["partial"]),
        report["cost_unit"],
        report.get("profile"),
        {e["planner"]: e["torchrec"] for e in report["plans"] if e.get("torchrec")},
        report,
        tuple(report.get("warnings", ())),
    )


__all__ = ["AutoShardClient", "PlanResult", "ServiceError"]
