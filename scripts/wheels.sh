#!/usr/bin/env bash
# Build a wheel of every package of the workspace into dist/ (or the folder given), so that
#   pip install --find-links dist "ember[cpu]"      (or opencl, wgpu, cuda13, ...; each brings autodiff)
# installs core and its extras from a clone, with their own dependencies from the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
mkdir -p "$out"

# any Python with pip builds them; the workspace's .venv when there is one, else a throwaway venv
py=${PYTHON:-}
if [ -z "$py" ] && [ -x .venv/bin/python ]; then
  py=.venv/bin/python
elif [ -z "$py" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "wheels: creating a build environment in $tmp"
  python3 -m venv "$tmp/venv"
  py=$tmp/venv/bin/python
fi

pkgs=(packages/*/)
i=0
for p in "${pkgs[@]}"; do
  i=$((i + 1))
  p=${p%/}
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$p/pyproject.toml" | head -n 1)
  echo "wheels: [$i/${#pkgs[@]}] $name ($p)"
  rm -f "$out/$(echo "$name" | tr - _)-"*.whl  # never mistake last build's wheel for this one
  "$py" -m pip wheel -q --no-deps --wheel-dir "$out" "$p" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "is ignored: it is neither" || true
  # pip's status is lost in the pipe above: a missing wheel is the failure to report
  ls "$out/$(echo "$name" | tr - _)-"*.whl >/dev/null 2>&1 \
    || { echo "wheels: building $name from $p failed" >&2; exit 1; }
done
echo "wheels: ${#pkgs[@]} wheels in $out/; install with: pip install --find-links $out \"ember[cpu]\" (or opencl, wgpu, cuda13, ...)"
