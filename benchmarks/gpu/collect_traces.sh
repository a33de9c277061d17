#!/usr/bin/env bash
# Collect a GPU profile's traces on a CUDA machine whose Python lacks some of the project's
# packages (wheels in .whl/ are installed to /tmp/site first, if there are any: docs/profiles.md,
# "A GPU profile"):
#   OUT=runs/gpu bash benchmarks/gpu/collect_traces.sh
# Writes $OUT/cuda.jsonl (random sets and every pool table alone), $OUT/cuda.large.jsonl (sets of
# 65-160 tables), $OUT/cuda.fresh.jsonl (a pool drawn once, seed 20261204, never trained on),
# $OUT/env.txt and a log per collection. Each collection is capped at its SECONDS_* and resumes
# where it stopped when run again. MODE=embedding_bag by default (one torch EmbeddingBag per
# table, sparse SGD): FBGEMM's CUDA build must match the machine's torch and CUDA; where it
# does, MODE=fbgemm_tbe measures TorchRec's kernels instead. SMOKE_ONLY=1 stops after the smoke
# run; DEVICE=cpu runs it on the CPU, and SMOKE_ARGS / BATCH_SIZES shrink it (the test suite's check
# of this script).
set -u
OUT=${OUT:?set OUT to a folder}
MODE=${MODE:-embedding_bag}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=120
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import sys, torch; print(sys.version, torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  nproc; grep -m1 "model name" /proc/cpuinfo
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
W="--device $DEVICE --mode $MODE --batch-sizes ${BATCH_SIZES:-512,1024,2048,4096,8192,16384} --warmups 2 --repeats 10"
collect() {  # seconds, name, options...
  local seconds=$1 name=$2; shift 2
  timeout "$seconds" python3 -m autoshard bench collect --out "$OUT/$name.jsonl" "$@" $W > "$OUT/$name.log" 2>&1
  echo "$name: exit $? (cap ${seconds} s), $(grep -c '"type": *"sample"' "$OUT/$name.jsonl") sample lines"
}
# a smoke run first: a broken path shows its error at once
collect 120 smoke ${SMOKE_ARGS:---samples 3 --pool-size 10 --passes 1}
tail -3 "$OUT/smoke.log"
[ "${SMOKE_ONLY:-0}" = 1 ] && exit 0
collect "${SECONDS_MAIN:-330}" cuda --samples 1000 --large-samples 200 --large-max-tables 64 --passes 3 \
  --pool-size 300 --pool-seed 0 --seed 0
collect "${SECONDS_FRESH:-110}" cuda.fresh --samples 300 --large-samples 60 --large-max-tables 64 --passes 3 \
  --pool-size 300 --pool-seed 20261204 --seed 20261204 --no-singles
collect "${SECONDS_LARGE:-130}" cuda.large --samples 0 --max-tables 64 --large-samples 120 --large-max-tables 160 \
  --passes 3 --pool-size 300 --pool-seed 0 --seed 1 --no-singles
