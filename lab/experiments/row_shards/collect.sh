#!/usr/bin/env bash
# Row-shard / replica device sets and ordinary control sets of the same pool on this host,
# interleaved pass by pass (a control pass follows each shard pass), 3 passes each.
set -euo pipefail
cd /work/main
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 MALLOC_TOP_PAD_=1073741824 OMP_NUM_THREADS=1
T=data/traces/cpu-intel-r-xeon-r-processor-f6m207-fbgemm_tbe-t1
W="--batch-sizes 512,1024,2048,4096,8192,16384 --precisions 4,2 --optimizers sgd,rowwise_adagrad --warmups 1 --repeats 5 --device cpu --threads 1 --pool-seed 0 --no-singles"
for p in 1 2 3; do
  echo "pass $p shards $(date +%T)"
  nice .venv/bin/autoshard bench collect --out $T.row-shards.jsonl.gz --samples 700 --large-samples 175 \
    --large-max-tables 32 --seed 51 --row-shards 0.45 --replicas 0.2 --passes $p $W
  echo "pass $p control $(date +%T)"
  nice .venv/bin/autoshard bench collect --out $T.row-shards-control.jsonl.gz --samples 200 --large-samples 50 \
    --large-max-tables 32 --seed 52 --passes $p $W
done
echo "done $(date +%T)"
