#!/usr/bin/env bash
# As collect.sh, on a quiet host (no other jobs), fewer sets and 5 passes: labels that move less
# pass to pass. Then `cost adapt` the default on them and score it (accuracy.py).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 MALLOC_TOP_PAD_=1073741824 OMP_NUM_THREADS=1
T=data/traces/cpu-intel-r-xeon-r-processor-f6m207-fbgemm_tbe-t1
W="--batch-sizes 512,1024,2048,4096,8192,16384 --precisions 4,2 --optimizers sgd,rowwise_adagrad --warmups 1 --repeats 5 --device cpu --threads 1 --pool-seed 0 --no-singles"
for p in 1 2 3 4 5; do
  echo "pass $p shards $(date +%T)"
  .venv/bin/autoshard bench collect --out $T.row-shards-quiet.jsonl.gz --samples 320 --large-samples 80 \
    --large-max-tables 32 --seed 61 --row-shards 0.45 --replicas 0.2 --passes $p $W
  echo "pass $p control $(date +%T)"
  .venv/bin/autoshard bench collect --out $T.row-shards-quiet-control.jsonl.gz --samples 120 --large-samples 30 \
    --large-max-tables 32 --seed 62 --passes $p $W
done
mkdir -p runs/row-shards-quiet
.venv/bin/autoshard cost adapt --model data/models/default --traces $T.row-shards-quiet-control.jsonl.gz \
  --out runs/row-shards-quiet/adapt-control
.venv/bin/autoshard cost adapt --model data/models/default --traces $T.row-shards-quiet-control.jsonl.gz \
  --traces $T.row-shards-quiet.jsonl.gz --out runs/row-shards-quiet/adapt-shards
ROW_SHARDS_TAG=row-shards-quiet .venv/bin/python lab/experiments/row_shards/accuracy.py --json runs/row-shards-quiet/accuracy.json
echo "done $(date +%T)"
