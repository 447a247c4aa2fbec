#!/bin/sh
# Runs once when the PostgreSQL volume is created: the login role the application connects as.
# It owns nothing and is no superuser, so row-level security applies to every query it makes.
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE ekko_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD '${EKKO_APP_DB_PASSWORD}';
CREATE EXTENSION IF NOT EXISTS vector;
SQL
