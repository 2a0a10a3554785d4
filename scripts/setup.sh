#!/usr/bin/env bash
# Install everything the quick start and the test suite need (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python -c "import trainjob_magics, aiohttp, nbclient, playwright, jsonschema, cel_expr_python" 2>/dev/null \
   || [ "${TRAINJOB_MAGICS_REINSTALL:-}" = 1 ]; then
  python -m pip install --quiet --disable-pip-version-check -e '.[test]'
fi
# The test suite (--browser, as scripts/test.sh passes it) also needs Chromium and the real Open MPI
# (Debian's openmpi-bin: the local cluster's pods run its mpirun; without it, an imitation).
if [ "${1:-}" = "--browser" ]; then
  missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v orterun >/dev/null 2>&1 || missing+=(openmpi-bin)
  if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
