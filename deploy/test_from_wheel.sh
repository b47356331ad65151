#!/usr/bin/env bash
# The test suite run against the installed distribution instead of the checkout (`make test-wheel`).
#
# It builds the wheel from the committed tree (HEAD), installs it with its extras into a new
# virtualenv, and runs pytest in that tree, left whole (sluice/'s links included): the import path,
# not the tree, decides where `import sluice` comes from. The virtualenv's site-packages comes
# first; the tree is appended after it (a .pth file), for `tests` and `benchmarks`; PYTHONSAFEPATH
# keeps every Python the suite starts from putting its working directory or script directory in
# front, and pytest's --import-mode=append keeps pytest from putting the tree there. So a module,
# data file or subpackage the wheel lacks fails the test that uses it. The test-service launchers
# (tests/services/) come from the tree, as the wheel does not ship them. The container image is
# built from the same tree (SLUICE_SOURCE_DIR). The services are the ones `make test` fetched
# (cached under ~/.cache/sluice).
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
"$ROOT/.venv/bin/python" -m build --wheel --outdir "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log" >&2; exit 1; }
wheel=$(ls "$WORK"/dist/sluice-*.whl)

"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
"$WORK/venv/bin/python" -m pip install --quiet "${wheel}[dev,jdbc,s3,spark,otel,mysql]"
PATH="$HOME/.cargo/bin:$PATH" "$WORK/venv/bin/python" -m pip install --quiet "$WORK/src/native"

site=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$WORK/src" >"$site/sluice-suite-tree.pth"
export PYTHONSAFEPATH=1
export SLUICE_SOURCE_DIR="$WORK/src"
cd "$WORK/src"
# The checkout's venv path is what a few tests and scripts expect; it is the wheel's venv here.
ln -s "$WORK/venv" .venv
where() { "$WORK/venv/bin/python" -c "import sys, $1; sys.stdout.write($1.__file__)"; }
case "$(where sluice)" in
  "$site/"*) echo "sluice: importing $(where sluice)" ;;
  *) echo "sluice: the suite would import $(where sluice), not the wheel" >&2; exit 1 ;;
esac
case "$(where tests)" in
  "$WORK/src/"*) ;;
  *) echo "sluice: the suite would import $(where tests), not the tree's tests/" >&2; exit 1 ;;
esac
# shellcheck disable=SC2086
exec "$WORK/venv/bin/python" -m pytest --import-mode=append ${ARGS:-}
