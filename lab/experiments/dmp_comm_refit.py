"""Issue 61: one `dmp_mape.py` measurement priced by two communication models, part by part.

    AUTOSHARD_MODEL=PROFILE python lab/experiments/dmp_comm_refit.py RESULT.json OTHER/communication.json

    # lab/results/dmp_comm_refit (/tmp/old: the profile with 784ed38's bare-collective fits): the
    # run measured with the bare fits, priced again by the dist modules' fits (the profiles' now)
    AUTOSHARD_MODEL=/tmp/old/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 python lab/experiments/dmp_comm_refit.py \
        lab/results/dmp_comm_refit/dmp_mape_bare_fits.json \
        data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1/communication.json
    # and the run measured with the dist modules' fits, priced again by the bare ones
    AUTOSHARD_MODEL=data/models/cpu-amd-epyc-f25m17-fbgemm_tbe-t1 python lab/experiments/dmp_comm_refit.py \
        lab/results/dmp_comm_refit/dmp_mape_dist_module_fits.json \
        /tmp/old/cpu-amd-epyc-f25m17-fbgemm_tbe-t1/communication.json

``RESULT.json`` is a `dmp_mape.py` result measured with the profile ``AUTOSHARD_MODEL`` names. Its
plans are made again (`dmp_mape.plan_variants`: the same profile, the same plans; checked against
the result's own predictions) and each measured rank is priced by the profile's communication
model and by ``OTHER``'s: the median over ranks of measured / predicted for the ids' input dist,
the output dist of ranks whose shards all-to-all (table-/column-wise, replicas) and of ranks with
row-wise shards, and the all-reduce. The same measurement under both, so only the fits differ.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dmp_mape  # noqa: E402

from autoshard.core.communication import CommunicationModel  # noqa: E402
from autoshard.profiles import load_profile_or_exit  # noqa: E402
from autoshard.torchrec.judges import predict_ranks  # noqa: E402

ALL_TO_ALL_TYPES = {"table_wise", "column_wise", "table_column_wise", "data_parallel"}


def medians(rows: list[dict], plans: dict, model: CommunicationModel, profile: object) -> dict:
    got: dict[str, list[float]] = {"input_dist": [], "output_dist_all_to_all": [], "output_dist_row_wise": []}
    got["allreduce"] = []
    for row in rows:
        plan, topo = plans[row["plan"]]
        batch = row.get("batch_size", dmp_mape.BATCH)
        kind = "output_dist_all_to_all" if set(row["types"]) <= ALL_TO_ALL_TYPES else "output_dist_row_wise"
        for r, p in zip(row["ranks"], predict_ranks(plan, batch, topo, profile.model, model)):
            m = r["parts_ms"]
            pairs = [
                ("input_dist", m["input_dist"], p.input_dist_ms),
                (kind, m["output_dist_forward"] + m["output_dist_backward"], p.output_dist_ms),
                ("allreduce", m["allreduce"], p.allreduce_ms),
            ]
            got.update({k: got[k] + [meas / pred] for k, meas, pred in pairs if pred and meas > 0})
    return {k: {"median": round(statistics.median(v), 3), "ranks": len(v)} for k, v in got.items() if v}


def main() -> None:
    result = json.loads(Path(sys.argv[1]).read_text())
    other = CommunicationModel.load(Path(sys.argv[2]))
    profile = load_profile_or_exit(None)
    plans = {}
    with contextlib.redirect_stdout(sys.stderr):  # plan_variants says which variants repeat a placement
        for workload in dmp_mape.workloads():
            for _, plan, topo in dmp_mape.plan_variants(workload, profile):
                plans[plan.planner] = (plan, topo)
    rows = [row for row in result["plans"] if row["plan"] in plans]
    for row in rows:  # the same plans: the profile's prices are the result's own
        plan, topo = plans[row["plan"]]
        ours = predict_ranks(plan, dmp_mape.BATCH, topo, profile.model, profile.communication)
        recorded = [r["predicted"]["output_dist"] for r in row["ranks"]]
        assert all(abs(a.output_dist_ms - b) < 1e-6 * max(1.0, b) for a, b in zip(ours, recorded)), row["plan"]
    print(
        json.dumps(
            {
                "result": sys.argv[1],
                "load_1min_start_end": result["load_1min_start_end"],
                "plans": f"{len(rows)} of {len(result['plans'])}",
                "profile_communication": {
                    "measured_on": profile.communication.measured_on,
                    "parts": medians(rows, plans, profile.communication, profile),
                },
                "other_communication": {
                    "measured_on": other.measured_on,
                    "parts": medians(rows, plans, other, profile),
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
