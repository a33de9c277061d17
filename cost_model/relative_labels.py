"""Labels from measured plans: a device set's cost relative to the other sets of its task.

``autoshard evaluate --measure`` runs every device of every plan of a task interleaved, in rounds,
so the sets of one task in one run share that hour's speed of the host (1.2-1.7x apart from one
run to the next on this project's host), and their ratios are what a planner ranks by. A set's
label is the model's own prediction times exp(its error relative to its task): the mean, over
the runs that measured it, of log(measured / predicted) less the median of that over the task's
sets in that run. It teaches the model the order of a task's sets and keeps its level; over k
runs its noise falls about as 1 / sqrt(k) (docs/cost_model.md, "Labels good enough to learn from
where plans go": fine-tuned on other tasks' sets with four runs' labels, the error within a
held-out task fell from 7.2% to 6.3%).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

from autoshard.types import DeviceSet, MeasuredDeviceSet
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
    measured = [m for m in measured if m.device.tables and m.measured_ms > 0]
    devices = {set_key(m.device): m.device for m in measured}
    predicted: dict[SetKey, tuple[float, tuple[float, float, float]]] = {}
    for batch in sorted({key[2] for key in devices}):
        keys = [key for key in devices if key[2] == batch]
        sets = [devices[key].tables for key in keys]
        predicted.update(zip(keys, zip(model.predict_many(sets, batch), map(tuple, model.predict_detail_many(sets, batch)))))
    in_run: dict[tuple[str, str], dict[SetKey, float]] = defaultdict(dict)  # (run, task) -> a set's log error, once
    for m in measured:
        key = set_key(m.device)
        in_run[(m.run, key[0])][key] = math.log(m.measured_ms / predicted[key][0])
    errors: dict[SetKey, list[float]] = defaultdict(list)
    for logs in in_run.values():
        middle = statistics.median(logs.values())
        for key, error in logs.items():
            errors[key].append(error - middle)
    labels = []
    for key, device in devices.items():
        total, (forward, backward, network_total) = predicted[key]
        label = total * math.exp(statistics.fmean(errors[key]))
        scale = label / network_total
        labels.append(Labelled(device.tables, forward * scale, backward * scale, label, (label,), device.batch_size,
                               (device.member,)))
    return labels
