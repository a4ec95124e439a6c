#!/usr/bin/env bash
# The main job on the embedded default: install, start the local cluster,
# ingest the bilingual sample corpus (examples/corpus) and answer a real query.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install.sh
pgkb up
pgkb ingest examples/corpus --quiet
echo
echo "== SELECT * FROM kb_retrieve('退款期限是几天？')"
pgkb query '退款期限是几天？' --k 3
echo
echo "== the same question as of 2025-03-01 (before refund policy v2 took effect)"
pgkb query '退款期限是几天？' --k 1 --as-of 2025-03-01
echo
echo "== an identifier"
pgkb query 'E-4031' --k 1
cat <<'NEXT'

Next:
  psql "$(pgkb dsn)" -c "SELECT rank, source, section_path, score, match_type FROM kb_retrieve('How do we run on-call?', 5)"
  psql "$(pgkb dsn)" -c "SELECT jsonb_pretty(kb_retrieve_explain('什么是 session.ttl_seconds'))"
  pgkb query 'Which queue do we use for background jobs?' --namespace engineering
  pgkb eval examples/eval/cases.json --k 10
  pgkb status
NEXT
