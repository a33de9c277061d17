#!/usr/bin/env bash
# Adapt a profile of other hardware to this machine in minutes, where scripts/profile_machine.sh
# takes an hour (docs/profiles.md, "Adapt a profile in minutes"): measure 360
# table sets here (about 6 minutes on one core), fine-tune the base profile's cost model on them
# (seconds), measure this machine's all-to-all, then check the new profile with bench drift.
#
#   scripts/adapt_machine.sh                       # adapts data/models/default
#   scripts/adapt_machine.sh data/models/<profile>  # adapts another profile
#
# Run it with the machine otherwise idle. The collection resumes after a kill (run the script
# again); a profile folder that already holds a cost model is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/autoshard ] || scripts/setup.sh
. .venv/bin/activate

BASE=${1:-data/models/default}
ID=$(python -c "from cost_model.profile import ExecutionMode, detect_profile; print(detect_profile('cpu', ExecutionMode.FBGEMM_TBE, 1).id)")
T=data/traces/$ID
M=data/models/$ID
echo "adapting $BASE to this machine's profile $ID: traces $T.*, model $M"

autoshard bench collect --out "$T.jsonl.gz" --samples 300 --large-samples 60 --large-max-tables 64 --passes 3 \
  --seed 500 --pool-seed 0 --no-singles --batch-sizes 512,1024,2048,4096,8192,16384 --precisions 4,2 \
  --optimizers sgd,rowwise_adagrad --warmups 1 --repeats 5 --device cpu
if [ ! -f "$M/cost_model.pt" ]; then
  autoshard cost adapt --model "$BASE" --traces "$T.jsonl.gz" --out "$M"
  autoshard bench comm --out "$M"  # this machine's all-to-all, not the base's
fi
autoshard bench drift --traces "$T.jsonl.gz"
