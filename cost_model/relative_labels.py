"""Labels from measured plans: a device set's cost relative to the other sets of its task.

``autoshard evaluate --measure`` runs every device of every plan of a task interleaved, in rounds,
so the sets of one task in one run share that hour's speed of the host (which moves from one
run to the next), and their ratios are what a planner ranks by. A set's label is the model's own
prediction times exp(its error relative to its task): the mean, over the runs that measured it,
of log(measured / predicted) less the median of that over the task's sets in that run. It teaches
the model the order of a task's sets and keeps its level; over k runs its noise falls about as
1 / sqrt(k) (docs/decisions.md, 31).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autoshard.core.types import DeviceSet, MeasuredDeviceSet
from cost_model.dataset import Labelled

if TYPE_CHECKING:
    from cost_model.predictor import NeuralCostModel

SetKey = tuple[str, tuple[str, ...], int]
"""(task, the set's table names sorted, batch size): one device set of one task, in any run."""


def set_key(device: DeviceSet) -> SetKey:
    return device.member[0], tuple(sorted(t.name for t in device.tables)), device.batch_size


def relative_labels(model: NeuralCostModel, measured: Sequence[MeasuredDeviceSet]) -> list[Labelled]:
    """One ``Labelled`` per distinct set of ``measured`` (its non-empty sets measured above 0), its
    total the model's prediction times exp(the set's mean error relative to its task); forward and
    backward the model's, scaled alike."""
    devices, predicted = _predicted(model, measured)
    errors: dict[SetKey, list[float]] = defaultdict(list)
    for logs in _centred(measured, predicted).values():
        for key, error in logs.items():
            errors[key].append(error)
    labels = []
    for key, device in devices.items():
        total, (forward, backward, network_total) = predicted[key]
        label = total * math.exp(statistics.fmean(errors[key]))
        scale = label / network_total
        labels.append(
            Labelled(
                device.tables, forward * scale, backward * scale, label, (label,), device.batch_size, (device.member,)
            )
        )
    return labels


def centred_errors(model: NeuralCostModel, measured: Sequence[MeasuredDeviceSet]) -> dict[tuple[str, str], list[float]]:
    """Per (run, task) of ``measured``: each distinct set's log(measured / the model's prediction)
    less the median of those of the task's sets in that run (the run's drift and the host's
    scale taken out), the model's error on where plans go (``autoshard.core.model_error``)."""
    return {task: list(logs.values()) for task, logs in centred_set_errors(model, measured).items()}


def centred_set_errors(
    model: NeuralCostModel,
    measured: Sequence[MeasuredDeviceSet],
) -> dict[tuple[str, str], dict[SetKey, float]]:
    """``centred_errors`` with each error under its set's key (which names its tables)."""
    _, predicted = _predicted(model, measured)
    return _centred(measured, predicted)


Predicted = dict[SetKey, tuple[float, tuple[float, float, float]]]
"""A set's predicted total, and its (forward, backward, the network's total) (``predict_detail_many``)."""


def _predicted(
    model: NeuralCostModel,
    measured: Sequence[MeasuredDeviceSet],
) -> tuple[dict[SetKey, DeviceSet], Predicted]:
    """The distinct non-empty sets measured above 0, and the model's predictions of each."""
    devices = {set_key(m.device): m.device for m in measured if m.device.tables and m.measured_ms > 0}
    predicted: Predicted = {}
    for batch in sorted({key[2] for key in devices}):
        keys = [key for key in devices if key[2] == batch]
        details = model.predict_detail_many([devices[key].tables for key in keys], batch)
        predicted.update(zip(keys, zip(details[:, 2].tolist(), map(tuple, details))))  # the total is its [2]
    return devices, predicted


def _centred(measured: Sequence[MeasuredDeviceSet], predicted: Predicted) -> dict[tuple[str, str], dict[SetKey, float]]:
    """(run, task) -> each of its sets' log error, once, less their median."""
    in_run: dict[tuple[str, str], dict[SetKey, float]] = defaultdict(dict)
    for m in measured:
        key = set_key(m.device)
        if key in predicted:
            in_run[(m.run, key[0])][key] = math.log(m.measured_ms / predicted[key][0])
    out = {}
    for task, logs in in_run.items():
        middle = statistics.median(logs.values())
        out[task] = {key: error - middle for key, error in logs.items()}
    return out
