#!/usr/bin/env bash
# Set up .venv with every ember package (editable) and what the tests need.
# Safe to run again: it only installs what is missing.  Says each step as it goes.
set -euo pipefail
cd "$(dirname "$0")/.."
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
    apt-get update -qq >/dev/null 2>&1 || true
    APT_UPDATED=1
  fi
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
      >/dev/null 2>&1; then
    say "  done in $((SECONDS - start)) s"
  else
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

if [ -x .venv/bin/python ]; then
  say ".venv: present"
else
  say "creating .venv with $("$PY" --version 2>&1) ..."
  "$PY" -m venv .venv
fi
say "upgrading pip in .venv ..."
.venv/bin/python -m pip install -q --upgrade pip uv >/dev/null 2>&1 || true

# every package of the workspace, editable, discovered by globbing (no list to keep in sync)
args=()
for p in packages/*/ examples/third-party-backend/; do
  [ -f "$p/pyproject.toml" ] && args+=(-e "$p")
done
say "installing $((${#args[@]} / 2)) workspace packages (editable) and requirements-dev.txt" \
    "into .venv; pip says what it fetches and builds (the first run takes a few minutes) ..."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# pip's full output goes to a log; what it fetches, builds and installs is shown as it happens
set +e
.venv/bin/python -m pip install --progress-bar off "${args[@]}" -r requirements-dev.txt 2>&1 \
  | tee "$log" \
  | grep --line-buffered -E "^(Collecting|Processing|Downloading|Building|Installing|Successfully|ERROR)" \
  | sed -u 's/^/setup:   /'
status=${PIPESTATUS[0]}
set -e
if [ "$status" != "0" ]; then
  echo "setup: pip failed (exit $status); its last lines:" >&2
  grep -v -e "^WARNING: Location" -e "is ignored: it is neither" "$log" | tail -n 30 >&2
  exit "$status"
fi
.venv/bin/python -c "import ember"
say "ready in ${SECONDS} s: .venv/bin/python has ember and every backend and decorator"
