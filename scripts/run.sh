#!/usr/bin/env bash
# Set up, then plan a bundled workload (Criteo Terabyte, MLPerf DLRM-DCNv2) on 8 devices with
# every planner, the shipped cost model and the shipped RL policy (the cost-model planners split
# tables column-wise where the model predicts it pays; the heuristics place whole tables).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
autoshard plan criteo_terabyte --devices 8 --memory-gb 24 --planner all "$@"
