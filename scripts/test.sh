#!/usr/bin/env bash
# The whole test suite: set up, then lint, typecheck, unit tests, conformance on every device,
# and the documented install (wheels, then core + one backend extra) in a fresh venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH" VIRTUAL_ENV="$PWD/.venv"
exec .venv/bin/nox --no-install -db none -s lint typecheck tests conformance conformance_compiled conformance_remote install "$@"
