#!/usr/bin/env bash
# The main job: set up .venv-demo with what the guide needs at run time and nothing else
# (examples/guide/requirements.txt: core, the CPU backend, autodiff, train, scikit-learn for
# the digits), train the guide CNN on the CPU, then run inference from what it saved.  It ends
# by listing what it saved (model, config, metric logs, checkpoints, plots).
#
# Set-up is incremental: a second run installs nothing unless the requirements file or a
# pyproject.toml it names changed (sources are installed editable).  EMBER_DEMO_VENV names
# another folder; PYTHON another Python (3.11+).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
PY=${PYTHON:-python3}
VENV=${EMBER_DEMO_VENV:-.venv-demo}
REQ=examples/guide/requirements.txt
SECONDS=0

say() { echo "demo: $*"; }

say "setup: $VENV, the guide's run-time dependencies only ($REQ)"
venv_ready demo "$VENV" "$PY"
# the requirements file and the pyproject.toml of each package it installs editable
mapfile -t projects < <(sed -n 's/^-e \([^[ ]*\).*/\1\/pyproject.toml/p' "$REQ")
stamp=$(venv_stamp "$VENV" "$REQ" "${projects[@]}")
if venv_current "$VENV" "$stamp"; then
  say "setup: $VENV is up to date with $REQ and ${#projects[@]} pyproject.toml files:" \
      "nothing to install (${SECONDS} s)"
else
  say "setup: installing $REQ into $VENV; pip says what it fetches and installs" \
      "(about 20-60 s the first time) ..."
  # --no-compile: Python compiles what the guide imports when it first runs; compiling every
  # module of scipy, scikit-learn and matplotlib up front costs ~10 s and ~130 MB
  pip_logged demo "$VENV" --no-compile -r "$REQ"
  "$VENV/bin/python" -c "import ember, ember_cpu, ember_autodiff, ember_train, sklearn"
  venv_mark "$VENV" "$stamp"
  say "setup: ready in ${SECONDS} s ($(du -sh "$VENV" | cut -f 1) in $VENV)"
fi
say "the guide: examples/guide/main.py $*"
exec "$VENV/bin/python" examples/guide/main.py "$@"
