#!/usr/bin/env bash
# The whole test suite: set up, then lint, typecheck, unit tests and conformance on every device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH" VIRTUAL_ENV="$PWD/.venv"
exec .venv/bin/nox --no-install -db none -s lint typecheck tests conformance conformance_compiled "$@"
