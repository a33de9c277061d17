#!/usr/bin/env bash
# Set up, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The container test needs a container tool. Where this workplace's podman-env.sh exists (no
# Docker engine runs there), source it: it installs rootful podman and a local python:3.11-slim,
# and exports CONTAINERS_CONF and PODMAN_BUILD_ARGS. Elsewhere the test uses docker or podman
# as they are, and skips without either (fails under CI=true).
for candidate in ../shared/tools/podman-env.sh /work/shared/tools/podman-env.sh; do
  if [ -f "$candidate" ]; then
    # shellcheck source=/dev/null
    source "$candidate"
    break
  fi
done
. .venv/bin/activate
python -m pytest -W ignore::DeprecationWarning "$@"  # -q comes from pyproject: one -q keeps the "N passed" line
