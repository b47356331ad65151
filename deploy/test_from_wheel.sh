#!/usr/bin/env bash
# The test suite run against the installed distribution instead of the checkout (`make test-wheel`).
#
# It builds the wheel from the committed tree (HEAD), installs it with its extras into a new
# virtualenv, and runs pytest in a copy of the tree whose sluice/ directory (the symlinks that map
# the top-level folders onto the import name) is removed, so every `import sluice` resolves to the
# installed wheel: a module, data file or subpackage the wheel lacks fails the test that uses it.
# The container image, built from the sources, is built from an untouched copy (SLUICE_SOURCE_DIR).
# The services are the ones `make test` fetched (cached under ~/.cache/sluice).
#
#   make test-wheel                      # the whole suite
#   make test-wheel ARGS=tests/unit      # pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-wheel-suite.XXXXXX")
echo "sluice: wheel suite in $WORK"

mkdir -p "$WORK/src" "$WORK/dist"
git archive HEAD | tar -x -C "$WORK/src"
cp -a "$WORK/src" "$WORK/tree"
"$ROOT/.venv/bin/python" -m build --wheel --outdir "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log" >&2; exit 1; }
wheel=$(ls "$WORK"/dist/sluice-*.whl)

"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
"$WORK/venv/bin/python" -m pip install --quiet "${wheel}[dev,jdbc,s3,spark,otel]"
PATH="$HOME/.cargo/bin:$PATH" "$WORK/venv/bin/python" -m pip install --quiet "$WORK/src/native"

rm -rf "$WORK/tree/sluice"
# What builds from the sources (the container image) takes them from the untouched copy.
export SLUICE_SOURCE_DIR="$WORK/src"
cd "$WORK/tree"
# The checkout's venv path is what a few tests and scripts expect; it is the wheel's venv here.
ln -s "$WORK/venv" .venv
located=$("$WORK/venv/bin/python" -c 'import sluice, sys; sys.stdout.write(sluice.__file__)')
case "$located" in
  "$WORK/venv/"*) echo "sluice: importing $located" ;;
  *) echo "sluice: the suite would import $located, not the wheel" >&2; exit 1 ;;
esac
# shellcheck disable=SC2086
exec "$WORK/venv/bin/python" -m pytest ${ARGS:-}
