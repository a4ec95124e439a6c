#!/usr/bin/env bash
# Debian 13 exercised for real: build a Debian 13 (trixie) root with debootstrap from
# Debian's own packages, enter it (chroot inside a private mount namespace), copy this
# checkout in, run README command 1 (`bash scripts/demo.sh`) and command 2
# (`bash scripts/test.sh -q`) there as root, then scripts/install.sh once more (a re-run
# must change nothing), and report the figures as JSON and a table.
#
#   bash scripts/check-debian13.sh               # fresh machine: new overlay on the reused base
#   bash scripts/check-debian13.sh --keep --steps test   # re-run steps (demo,test,reinstall)
#                                                         # on the last run's machine
#   bash scripts/check-debian13.sh --rebuild     # debootstrap the base again
#   bash scripts/check-debian13.sh --head        # the committed HEAD only, no working tree
#
# What goes in (by default) is the WORKING TREE of this checkout (tracked files as they are
# on disk, plus untracked files that are not ignored), laid over a `git clone` of its HEAD,
# so the check runs today's code, uncommitted changes included, with the history tests need.
#
# Layout under PGKB_DEBIAN13_ROOT (default /var/tmp/pgkb-debian13):
#   base/     the debootstrap result (minbase + ca-certificates, git), reused when present
#   upper/    this run's changes (overlayfs over base/): a fresh machine each run
#   merged/   the root the steps run in; mounted only inside the script's mount namespace
#   logs/     bootstrap.log, demo.log, test.log; report.json
# The mirror and its key come from the host's /etc/apt/sources.list.d/debian.sources at run
# time (nothing about the mirror is written into this repository); pip inside uses the
# host's pip configuration, with the local folders it names bind-mounted read-only.
# The embedded and test clusters inside listen on PGKB_DEBIAN13_PORT / _TEST_PORT (default
# 55499 / 55498): the chroot shares the host's network, where 5499 / 5498 may be in use.
# Runs as root. Exit 0 only when every step run passed.
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"
ROOT="${PGKB_DEBIAN13_ROOT:-/var/tmp/pgkb-debian13}"
BASE="$ROOT/base"
UPPER="$ROOT/upper"
WORKDIR="$ROOT/work"
MERGED="$ROOT/merged"
LOGS="$ROOT/logs"
REPORT="$LOGS/report.json"
PORT="${PGKB_DEBIAN13_PORT:-55499}"
TEST_PORT="${PGKB_DEBIAN13_TEST_PORT:-55498}"
CODE="${PGKB_DEBIAN13_CODE:-working tree}"  # or HEAD (--head): the committed code only
CLONE=/root/pgkb  # where the clone lives inside the Debian 13 root
SOURCES=/etc/apt/sources.list.d/debian.sources
log() { printf '[check-debian13] %s\n' "$*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

[ "$(id -u)" = 0 ] || { echo "check-debian13.sh must run as root" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# Inside the private mount namespace: mount, copy, run the steps, report, clean up.
# ---------------------------------------------------------------------------------------
inner() {
  local steps="$1" bootstrap_secs="$2" bootstrap_status="$3"
  local -A took status
  chroot_env=(env -i HOME=/root LANG=C.UTF-8 TERM=dumb
              PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
              PGKB_PORT="$PORT" PGKB_TEST_PORT="$TEST_PORT")
  # Pass the host's pip and OpenBLAS settings through, so pip and numpy behave as on the host.
  while IFS= read -r var; do chroot_env+=("$var=${!var}"); done \
    < <(compgen -e | grep -E '^(PIP_|OPENBLAS_|CI$)' || true)
  in_root() { chroot "$MERGED" "${chroot_env[@]}" "$@"; }

  cleanup() {
    set +e
    if [ -x "$MERGED/usr/local/bin/pgkb" ]; then
      in_root env PGKB_HOME=/var/lib/pgkb-test PGKB_PORT="$TEST_PORT" pgkb down >/dev/null 2>&1
      in_root pgkb down >/dev/null 2>&1
    fi
    # Anything else still running with this root (a fake server a test left behind): by pid.
    local pids=() p
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$MERGED" ] && pids+=("${p#/proc/}")
    done
    if [ "${#pids[@]}" -gt 0 ]; then
      kill "${pids[@]}" 2>/dev/null; sleep 2; kill -9 "${pids[@]}" 2>/dev/null
    fi
    umount -R "$MERGED" 2>/dev/null || umount -R -l "$MERGED"
  }
  trap cleanup EXIT

  mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$UPPER,workdir=$WORKDIR" "$MERGED"
  mount -t proc proc "$MERGED/proc"
  mount --rbind /sys "$MERGED/sys" && mount --make-rslave "$MERGED/sys"
  mount --rbind /dev "$MERGED/dev" && mount --make-rslave "$MERGED/dev"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$MERGED/dev/shm"  # its own, not the host's
  cp -L /etc/resolv.conf "$MERGED/etc/resolv.conf"
  [ -f /etc/hosts ] && cp /etc/hosts "$MERGED/etc/hosts"

  # apt: the host's mirror and key (read now), suites renamed to trixie, and the host's
  # Acquire:: settings that make that mirror usable.
  local host_codename
  host_codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
  sed -e '/^#/d' -e "/^Suites:/s/$host_codename/trixie/g" "$SOURCES" > "$MERGED$SOURCES"
  rm -f "$MERGED/etc/apt/sources.list"
  { grep -l '^Acquire::' /etc/apt/apt.conf.d/* 2>/dev/null || true; } | while read -r f; do cp "$f" "$MERGED$f"; done
  awk '/^Signed-By:/ {print $2}' "$SOURCES" | sort -u | while read -r key; do
    [ -e "$MERGED$key" ] || { mkdir -p "$MERGED$(dirname "$key")"; cp "$key" "$MERGED$key"; }
  done

  # TLS and pip: the host's extra CAs, pip config files, and the local folders they name.
  if compgen -G '/usr/local/share/ca-certificates/*' >/dev/null; then
    cp -r /usr/local/share/ca-certificates/. "$MERGED/usr/local/share/ca-certificates/"
    in_root update-ca-certificates >/dev/null 2>&1 || log "update-ca-certificates failed"
  fi
  local conf dirs=()
  for conf in /etc/pip.conf /etc/xdg/pip /root/.config/pip /root/.pip; do
    [ -e "$conf" ] || continue
    mkdir -p "$MERGED$(dirname "$conf")"; cp -r "$conf" "$MERGED$(dirname "$conf")/"
  done
  while read -r d; do
    [ -d "$d" ] && dirs+=("$d")
  done < <( { cat /etc/pip.conf /etc/xdg/pip/*.conf /root/.config/pip/*.conf /root/.pip/*.conf 2>/dev/null \
               | grep -E '^\s*(find-links|index-url|extra-index-url)\s*=' | cut -d= -f2-
             compgen -e | grep -E '^PIP_(FIND_LINKS|INDEX_URL|EXTRA_INDEX_URL)$' | while read -r v; do echo "${!v}"; done
           } | tr ' ' '\n' | sed -n -e 's#^file://##p' -e '\#^/#p' | sed 's#/simple/*$##' | sort -u)
  for d in "${dirs[@]}"; do
    mkdir -p "$MERGED$d"; mount --bind -o ro "$d" "$MERGED$d"
  done

  # The code: a clone of HEAD (history for the upgrade test), then the working tree over it.
  # (The clone is a throwaway inside the Debian 13 root; this checkout is only read.)
  if [ ! -d "$MERGED$CLONE/.git" ]; then
    git clone -q --no-hardlinks "$REPO" "$MERGED$CLONE"
  else  # --keep: bring the last run's clone to today's HEAD
    git -C "$MERGED$CLONE" fetch -q origin HEAD
    git -C "$MERGED$CLONE" reset -q --hard FETCH_HEAD
    git -C "$MERGED$CLONE" clean -q -fd
  fi
  local head dirty=0
  head="$(git -C "$REPO" rev-parse --short HEAD)"
  if [ "$CODE" = "working tree" ]; then
    (cd "$REPO" && git ls-files -z -c -o --exclude-standard | while IFS= read -r -d '' f; do
        [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf -) \
      | tar -x --no-same-owner -C "$MERGED$CLONE"
    # Files of HEAD that the working tree no longer has (deleted, or renamed and staged).
    (cd "$REPO" && git ls-tree -r -z --name-only HEAD | while IFS= read -r -d '' f; do
        [ -e "$f" ] || printf '%s\0' "$f"; done) | (cd "$MERGED$CLONE" && xargs -0 -r rm -f)
    dirty="$(git -C "$REPO" status --porcelain | wc -l)"
    log "code: HEAD $head + the working tree ($dirty changed/untracked paths) in $CLONE"
  else
    log "code: HEAD $head (committed code only) in $CLONE"
  fi

  run_step() {  # name, command...
    local name="$1"; shift
    log "step $name: $* (log: $LOGS/$name.log)"
    local t0 rc=0
    t0="$(now)"
    in_root bash -c "cd $CLONE && $*" > "$LOGS/$name.log" 2>&1 || rc=$?
    took[$name]="$(secs "$t0" "$(now)")"
    status[$name]=$([ "$rc" = 0 ] && echo passed || echo "failed (exit $rc)")
    log "step $name: ${status[$name]} in ${took[$name]} s"
  }
  local s
  for s in ${steps//,/ }; do
    case "$s" in
      # A step starts on a new cluster even with --keep (migrations in a working tree change).
      demo) rm -rf "$MERGED/var/lib/pgkb"; run_step demo bash scripts/demo.sh ;;
      test) rm -rf "$MERGED/var/lib/pgkb-test"; run_step test bash scripts/test.sh -q ;;
      reinstall) run_step reinstall bash scripts/install.sh ;;  # idempotent: should change nothing
      *) echo "unknown step $s" >&2; exit 2 ;;
    esac
  done

  # Figures. Values go to the report writer through the environment (they hold UTF-8 text).
  export R_DEBIAN R_PG R_PGVECTOR_PKG R_PGVECTOR_EXT R_PLPYTHON R_SYSPY R_TESTS_LINE R_DEMO_ANSWER \
         R_HEAD R_DIRTY R_STEPS R_CODE="$CODE" R_BOOT_SECS="$bootstrap_secs" R_BOOT_STATUS="$bootstrap_status" \
         R_DEMO_SECS="${took[demo]:-}" R_DEMO_STATUS="${status[demo]:-}" \
         R_TEST_SECS="${took[test]:-}" R_TEST_STATUS="${status[test]:-}" \
         R_REINSTALL_SECS="${took[reinstall]:-}" R_REINSTALL_STATUS="${status[reinstall]:-}" R_LOGS="$LOGS"
  R_HEAD="$head" R_DIRTY="$dirty" R_STEPS="$steps"
  R_DEBIAN="$(cat "$MERGED/etc/debian_version")"
  R_PG="$(in_root bash -c 'for b in /usr/lib/postgresql/*/bin/postgres; do "$b" -V; done' 2>/dev/null | tail -1 || true)"
  R_PGVECTOR_PKG="$(in_root dpkg-query -W -f='${Version}' postgresql-17-pgvector 2>/dev/null || echo none)"
  R_SYSPY="$(in_root /usr/bin/python3 -V 2>&1 || true)"
  local p dsn
  for p in "$PORT" "$TEST_PORT"; do  # whichever cluster this run left running
    dsn="postgresql://postgres@127.0.0.1:$p/pgkb"
    R_PGVECTOR_EXT="$(in_root psql "$dsn" -Atc "SELECT extversion FROM pg_extension WHERE extname = 'vector'" 2>/dev/null || true)"
    R_PLPYTHON="$(in_root psql "$dsn" -q -c 'DO LANGUAGE plpython3u $$ import sys; plpy.notice(sys.version.split()[0]) $$' 2>&1 \
                  | sed -n 's/^NOTICE: *//p' || true)"
    [ -n "$R_PGVECTOR_EXT" ] && break
  done
  R_TESTS_LINE="$(grep -E '^[= ]*[0-9]+ (passed|failed|error)|^[= ]*no tests ran' "$LOGS/test.log" 2>/dev/null | tail -1 || true)"
  R_DEMO_ANSWER=""
  [ -f "$LOGS/demo.log" ] && R_DEMO_ANSWER="$(grep -A3 "^== SELECT" "$LOGS/demo.log" | sed -n 2,4p || true)"

  python3 - "$REPORT" <<'PY'
import json, os, re, sys
e = os.environ
path = sys.argv[1]
try:
    previous = json.load(open(path, encoding="utf-8"))
except (OSError, ValueError):
    previous = {}
steps = {"bootstrap": {"seconds": float(e["R_BOOT_SECS"]), "status": e["R_BOOT_STATUS"]}}
for name in ("demo", "test", "reinstall"):
    if e[f"R_{name.upper()}_STATUS"]:
        steps[name] = {"seconds": float(e[f"R_{name.upper()}_SECS"]), "status": e[f"R_{name.upper()}_STATUS"]}
    elif name in previous.get("steps", {}):  # not run now (--steps): the last run's figures
        was = previous["steps"][name]["status"]
        steps[name] = dict(previous["steps"][name], status=was if was.endswith("(previous run)") else was + " (previous run)")
    else:
        steps[name] = {"seconds": None, "status": "not run"}
log = open(os.path.join(e["R_LOGS"], "test.log"), encoding="utf-8", errors="replace").read() \
    if os.path.exists(os.path.join(e["R_LOGS"], "test.log")) else ""
line = e["R_TESTS_LINE"].strip(" =")
def count(word):
    m = re.search(rf"(\d+) {word}", line)
    return int(m.group(1)) if m else 0
tests = {"ruff_passed": "== sqlfluff" in log, "sqlfluff_passed": "== pytest" in log, "pytest_summary": line,
         "passed": count("passed"), "failed": count("failed"), "skipped": count("skipped"),
         "errors": count("error")}
if not e["R_TEST_STATUS"] and "tests" in previous:
    tests = previous["tests"]
report = {
    "debian": e["R_DEBIAN"],
    "code": {"from": e["R_CODE"], "head": e["R_HEAD"], "working_tree_paths_changed_or_untracked": int(e["R_DIRTY"])},
    "versions": {"postgresql": e["R_PG"], "pgvector_package": e["R_PGVECTOR_PKG"],
                 "pgvector_extension": e["R_PGVECTOR_EXT"], "plpython_python": e["R_PLPYTHON"],
                 "system_python": e["R_SYSPY"]},
    "steps": steps,
    "tests": tests,
    "demo_first_answer": " ".join(e["R_DEMO_ANSWER"].split())[:160],
    "logs": e["R_LOGS"],
}
json.dump(report, open(path, "w", encoding="utf-8"), indent=2, ensure_ascii=False)
print(json.dumps(report, indent=2, ensure_ascii=False))
print()
print(f"{'step':<10} {'seconds':>8}  status")
for name, s in steps.items():
    print(f"{name:<10} {s['seconds'] if s['seconds'] is not None else '-':>8}  {s['status']}")
print(f"pytest: {tests['pytest_summary'] or '(no summary line)'}; ruff passed: {tests['ruff_passed']}; "
      f"sqlfluff passed: {tests['sqlfluff_passed']}")
v = report["versions"]
print(f"Debian {report['debian']}; {v['postgresql']}; pgvector {v['pgvector_extension']} "
      f"(package {v['pgvector_package']}); PL/Python on Python {v['plpython_python']}; {v['system_python']}")
PY
  for s in ${steps//,/ }; do [ "${status[$s]}" = passed ] || return 1; done
}

if [ "${1:-}" = --inner ]; then
  shift; inner "$@"; exit $?
fi

# ---------------------------------------------------------------------------------------
# On the host: arguments, debootstrap (once), then the rest in a private mount namespace.
# ---------------------------------------------------------------------------------------
steps=demo,test,reinstall keep=0 rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --rebuild) rebuild=1; shift ;;
    --head) export PGKB_DEBIAN13_CODE=HEAD; shift ;;
    -h|--help) awk 'NR > 1 && /^set -euo/ {exit} NR > 1' "$SELF"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$ROOT" "$LOGS"

if ! command -v debootstrap >/dev/null; then
  log "apt-get install debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

mirror="$(awk '/^URIs:/ {print $2; exit}' "$SOURCES")"
keyring="$(awk '/^Signed-By:/ {print $2; exit}' "$SOURCES")"
[ -n "$mirror" ] || { echo "no URIs: line in $SOURCES" >&2; exit 1; }

t0="$(now)"
if [ "$rebuild" = 1 ] || [ ! -f "$BASE/.pgkb-base-complete" ]; then
  rm -rf "$BASE" "$UPPER" "$WORKDIR"
  log "debootstrap trixie into $BASE (log: $LOGS/bootstrap.log)"
  keyring_opt=()
  [ -n "$keyring" ] && keyring_opt=(--keyring="$keyring")
  debootstrap --variant=minbase --include=ca-certificates,debian-archive-keyring,git \
    "${keyring_opt[@]}" trixie "$BASE" "$mirror" > "$LOGS/bootstrap.log" 2>&1 \
    || { tail -20 "$LOGS/bootstrap.log" >&2; exit 1; }
  touch "$BASE/.pgkb-base-complete"
  bootstrap_status=built
else
  bootstrap_status=reused
fi
bootstrap_secs="$(secs "$t0" "$(now)")"
log "base root: $bootstrap_status in $bootstrap_secs s"

if [ "$keep" = 0 ]; then rm -rf "$UPPER" "$WORKDIR"; fi
mkdir -p "$UPPER" "$WORKDIR" "$MERGED"

# A private mount namespace: every mount below disappears with it, whatever happens.
exec unshare --mount --propagation private -- bash "$SELF" --inner "$steps" "$bootstrap_secs" "$bootstrap_status"
