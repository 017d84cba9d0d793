#!/usr/bin/env bash
# A throwaway PostgreSQL server on this machine, for evaluating cargo-ekstazi
# on a project whose integration tests use a database on localhost (as CI
# starts one). Debian's packages; nothing is installed outside them.
#
#   xtask/scripts/postgres.sh start DIR [PORT] [SETUP]   # data in DIR
#   xtask/scripts/postgres.sh stop DIR
#
# SETUP is a script in the style of the official image's
# /docker-entrypoint-initdb.d (it sees PGDATA, POSTGRES_USER, and a server
# on the Unix socket), run once after initdb: a project's own test setup.
# The server listens on localhost and on the socket directory
# /var/run/postgresql, at PORT (default 5432).
set -euo pipefail

cmd=${1:?start or stop}
dir=$(realpath -m "${2:?data directory}")
port=${3:-5432}
setup=${4:-}

if ! command -v pg_config >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get install -y -q postgresql >/dev/null
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_postgres() { runuser -u postgres -- env PATH="$bin:$PATH" "$@"; }

case $cmd in
start)
    mkdir -p "$dir" /var/run/postgresql
    chown postgres:postgres "$dir" /var/run/postgresql
    if [ ! -f "$dir/PG_VERSION" ]; then
        as_postgres initdb -U postgres -D "$dir" >/dev/null
        if [ -n "$setup" ]; then
            as_postgres pg_ctl -s -D "$dir" -o "-p $port -c listen_addresses=''" -w start
            as_postgres env PGDATA="$dir" PGPORT="$port" PGHOST=/var/run/postgresql \
                POSTGRES_USER=postgres bash "$setup"
            as_postgres pg_ctl -s -D "$dir" -w stop
        fi
    fi
    as_postgres pg_ctl -s -D "$dir" -l "$dir/server.log" \
        -o "-p $port -c listen_addresses=localhost" -w start
    ;;
stop)
    as_postgres pg_ctl -s -D "$dir" -m fast -w stop
    ;;
*)
    echo "usage: $0 start DIR [PORT] [SETUP] | stop DIR" >&2
    exit 2
    ;;
esac
