#!/usr/bin/env bash
# The WebGPU backend on a GPU machine, in one command (about 3-6 minutes on an H100/H200):
# the side-by-side benchmark against PyTorch (benchmarks/gpu/wgpu_bench.py), then
# the WebGPU backend's own tests, ember's conformance suite on the four wgpu:0 stacks and
# through ember.compile on autodiff<wgpu:0>, with the counts of each.
#
#     bash benchmarks/gpu/wgpu_check.sh [--quick] [--jobs 8] [--out DIR]
#
# --quick passes --quick to the benchmark (small sizes); --jobs sets pytest-xdist's workers
# (used where pytest-xdist is installed); the logs and the benchmark's JSON go to --out
# (default: a new temporary folder).  Needs what check.py needs, plus the `wgpu` package
# and a Vulkan loader that finds the GPU; nothing is installed.  Exit status: 0 when every
# stack has 0 failures and the benchmark's results are right.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
JOBS=8
QUICK=""
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK="--quick" ;;
        --jobs) JOBS="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$OUT" ] || OUT="$(mktemp -d -t ember-wgpu-check.XXXXXX)"
mkdir -p "$OUT"
cd "$ROOT"
ENV=("$PY" benchmarks/gpu/with_env.py)

# the adapter first: a machine whose Vulkan loader finds no GPU stops here with the reason
"${ENV[@]}" "$PY" -c "
import ember
row = next((d for d in ember.devices() if d.name == 'wgpu:0'), None)
if row is None or not row.available:
    raise SystemExit(f'wgpu:0 unavailable: {row.reason if row else \"plugin not registered\"}')
print('wgpu:0 =', row.description)
" || exit 1

XDIST=()
if "$PY" -c "import xdist" 2>/dev/null; then XDIST=(-n "$JOBS"); fi

# the last: the suite through ember.compile (each case traced, then replayed from recorded
# dispatches on fresh inputs, ember_wgpu.replay)
STACKS=("wgpu:0" "autodiff<wgpu:0>" "fusion<wgpu:0>" "autodiff<fusion<wgpu:0>>"
        "compiled:autodiff<wgpu:0>")
STATUS=0
SUMMARY=()

# the benchmark first, so that a run cut short by a time limit still reports it
start=$SECONDS
"${ENV[@]}" "$PY" benchmarks/gpu/wgpu_bench.py $QUICK --json "$OUT/wgpu_bench.json" \
    2>&1 | tee "$OUT/wgpu_bench.log" | grep -v '^RESULT '
[ "${PIPESTATUS[0]}" -eq 0 ] || STATUS=1
echo "benchmark: $((SECONDS - start)) s"

# then the backend's own tests: they hold what the suite's small inputs never reach (the
# work-group and subgroup trees of fused reductions, the two-pass split, each matmul kernel)
log="$OUT/backend-wgpu-tests.log"
start=$SECONDS
"${ENV[@]}" "$PY" -m pytest packages/backend-wgpu/tests -q -p no:cacheprovider \
    -p no:benchmark --tb=short >"$log" 2>&1
rc=$?
counts="$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
SUMMARY+=("| packages/backend-wgpu/tests | ${counts:-no summary: see $log} | $((SECONDS - start)) s | rc $rc |")
echo "backend-wgpu tests: ${counts:-?} ($((SECONDS - start)) s)"
if [ $rc -ne 0 ]; then STATUS=1; grep -E '^(FAILED|ERROR)' "$log" | head -20; fi
for stack in "${STACKS[@]}"; do
    log="$OUT/conformance-$(echo "$stack" | tr -c 'a-z0-9\n' '_').log"
    start=$SECONDS
    device="${stack#compiled:}"
    MODE=()
    [ "$device" != "$stack" ] && MODE=(--ember-compile)
    # as check.py runs the suite (the cases ship in ember.testing)
    "${ENV[@]}" "$PY" -m pytest --pyargs ember.testing.suite "--ember-device=$device" -q \
        -p no:cacheprovider -p no:benchmark --assert=plain --tb=line "${XDIST[@]}" \
        "${MODE[@]}" >"$log" 2>&1
    rc=$?
    # pytest's own last line ("N passed, M skipped ..."), and ember's count of skip reasons
    counts="$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^[0-9]+ (passed|failed|error)' "$log" \
        | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
    ember_line="$(grep -E '^ember conformance on' "$log" | tail -1)"
    SUMMARY+=("| $stack | ${counts:-no summary: see $log} | $((SECONDS - start)) s | rc $rc |")
    [ -n "$ember_line" ] && SUMMARY+=("|   | $ember_line | | |")
    if [ $rc -ne 0 ]; then
        STATUS=1
        grep -E '^(FAILED|ERROR)' "$log" | head -20
    fi
    echo "conformance $stack: ${counts:-?} ($((SECONDS - start)) s)"
done

echo
echo "| run | pytest | time | status |"
echo "|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
echo "logs and wgpu_bench.json: $OUT"
exit $STATUS
