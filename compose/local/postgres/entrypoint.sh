#!/bin/bash
# First start: initdb in $PGDATA with the public postgres image's variables, then the server
# replaces this script (SIGTERM from `docker stop` is a smart shutdown). Runs as postgres.
set -euo pipefail

if [ "${1:-}" != postgres ]; then
    exec "$@"
fi
shift

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    method="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$method" != trust ]; then
        echo "postgres: set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust to allow" \
             "every connection without one (as the public image asks)" >&2
        exit 1
    fi
    pwfile="$(mktemp)"
    printf '%s' "${POSTGRES_PASSWORD:-}" > "$pwfile"
    pwopt=()
    [ -n "${POSTGRES_PASSWORD:-}" ] && pwopt=(--pwfile="$pwfile")
    initdb -D "$PGDATA" --username="$user" "${pwopt[@]}" --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host="$method" >/dev/null
    rm -f "$pwfile"
    echo "host all all all $method" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    if [ "$db" != postgres ]; then
        # On the socket only, so nothing connects before the database exists.
        pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
        createdb --username="$user" "$db"
        pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    fi
    echo "postgres: initialised $PGDATA (user $user, database $db)"
fi

exec postgres "$@"
