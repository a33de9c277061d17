#!/usr/bin/env bash
# Set up .venv on a machine with only Python 3.11 and pip. Idempotent.
# torch is pinned to 2.13.0 (CPU build); fbgemm-gpu-cpu and torchrec go in with --no-deps after
# it, because their metadata would pull the CUDA fbgemm-gpu, which clashes with the CPU one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q torch==2.13.0
pip install -q -e ".[dev]"
pip install -q --no-deps fbgemm-gpu-cpu==1.8.0 torchrec==1.8.0
pip install -q tensordict torchmetrics==1.0.3 tqdm pyre-extensions
python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
