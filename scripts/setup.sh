#!/usr/bin/env bash
# Set up .venv with every ember package (editable) and what the tests need.
# Safe to run again: Debian packages already present are not installed again, and pip runs only
# when requirements-dev.txt or a pyproject.toml changed since the last successful set-up (a
# stamp in .venv; sources are installed editable).  Says each step as it goes, and what it skips.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
PY=${PYTHON:-python3}
SECONDS=0

say() { echo "setup: $*"; }

# apt_install WHAT PACKAGE... : Debian packages, as root; a failure is reported, not fatal
apt_install() {
  local what=$1
  shift
  say "installing $what with apt-get ($*) ..."
  local start=$SECONDS
  if [ -z "${APT_UPDATED:-}" ]; then
    say "  updating apt's package lists ..."
    apt-get update -qq >/dev/null 2>&1 || true
    APT_UPDATED=1
  fi
  ticker_start setup "installing $what"
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
      >/dev/null 2>&1; then
    ticker_stop
    say "  done in $((SECONDS - start)) s"
  else
    ticker_stop
    return 1
  fi
}

if [ "$(id -u)" = "0" ] && [ "${EMBER_SKIP_APT:-0}" != "1" ]; then
  if ! ls /etc/OpenCL/vendors/pocl*.icd >/dev/null 2>&1; then
    # Debian's PoCL: the OpenCL platform the tests run on (see shared FACTS.md)
    apt_install "OpenCL on the CPU" pocl-opencl-icd \
      || echo "setup: could not install pocl-opencl-icd; OpenCL tests will be skipped" >&2
  else
    say "OpenCL on the CPU (pocl-opencl-icd): present"
  fi
  if ! ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 \
      || ! ls /usr/lib/*/libvulkan.so.1 >/dev/null 2>&1; then
    # Mesa's software Vulkan (lavapipe) and the Vulkan loader: the WebGPU adapter the wgpu
    # backend's tests run on (see shared FACTS.md)
    apt_install "Vulkan on the CPU" mesa-vulkan-drivers libvulkan1 \
      || echo "setup: could not install mesa-vulkan-drivers; WebGPU tests will be skipped" >&2
  else
    say "Vulkan on the CPU (mesa-vulkan-drivers, libvulkan1): present"
  fi
  if ! command -v mpirun >/dev/null 2>&1; then
    # Debian's Open MPI: the MPI engine's library and mpirun (mpi4py's wheel loads it at run time)
    apt_install "Open MPI" openmpi-bin libopenmpi-dev \
      || echo "setup: could not install openmpi-bin; MPI tests will be skipped" >&2
  else
    say "Open MPI (mpirun): present"
  fi
  if ! command -v gcc >/dev/null 2>&1 \
      || ! "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    # a C compiler and Python's headers: Triton builds its GPU launchers with them, and so does
    # ember's compiled launcher (ember_triton._claunch; its tests build it on the CPU)
    apt_install "a C compiler and Python's headers" gcc libc6-dev python3-dev \
      || echo "setup: could not install gcc/python3-dev; the compiled-launcher tests will be skipped" >&2
  else
    say "a C compiler and Python's headers: present"
  fi
else
  say "not root (or EMBER_SKIP_APT=1): no Debian packages installed"
fi

venv_ready setup .venv "$PY"
# every package of the workspace, editable, discovered by globbing (no list to keep in sync)
args=()
projects=()
for p in packages/*/ examples/third-party-backend/; do
  [ -f "$p/pyproject.toml" ] && args+=(-e "$p") && projects+=("$p/pyproject.toml")
done
# editable installs: only a change to a pyproject.toml or requirements-dev.txt needs pip again
stamp=$(venv_stamp .venv requirements-dev.txt "${projects[@]}")
if venv_current .venv "$stamp"; then
  say ".venv is up to date with requirements-dev.txt and ${#projects[@]} pyproject.toml files:" \
      "skipping pip (${SECONDS} s)"
  exit 0
fi
say "upgrading pip in .venv ..."
.venv/bin/python -m pip install -q --upgrade pip uv >/dev/null 2>&1 || true
say "installing $((${#args[@]} / 2)) workspace packages (editable) and requirements-dev.txt" \
    "into .venv; pip says what it fetches and builds (the first run takes a few minutes) ..."
pip_logged setup .venv "${args[@]}" -r requirements-dev.txt
.venv/bin/python -c "import ember"
venv_mark .venv "$stamp"
say "ready in ${SECONDS} s: .venv/bin/python has ember and every backend and decorator"
