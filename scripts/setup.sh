#!/usr/bin/env bash
# Install everything the quick start and the test suite need (idempotent), into the active venv
# or the project's .venv (scripts/venv.sh), never into the system's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
# Installed (not merely importable from the repository root: -I leaves the working directory
# off sys.path) and editable from this checkout?
# The build (hatch-jupyter-builder) also builds the lab extension from packages/labextension with
# jlpm (from jupyterlab) and Node.js: Debian's nodejs where node is missing.
if ! command -v node >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
fi
# JupyterLab 4.6's extension builder (Rspack) needs Node.js ^20.19 or >=22.12 (Debian 12's is 18)
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
              process.exit(a > 22 || (a === 22 && b >= 12) || (a === 20 && b >= 19) ? 0 : 1)'; then
  echo "scripts/setup.sh: Node.js $(node --version) is too old to build the lab extension" \
    "(JupyterLab 4.6's builder needs ^20.19 or >=22.12): install a newer Node.js first" >&2
  exit 1
fi
labext="$(python -c "import sys; print(sys.prefix)")/share/jupyter/labextensions/trainjob-magics-labextension/package.json"
if ! python -I - <<'PY' 2>/dev/null || [ "${TRAINJOB_MAGICS_REINSTALL:-}" = 1 ] \
   || [ ! -f "$labext" ]; then
import importlib.metadata, json, pathlib, sys
import aiohttp, cel_expr_python, jsonschema, mypy, nbclient, playwright  # noqa: F401
url = json.loads(importlib.metadata.distribution("trainjob-magics").read_text("direct_url.json"))
sys.exit(url.get("url") != pathlib.Path.cwd().resolve().as_uri())
PY
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
# The real stack's node (docs/real-cluster.md): Debian's runc, CNI plugins, mmdebstrap (its
# images), socat (its API server relay) and iptables (kube-proxy), when test.sh will start it.
if [ "${1:-}" = "--browser" ] && [ "${TRAINJOB_MAGICS_REALSTACK:-1}" != 0 ] \
   && { command -v go >/dev/null 2>&1 || [ "${TRAINJOB_MAGICS_REQUIRE_REALSTACK:-}" = 1 ]; }; then
  missing=()
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  command -v socat >/dev/null 2>&1 || missing+=(socat)
  command -v iptables >/dev/null 2>&1 || missing+=(iptables)
  command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
  # the real stack's JupyterHub: configurable-http-proxy comes from npm
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
