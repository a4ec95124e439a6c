#!/usr/bin/env bash
# Install everything pgkb needs on Debian 12 (PostgreSQL 15, pgvector built from
# Debian's source package) or Debian 13 (PostgreSQL 17 packages). Idempotent:
# a re-run checks each step and changes nothing that is already in place.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PGKB_OPT="${PGKB_OPT:-/opt/pgkb}"
HARNESS_VENV="$PGKB_OPT/venv"
SERVER_VENV="$PGKB_OPT/server-venv"
log() { printf '[install] %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { echo "install.sh must run as root" >&2; exit 1; }

debian_major="$(cut -d. -f1 /etc/debian_version)"
case "$debian_major" in
  12) PGV=15 ;;
  13) PGV=17 ;;
  *) echo "unsupported Debian version $(cat /etc/debian_version); need 12 or 13" >&2; exit 1 ;;
esac
PG_CONFIG="/usr/lib/postgresql/$PGV/bin/pg_config"

# postgresql-$PGV-plproxy: PL/Proxy, which only a shard coordinator uses (pgkb shards init)
# tesseract-ocr(-chi-sim, -eng): OCR of scanned PDF pages (pytesseract in the server venv; docs/INGEST.md)
packages=(postgresql-$PGV postgresql-plpython3-$PGV postgresql-server-dev-$PGV postgresql-$PGV-plproxy
          postgresql-contrib python3-venv python3-dev build-essential dpkg-dev pgxnclient
          tesseract-ocr tesseract-ocr-chi-sim tesseract-ocr-eng)
# Debian 13: pgvector is a package; contrib (pg_trgm) is inside postgresql-17, and
# postgresql-contrib is only a virtual package there, which dpkg-query never reports
# installed (every re-run would call apt-get), so it is not asked for.
[ "$PGV" = 17 ] && packages=("${packages[@]/#postgresql-contrib/postgresql-17-pgvector}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# pgvector on Debian 12: no binary package, so build Debian's trixie source
# package with pgxnclient. A private apt configuration reads the mirror and key
# from the system's own debian.sources, leaving the system's apt config alone.
if [ ! -f "/usr/share/postgresql/$PGV/extension/vector.control" ]; then
  src_conf=/etc/apt/sources.list.d/debian.sources
  uri="$(awk '/^URIs:/ {print $2; exit}' "$src_conf")"
  signed_by="$(awk '/^Signed-By:/ {print $2; exit}' "$src_conf")"
  work="$(mktemp -d)"
  chmod 755 "$work"   # apt's _apt user downloads into it
  mkdir -p "$work/lists/partial" "$work/parts"
  printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    "$uri" "$signed_by" > "$work/parts/pgvector-src.sources"
  apt_opts=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$work/parts"
            -o "Dir::State::lists=$work/lists" -o "Dir::Cache::archives=$work")
  log "fetching pgvector source (Debian trixie source package)"
  apt-get "${apt_opts[@]}" update -qq
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq pgvector >/dev/null)
  (cd "$work" && dpkg-source -x --skip-debianization pgvector_*.dsc pgvector-src >/dev/null 2>&1)
  # OPTFLAGS="" gives a portable build instead of -march=native; the make
  # wrapper is how pgxn passes it through.
  printf '#!/bin/sh\nexec make OPTFLAGS="" "$@"\n' > "$work/make-portable"
  chmod +x "$work/make-portable"
  log "building pgvector with pgxn"
  (cd "$work" && pgxn install --make "$work/make-portable" --pg_config "$PG_CONFIG" ./pgvector-src >/dev/null)
  rm -rf "$work"
fi

mkdir -p "$PGKB_OPT"
chmod 755 "$PGKB_OPT"

# Server-side venv: the Python PL/Python embeds is Debian's /usr/bin/python3.
if [ ! -x "$SERVER_VENV/bin/python" ]; then
  log "creating server venv $SERVER_VENV"
  /usr/bin/python3 -m venv "$SERVER_VENV"
fi
pip_quiet=(--disable-pip-version-check -q)
# pip resolves every requirement on each run (seconds); a stamp holding the hash
# of what was installed makes an unchanged re-run skip it.
stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }
server_stamp="$SERVER_VENV/.pgkb-requirements.sha256"
want="$(stamp_of "$REPO/plpython/requirements.txt")"
if [ "$(cat "$server_stamp" 2>/dev/null)" != "$want" ]; then
  log "installing server venv requirements"
  "$SERVER_VENV/bin/pip" install "${pip_quiet[@]}" -r "$REPO/plpython/requirements.txt"
  echo "$want" > "$server_stamp"
fi
# The PL/Python modules are copied (not linked) so the postgres user can read
# them wherever the clone lives, by the installer `pgkb migrate` uses too
# (standard library only, so the server venv's Python runs it).
PYTHONPATH="$REPO" "$SERVER_VENV/bin/python" -m harness.install_plpython
chmod -R a+rX "$SERVER_VENV"

# Harness venv: the CLI, tests and linters.
if [ ! -x "$HARNESS_VENV/bin/python" ]; then
  log "creating harness venv $HARNESS_VENV"
  /usr/bin/python3 -m venv "$HARNESS_VENV"
fi
# Editable install of this checkout: redone only when pyproject.toml changed or
# the venv points at another clone (or lost the console script).
harness_stamp="$HARNESS_VENV/.pgkb-pyproject.sha256"
want="$(printf '%s\n' "$REPO" | cat - "$REPO/pyproject.toml" | sha256sum | cut -d' ' -f1)"
installed_from="$(cd / && "$HARNESS_VENV/bin/python" -c 'import harness, os; print(os.path.dirname(os.path.dirname(harness.__file__)))' 2>/dev/null || true)"
if [ "$(cat "$harness_stamp" 2>/dev/null)" != "$want" ] || [ "$installed_from" != "$REPO" ] \
   || [ ! -x "$HARNESS_VENV/bin/pgkb" ]; then
  log "installing harness venv (editable, $REPO)"
  # with the extras README's LangChain and LlamaIndex examples import (about 35 s and 170 MB more)
  "$HARNESS_VENV/bin/pip" install "${pip_quiet[@]}" -e "$REPO[dev,langchain,llamaindex]"
  echo "$want" > "$harness_stamp"
fi
ln -sf "$HARNESS_VENV/bin/pgkb" /usr/local/bin/pgkb
log "done: PostgreSQL $PGV, pgvector, venvs in $PGKB_OPT; 'pgkb up' starts the embedded cluster"
