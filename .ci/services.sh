#!/usr/bin/env bash
# Copy of the team's shared CI script (/work/shared/ci/services.sh), kept in the repo so CI does not depend on a folder outside it.
# services.sh — start a throwaway PostgreSQL cluster + Redis on 127.0.0.1, no systemd.
# Idempotent: safe to re-run; reuses a running instance, re-inits only if PGDATA is missing.
# Requires Debian's packages: apt-get install -y --no-install-recommends postgresql redis-server
# Usage:  source services.sh        starts both (or reuses them) and exports DATABASE_URL and REDIS_URL
#         bash services.sh stop     fast shutdown of both
# Note: sourcing it turns on `set -euo pipefail` in the calling shell.
set -euo pipefail

CI_SVC_DIR="${CI_SVC_DIR:-/tmp/ci-services}"
PGPORT="${PGPORT:-54329}"
REDIS_PORT="${REDIS_PORT:-63799}"
APP_DB="${APP_DB:-app}"; APP_USER="${APP_USER:-app}"; APP_PASS="${APP_PASS:-app}"

PGBIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)"   # e.g. /usr/lib/postgresql/15/bin
PGDATA="$CI_SVC_DIR/pgdata"; PGRUN="$CI_SVC_DIR/pgrun"; RDIR="$CI_SVC_DIR/redis"   # pgrun: socket + log

# initdb/pg_ctl refuse to run as root -> drop to the 'postgres' user when we are root.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ "${1:-}" = "stop" ]; then
  [ -d "$PGDATA" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop || true
  redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave 2>/dev/null || true
  exit 0
fi

# ---------- PostgreSQL ----------
# NB: every parent of CI_SVC_DIR must be traversable by 'postgres' (so not under /root or a 0700 mktemp dir)
mkdir -p "$CI_SVC_DIR" "$RDIR"; chmod 755 "$CI_SVC_DIR"
if [ "$(id -u)" = 0 ]; then
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  install -d -o postgres -g postgres -m 755 "$PGRUN"    # log must be writable by postgres
else
  install -d -m 700 "$PGDATA"; install -d -m 755 "$PGRUN"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  # trust auth on a 127.0.0.1-only, throwaway cluster; C.UTF-8 exists in every Debian image
  as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
        >"$CI_SVC_DIR/initdb.log" 2>&1
fi
PSQL=(psql -X -w -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres)
if pg_isready -q -U postgres -h 127.0.0.1 -p "$PGPORT"; then
  # something answers: reuse it only if it is *our* cluster (rerun), otherwise it is a port conflict
  running_dd="$("${PSQL[@]}" -tAc 'SHOW data_directory' 2>/dev/null || true)"
  if [ "$running_dd" != "$(readlink -f "$PGDATA")" ]; then
    echo "ERROR: 127.0.0.1:$PGPORT is taken by another server (data_directory='$running_dd')" >&2; exit 1
  fi
else
  # -k: own socket dir (Debian's default /var/run/postgresql may not exist after a reboot/tmpfs /run)
  # PG_EXTRA_OPTS e.g. "-c fsync=off -c synchronous_commit=off -c full_page_writes=off" for speed
  # a stale postmaster.pid (crash / kill -9) is handled by the postmaster itself; retry because a
  # killed postmaster can linger as an unreaped zombie for a moment (its PID still "exists")
  for attempt in 1 2 3; do
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGRUN/postgres.log" -w -t 60 start \
          -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGRUN ${PG_EXTRA_OPTS:-}" >/dev/null && break
    [ "$attempt" = 3 ] && { tail -n 20 "$PGRUN/postgres.log" >&2; exit 1; }
    sleep 2
  done
fi
for _ in $(seq 1 120); do pg_isready -q -U postgres -h 127.0.0.1 -p "$PGPORT" && break; sleep 0.25; done
pg_isready -U postgres -h 127.0.0.1 -p "$PGPORT"
"${PSQL[@]}" -c "DO \$\$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='$APP_USER') THEN
    CREATE ROLE \"$APP_USER\" LOGIN CREATEDB PASSWORD '$APP_PASS';   -- CREATEDB: pytest-django makes test_<db>
  END IF; END\$\$;"
# The app's own role for the tests of the decision log's protections (tests/test_db_app_role.py):
# NOLOGIN, owns nothing; the suite's login role may SET ROLE to it.
"${PSQL[@]}" -c "DO \$\$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='guardian_app') THEN
    CREATE ROLE guardian_app NOLOGIN;
  END IF; END\$\$;" -c "GRANT guardian_app TO \"$APP_USER\""
"${PSQL[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname='$APP_DB'" | grep -q 1 \
  || "${PSQL[@]}" -c "CREATE DATABASE \"$APP_DB\" OWNER \"$APP_USER\""

# ---------- Redis ----------
if redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then
  rdir_running="$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" config get dir 2>/dev/null | tail -n1)"
  if [ "$rdir_running" != "$(readlink -f "$RDIR")" ]; then
    echo "ERROR: 127.0.0.1:$REDIS_PORT is taken by another redis (dir='$rdir_running')" >&2; exit 1
  fi
else
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes \
    --pidfile "$RDIR/redis.pid" --logfile "$RDIR/redis.log" --dir "$RDIR" \
    --save '' --appendonly no
fi
for _ in $(seq 1 100); do redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping | grep -q PONG

export DATABASE_URL="postgres://$APP_USER:$APP_PASS@127.0.0.1:$PGPORT/$APP_DB"
export REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
echo "postgres ready: $DATABASE_URL   redis ready: $REDIS_URL"
