#!/bin/sh
# The app's database role for docker-compose.yml: postgres runs this on its first start (from
# /docker-entrypoint-initdb.d), as POSTGRES_USER, the tables' owner. guardian_app logs in and
# owns nothing: `migrate` (the owner) grants it its rights on the tables (runs/db_roles.py).
# Safe to run again (docker compose exec postgres sh /docker-entrypoint-initdb.d/…): it makes
# the role if missing and sets its password to GUARDIAN_APP_DB_PASSWORD.
set -eu
: "${GUARDIAN_APP_DB_PASSWORD:?set GUARDIAN_APP_DB_PASSWORD}"
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v app_password="$GUARDIAN_APP_DB_PASSWORD" <<'SQL'
SELECT 'CREATE ROLE guardian_app LOGIN'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'guardian_app')\gexec
ALTER ROLE guardian_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS
  PASSWORD :'app_password';
-- PostgreSQL 15 and later already withhold this; the app's role must never create here.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL
