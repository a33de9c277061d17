#!/usr/bin/env bash
# Plan-aware traces on this machine (docs/cost_model.md, "Plan-aware training"), about 17 minutes here: small anchors, a model, split (c) before, one refine round, split (c) after.
set -x
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
E=${E:-runs/plan_aware}
mkdir -p $E
date
autoshard bench collect --device cpu --out $E/anchors.jsonl.gz --samples 600 --max-tables 10 --large-samples 150 --large-max-tables 20 --passes 3 --pool-size 300
date
autoshard cost train --traces $E/anchors.jsonl.gz --out $E/model0
cp data/models/cpu-amd-epyc-fbgemm_tbe-t1/communication.json data/models/cpu-amd-epyc-fbgemm_tbe-t1/policy.pt $E/model0/
date
autoshard bench plans --traces $E/anchors.jsonl.gz --model $E/model0 --out $E/plans_test.jsonl.gz --split test --tasks 8 --passes 3
date
autoshard cost eval --model $E/model0 --traces $E/anchors.jsonl.gz --traces $E/plans_test.jsonl.gz --json > $E/eval_before.json
autoshard bench refine --traces $E/anchors.jsonl.gz --model $E/model0 --out $E/refine --rounds 1 --tasks 8 --passes 3
date
autoshard cost eval --model $E/refine/round1 --traces $E/anchors.jsonl.gz --traces $E/plans_test.jsonl.gz --json > $E/eval_after.json
date
echo EXPDONE
