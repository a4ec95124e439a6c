#!/usr/bin/env bash
# The test command: start the dedicated test cluster (port 5498, its own home),
# lint SQL and Python, run the pytest suite against the real server.
# Extra arguments go to pytest (e.g. scripts/test.sh -k lifecycle).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=/opt/pgkb/venv/bin
[ -x "$BIN/pgkb" ] || { echo "run scripts/install.sh first" >&2; exit 1; }
# The lab's browser tests (tests/test_lab_browser.py) drive Debian's chromium through Playwright, which
# never downloads a browser of its own, and draw Chinese with a CJK font (without one the screenshots show
# boxes). Only the tests need them, so they are installed here, not by install.sh.
BROWSER_PACKAGES="chromium fonts-wqy-microhei"
missing=""
for package in $BROWSER_PACKAGES; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing="$missing $package"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "== apt-get install$missing (for the lab's browser tests)" >&2
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "missing$missing and this is not root: the lab's browser tests will fail" >&2
  fi
fi
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
