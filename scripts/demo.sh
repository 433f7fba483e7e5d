#!/usr/bin/env bash
# The main job: set up, train the guide CNN on the CPU, then run inference from what it saved.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/guide/main.py "$@"
