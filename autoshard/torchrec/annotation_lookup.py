"""TorchRec's estimator, sped up without changing an estimate: TorchRec 1.8 finds its hardware
config's annotated methods by scanning ``dir(config)`` for every shard it prices (60% of its time
on 1,000 tables); each is found once per config class, annotation and sharding type instead.
Installed by the first estimate (ours, or TorchRec's planner as the reference runs it), never on
import."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any


def _found_once_per_class(find: Callable[..., Any]) -> Callable[..., Any]:
    """``find`` (TorchRec's scan of a hardware config's methods for an annotation: ``dir`` and
    ``getattr`` of every attribute, on every shard it prices) remembered per config class,
    annotation and sharding type: the methods are the class's, so each is found once and the
    same method is returned. A config with callables of its own (instance attributes) is scanned
    as before."""
    found: dict[tuple[type, str, str | None], str | None] = {}

    def find_once(config: Any, marker: str, sharding_type: str | None = None) -> Any:
        own = getattr(config, "__dict__", None)
        if own and any(callable(v) for v in own.values()):
            return find(config, marker, sharding_type)
        key = (type(config), marker, sharding_type)
        if key not in found:
            method = find(config, marker, sharding_type)
            found[key] = None if method is None else next(n for n in dir(config) if getattr(config, n, None) == method)
        name = found[key]
        return None if name is None else getattr(config, name)

    return find_once


@cache  # once a process: a test may put TorchRec's own scan back
def find_annotations_once() -> None:
    """TorchRec 1.8's estimator spends most of its time finding its config's annotated methods
    (60% on 1,000 tables): find each once (``_found_once_per_class``); the estimates are the same.
    Installed when ``TaskEstimates`` is first built (our estimator in use), not on import; a
    TorchRec without these functions is left as it is."""
    from torchrec.distributed.planner.estimator import annotations

    for name in ("_get_annotated_method", "_get_coefficient_method"):
        find = getattr(annotations, name, None)
        if find is not None:
            find_once = _found_once_per_class(find)
            find_once.__wrapped__ = find  # type: ignore[attr-defined]  # TorchRec's own scan
            setattr(annotations, name, find_once)


__all__ = ["find_annotations_once"]
