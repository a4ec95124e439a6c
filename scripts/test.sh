#!/usr/bin/env bash
# The test command: start the dedicated test cluster (port 5498, its own home),
# lint SQL and Python, run the pytest suite against the real server.
# Extra arguments go to pytest (e.g. scripts/test.sh -k lifecycle).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=/opt/pgkb/venv/bin
[ -x "$BIN/pgkb" ] || { echo "run scripts/install.sh first" >&2; exit 1; }
export PGKB_HOME="${PGKB_TEST_HOME:-/var/lib/pgkb-test}" PGKB_PORT="${PGKB_TEST_PORT:-5498}"
export PGKB_TEST_PORT="$PGKB_PORT"
unset PGKB_DSN
"$BIN/pgkb" up >/dev/null
echo "== ruff"
"$BIN/ruff" check .
"$BIN/ruff" format --check .
echo "== sqlfluff"
"$BIN/sqlfluff" lint sql migrations
echo "== pytest"
"$BIN/pytest" "$@"
