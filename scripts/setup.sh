#!/usr/bin/env bash
# Install everything the quick start and the test suite need (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python -c "import trainjob_magics, aiohttp, nbclient, playwright, jsonschema, cel_expr_python" 2>/dev/null \
   || [ "${TRAINJOB_MAGICS_REINSTALL:-}" = 1 ]; then
  python -m pip install --quiet --disable-pip-version-check -e '.[test]'
fi
if [ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
