# Shared by scripts/setup.sh (.venv, for the tests) and scripts/demo.sh (.venv-demo, the main
# job): a virtual environment that is set up once and then only checked.  Sourced, not run.
#
#   venv_ready TAG VENV PYTHON  creates VENV with PYTHON unless it holds a working python
#   venv_stamp VENV FILE...     a hash of VENV's Python version and the FILEs' contents
#   venv_current VENV STAMP     true when VENV was last set up for STAMP (nothing changed)
#   venv_mark VENV STAMP        records STAMP once an install has succeeded
#   pip_logged TAG VENV ARG...  pip install ARG... into VENV, printing what it fetches, builds
#                               and installs as it happens; on failure its last lines
#   ticker_start TAG WHAT       a line every 20 s saying WHAT is still going (a quiet step,
#   ticker_stop                 such as unpacking a large wheel, never looks hung); stop it
# Editable installs (-e) mean a change to a package's sources needs no new install: only a
# change to a pyproject.toml or a requirements file does, and the stamp covers those.

venv_ready() {
  local tag=$1 venv=$2 py=$3
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "" 2>/dev/null; then
    echo "$tag: $venv: present ($("$venv/bin/python" --version 2>&1))"
    return 0
  fi
  echo "$tag: creating $venv with $("$py" --version 2>&1) ..."
  rm -rf "$venv"
  "$py" -m venv "$venv"
}

venv_stamp() {
  local venv=$1
  shift
  { "$venv/bin/python" --version 2>&1; cat "$@"; } | sha256sum | cut -d ' ' -f 1
}

venv_current() {
  [ -f "$1/.ember-stamp" ] && [ "$(cat "$1/.ember-stamp")" = "$2" ]
}

venv_mark() {
  echo "$2" >"$1/.ember-stamp"
}

TICKER=
ticker_start() {
  local tag=$1 what=$2 start=$SECONDS
  ( while sleep 20 </dev/null >/dev/null 2>&1; do echo "$tag:   ... still $what ($((SECONDS - start)) s)"; done ) &
  TICKER=$!
}

ticker_stop() {
  if [ -n "$TICKER" ]; then
    kill "$TICKER" 2>/dev/null || true
    wait "$TICKER" 2>/dev/null || true
    TICKER=
  fi
}

pip_logged() {
  local tag=$1 venv=$2
  shift 2
  local log status
  log=$(mktemp)
  # pip's full output goes to a log; what it fetches, builds and installs is shown as it happens
  set +e
  ticker_start "$tag" "installing with pip"
  "$venv/bin/python" -m pip install --progress-bar off "$@" 2>&1 \
    | tee "$log" \
    | grep --line-buffered -E "^(Collecting|Processing|Obtaining|Downloading|Building|Installing|Successfully|ERROR)" \
    | sed -u "s/^/$tag:   /"
  status=${PIPESTATUS[0]}
  ticker_stop
  set -e
  if [ "$status" != "0" ]; then
    echo "$tag: pip failed (exit $status); its last lines:" >&2
    grep -v -e "^WARNING: Location" -e "is ignored: it is neither" "$log" | tail -n 30 >&2
  fi
  rm -f "$log"
  return "$status"
}
