#!/usr/bin/env bash
# Static checks (CI runs them before the tests): the layering contracts, ruff lint and format,
# and mypy on the product packages. Needs the .venv that scripts/setup.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
lint-imports
ruff check .
ruff format --check .
mypy
