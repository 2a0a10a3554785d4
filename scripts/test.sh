#!/usr/bin/env bash
# The whole test suite: lint, format check, unit, integration, notebook and browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
ruff check .
ruff format --check .
python -m pytest -p no:cacheprovider "$@"
