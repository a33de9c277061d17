#!/usr/bin/env bash
# Collect a device profile for this machine and train its models: the traces, the cost model,
# the all-to-all model and the RL policy, in data/traces/<id>.* and data/models/<id>/, where <id>
# is this machine's profile id (e.g. cpu-intel-r-xeon-r-processor-fbgemm_tbe-t1).
#
#   scripts/profile_machine.sh            # about 50 minutes on one core of a 2-core CPU machine
#
# Run it with the machine otherwise idle: every stage but the training measures. Each collection
# resumes where it stopped (run the script again after a kill); a stage whose output is complete
# is skipped. The stages are those of docs/traces.md at fewer samples: random sets (training,
# validation, splits (a) and (b)), large sets, small-row tables, Criteo-like one-hot sets, a fresh
# pool drawn once for the headline (never trained or tuned on), then the cost model (the shipped
# network, chosen on validation in docs/cost_model.md), the all-to-all and the policy.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/autoshard ] || scripts/setup.sh
. .venv/bin/activate

ID=$(python -c "from cost_model.profile import ExecutionMode, detect_profile; print(detect_profile('cpu', ExecutionMode.FBGEMM_TBE, 1).id)")
T=data/traces/$ID
M=data/models/$ID
W="--batch-sizes 512,1024,2048,4096,8192,16384 --precisions 4,2 --optimizers sgd,rowwise_adagrad --warmups 1 --repeats 5 --device cpu"
echo "profile $ID: traces $T.*, models $M"

autoshard bench collect --out "$T.jsonl.gz" --samples 800 --large-samples 200 --passes 3 --seed 0 --pool-seed 0 \
  --large-max-tables 64 $W
autoshard bench collect --out "$T.large.jsonl.gz" --samples 0 --max-tables 64 --large-samples 40 \
  --large-max-tables 160 --passes 3 --seed 1 --pool-seed 0 --no-singles $W
autoshard bench collect --out "$T.small-rows.jsonl.gz" --precisions 4 --optimizers sgd --pool-size 200 --pool-seed 14 \
  --seed 14 --min-log10-rows 0 --samples 80 --large-samples 100 --large-max-tables 64 --passes 3 \
  --batch-sizes 512,1024,2048,4096,8192,16384 --warmups 1 --repeats 5 --device cpu
autoshard bench collect --out "$T.one-hot-mixed.jsonl.gz" --precisions 4,2 --optimizers sgd,rowwise_adagrad \
  --pool-size 150 --pool-seed 16 --seed 16 --min-log10-rows 0 --dims 8,16,32 --one-hot-share 1 --samples 250 \
  --large-samples 60 --max-tables 12 --large-max-tables 32 --passes 5 \
  --batch-sizes 512,1024,2048,4096,8192,16384 --warmups 1 --repeats 5 --device cpu
# the headline pool: drawn once (seed 20261202, the date it was drawn), never trained or tuned on
autoshard bench collect --out "$T.fresh.jsonl.gz" --samples 120 --large-samples 30 --passes 5 \
  --seed 20261202 --pool-seed 20261202 --no-singles --large-max-tables 64 $W

[ -f "$M/cost_model.pt" ] || autoshard cost train --network default --out "$M" \
  --traces "$T.jsonl.gz" --traces "$T.large.jsonl.gz" --traces "$T.small-rows.jsonl.gz" --traces "$T.one-hot-mixed.jsonl.gz"
[ -f "$M/communication.json" ] || autoshard bench comm --out "$M"
[ -f "$M/policy.pt" ] || autoshard policy train --profile "$M" --steps 100000
autoshard cost eval --model "$M" --traces "$T.jsonl.gz" --fresh-pool "$T.fresh.jsonl.gz"
