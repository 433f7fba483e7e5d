#!/usr/bin/env bash
# Set up .venv with every ember package (editable) and what the tests need.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ "$(id -u)" = "0" ] && [ "${EMBER_SKIP_APT:-0}" != "1" ] && ! ls /etc/OpenCL/vendors/pocl*.icd >/dev/null 2>&1; then
  # Debian's PoCL: the OpenCL platform the tests run on (see shared FACTS.md)
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pocl-opencl-icd) >/dev/null 2>&1 \
    || echo "setup: could not install pocl-opencl-icd; OpenCL tests will be skipped" >&2
fi

if [ "$(id -u)" = "0" ] && [ "${EMBER_SKIP_APT:-0}" != "1" ] && ! command -v mpirun >/dev/null 2>&1; then
  # Debian's Open MPI: the MPI engine's library and mpirun (mpi4py's wheel loads it at run time)
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev) >/dev/null 2>&1 \
    || echo "setup: could not install openmpi-bin; MPI tests will be skipped" >&2
fi

if [ "$(id -u)" = "0" ] && [ "${EMBER_SKIP_APT:-0}" != "1" ] && { ! command -v gcc >/dev/null 2>&1 \
    || ! "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }; then
  # a C compiler and Python's headers: Triton builds its GPU launchers with them, and so does
  # ember's compiled launcher (ember_triton._claunch; its tests build it on the CPU)
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev python3-dev) >/dev/null 2>&1 \
    || echo "setup: could not install gcc/python3-dev; the compiled-launcher tests will be skipped" >&2
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip uv >/dev/null 2>&1 || true

# every package of the workspace, editable, discovered by globbing (no list to keep in sync)
args=()
for p in packages/core packages/*/ examples/third-party-backend/; do
  [ -f "$p/pyproject.toml" ] && args+=(-e "$p")
done
.venv/bin/python -m pip install -q "${args[@]}" -r requirements-dev.txt 2>&1 \
  | grep -v -e "^WARNING: Location" -e "is ignored: it is neither" || true
.venv/bin/python -c "import ember" 
