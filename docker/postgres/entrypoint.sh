#!/bin/sh
# First start: initialize the cluster with the superuser $POSTGRES_USER and
# the password in $POSTGRES_PASSWORD_FILE (a compose secret; never in the
# environment), allow password (SCRAM) logins over the network, and run
# /etc/rdv-postgres/init.sql on a socket-only server, so the TCP port opens
# only once the databases exist. Then run the server in the foreground.
set -eu
bin=/usr/lib/postgresql/15/bin
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ ! -r "$POSTGRES_PASSWORD_FILE" ]; then
    echo "rdv-postgres: no readable password file at $POSTGRES_PASSWORD_FILE" >&2
    exit 1
  fi
  pw="$(mktemp)"
  # The first line, without its newline (as the services read secrets).
  head -n 1 "$POSTGRES_PASSWORD_FILE" | tr -d '\r\n' >"$pw"
  if [ ! -s "$pw" ]; then
    echo "rdv-postgres: $POSTGRES_PASSWORD_FILE is empty" >&2
    rm -f "$pw"
    exit 1
  fi
  "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" \
    --auth-local=peer --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pw"
  printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  # Local (socket) logins as the OS user postgres map to $POSTGRES_USER.
  printf 'local all all trust\n' >"$PGDATA/pg_hba.local"
  "$bin/pg_ctl" -D "$PGDATA" -w -o "-c listen_addresses= -c hba_file=$PGDATA/pg_hba.local" start >/dev/null
  "$bin/psql" -v ON_ERROR_STOP=1 -q -h /run/postgresql -U "$POSTGRES_USER" -d postgres \
    -f /etc/rdv-postgres/init.sql
  "$bin/pg_ctl" -D "$PGDATA" -w -m fast stop >/dev/null
  rm -f "$PGDATA/pg_hba.local"
  echo "rdv-postgres: initialized $PGDATA"
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
