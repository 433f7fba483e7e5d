#!/usr/bin/env bash
# The whole test suite: set up, then lint, typecheck, unit tests, conformance on every device,
# and the documented install (wheels, then core + one backend extra) in a fresh venv.
#
# Two nox runs share the machine's two cores, their lines prefixed [a] and [b]: [b] runs the
# opencl:0 and triton-interpret stacks' sessions, [a] the rest (noxfile.py: EMBER_NOX_HALF,
# SLOW_STACKS); each skips the other's sessions.  The run fails if either fails.  With
# arguments (`bash scripts/test.sh -s tests -- -x`), one nox run takes them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH" VIRTUAL_ENV="$PWD/.venv"
NOX=(.venv/bin/nox --no-install -db none)
if [ $# -gt 0 ]; then
    exec "${NOX[@]}" "$@"
fi
SESSIONS=(-s lint typecheck tests conformance conformance_compiled conformance_remote install)
half() {
    (set -o pipefail; EMBER_NOX_HALF=$1 "${NOX[@]}" "${SESSIONS[@]}" 2>&1 | sed -u "s/^/[$1] /")
}
half a &
a=$!
half b &
b=$!
status=0
wait "$a" || { status=1; echo "[a] FAILED"; }
wait "$b" || { status=1; echo "[b] FAILED"; }
if [ "$status" = 0 ]; then echo "scripts/test.sh: both halves passed"; fi
exit "$status"
