#!/usr/bin/env bash
# Collect a device profile for this machine and train its models: the traces, the cost model,
# the all-to-all model and the RL policy, in data/traces/<id>.* and data/models/<id>/, where <id>
# is this machine's profile id (e.g. cpu-amd-epyc-f26m2-fbgemm_tbe-t1: the CPU's name, family and model).
#
#   scripts/profile_machine.sh            # about an hour on one core of a 2-core CPU machine
#
# Run it with the machine otherwise idle: every stage but the training measures. Each collection
# resumes where it stopped (run the script again after a kill); a stage whose output is complete
# is skipped. The stages (docs/profiles.md, "Make a profile from scratch"): random sets (training,
# validation, splits (a) and (b)), large sets, small-row tables, Criteo-like one-hot sets, a fresh
# pool drawn once for the headline (never trained or tuned on); then a first cost model (the shipped
# network, chosen on validation: docs/decisions.md, 8), whose planners' plans make the plan sets
# (training-pool tasks to train on, test-pool tasks for split (c)); then the profile's cost model,
# trained on the plan sets too, the all-to-all and the policy.
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
# homogeneous sets: every table fp32 + SGD, so a set is one TBE op, as in Criteo's workloads (docs/profiles.md:
# without them, this machine's first model priced Criteo Kaggle's devices 12-40% high, giant tables most)
autoshard bench collect --out "$T.one-hot.jsonl.gz" --precisions 4 --optimizers sgd --pool-size 150 --pool-seed 15 \
  --seed 15 --min-log10-rows 0 --dims 8,16,32 --one-hot-share 1 --samples 250 --large-samples 60 --max-tables 12 \
  --large-max-tables 32 --passes 5 --batch-sizes 512,1024,2048,4096,8192,16384 --warmups 1 --repeats 5 --device cpu
autoshard bench collect --out "$T.fp32-sgd.jsonl.gz" --precisions 4 --optimizers sgd --pool-seed 11 --seed 11 \
  --no-singles --passes 3 --samples 150 --large-samples 50 --large-max-tables 64 \
  --batch-sizes 512,1024,2048,4096,8192,16384 --warmups 1 --repeats 5 --device cpu
# the headline pool: drawn once (seed 20261202, the date it was drawn), never trained or tuned on
autoshard bench collect --out "$T.fresh.jsonl.gz" --samples 120 --large-samples 30 --passes 5 \
  --seed 20261202 --pool-seed 20261202 --no-singles --large-max-tables 64 $W

# every other file on the random sets' scale: a host's speed moves by 10-15% within the hour, and files
# measured at different moments would teach the model that their kinds of tables differ by as much
# (docs/profiles.md); the anchor model knows the random sets only
A=runs/profile-$ID/anchor  # not shipped
[ -f "$A/cost_model.pt" ] || autoshard cost train --network default --out "$A" --traces "$T.jsonl.gz" --traces "$T.large.jsonl.gz"
for f in small-rows one-hot-mixed one-hot fp32-sgd; do autoshard bench calibrate --traces "$T.$f.jsonl.gz" --model "$A"; done

RANDOM_SETS="--traces $T.jsonl.gz --traces $T.large.jsonl.gz --traces $T.small-rows.jsonl.gz --traces $T.one-hot-mixed.jsonl.gz
  --traces $T.one-hot.jsonl.gz --traces $T.fp32-sgd.jsonl.gz"
M0=runs/profile-$ID/model0  # plans the plan sets; not shipped
[ -f "$M0/cost_model.pt" ] || autoshard cost train --network default --out "$M0" $RANDOM_SETS
# the device sets that plans create (docs/decisions.md, 9): every planner the first model can run
autoshard bench plans --traces "$T.jsonl.gz" --model "$M0" --out "$T.plans.jsonl.gz" --split train --tasks 12 \
  --passes 3 --seed 31 --devices 4,8,16 --batch-sizes 512,1024,2048,4096,8192,16384
autoshard bench plans --traces "$T.one-hot-mixed.jsonl.gz" --model "$M0" --out "$T.plans-one-hot-mixed.jsonl.gz" \
  --split train --tasks 8 --passes 3 --seed 62 --devices 4,8,16 --batch-sizes 2048,4096,8192,16384
autoshard bench plans --traces "$T.one-hot.jsonl.gz" --model "$M0" --out "$T.plans-one-hot.jsonl.gz" \
  --split train --tasks 8 --passes 3 --seed 61 --devices 4,8,16 --batch-sizes 2048,4096,8192,16384
autoshard bench plans --traces "$T.jsonl.gz" --model "$M0" --out "$T.plans-test.jsonl.gz" --split test --tasks 6 \
  --passes 5 --seed 0 --devices 4,8,16,32,64 --batch-sizes 512,1024,2048,4096,8192,16384
for f in plans plans-one-hot-mixed plans-one-hot plans-test; do autoshard bench calibrate --traces "$T.$f.jsonl.gz" --model "$A"; done

[ -f "$M/cost_model.pt" ] || autoshard cost train --network default --out "$M" $RANDOM_SETS \
  --traces "$T.plans.jsonl.gz" --traces "$T.plans-one-hot-mixed.jsonl.gz" --traces "$T.plans-one-hot.jsonl.gz"
[ -f "$M/communication.json" ] || autoshard bench comm --out "$M"
[ -f "$M/policy.pt" ] || autoshard policy train --profile "$M" --steps 100000
autoshard cost eval --model "$M" --traces "$T.jsonl.gz" --traces "$T.plans-test.jsonl.gz" --fresh-pool "$T.fresh.jsonl.gz"
