#!/usr/bin/env bash
# The main job: set up, train the guide CNN on the CPU, then run inference from what it saved.
# It ends by listing what it saved (model, config, metric logs, checkpoints, plots).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setup: .venv with every package of the workspace (scripts/setup.sh) =="
bash scripts/setup.sh
echo "== the guide: examples/guide/main.py $* =="
exec .venv/bin/python examples/guide/main.py "$@"
