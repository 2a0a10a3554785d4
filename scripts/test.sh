#!/usr/bin/env bash
# The whole test suite: lint, format check, unit, integration, notebook and browser tests, in the
# project's venv (scripts/venv.sh). Skips are listed at the end with their reasons (-rs, grouped).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
bash scripts/setup.sh --browser
ruff check .
ruff format --check .
python -m pytest -p no:cacheprovider -rs "$@"
