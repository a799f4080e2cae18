#!/usr/bin/env bash
# A private PostgreSQL with the pgvector extension (from the pgserver wheel), for the pgvector
# tests: the CI server's own PostgreSQL has no pgvector, and is left alone.
#   .ci/pgvector_server.sh start FOLDER [PORT]   prints the server's URL (nothing, and a non-zero
#                                                exit, when it cannot be started)
#   .ci/pgvector_server.sh stop FOLDER
set -euo pipefail
action="$1" folder="$2" port="${3:-55433}"

as_postgres() {  # PostgreSQL refuses to run as root
    if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi
}

if [ "$action" = stop ]; then
    as_postgres "$(cat "$folder/pg_ctl") -D '$folder/data' -m fast stop" >/dev/null 2>&1 || true
    exit 0
fi

python3 -m venv "$folder/venv" >&2
"$folder/venv/bin/pip" install --quiet pgserver >&2
install=$("$folder/venv/bin/python" -c "import pathlib, pgserver; print(pathlib.Path(pgserver.__file__).parent / 'pginstall')")
bin="LD_LIBRARY_PATH='$install/lib' '$install/bin"
echo "$bin/pg_ctl'" > "$folder/pg_ctl"
chmod 755 "$folder"
mkdir -p "$folder/run"
if [ "$(id -u)" = 0 ]; then chown postgres "$folder/run"; fi
as_postgres "$bin/initdb' -D '$folder/run/data' -U postgres --auth=trust" >&2
ln -sfn "$folder/run/data" "$folder/data"
as_postgres "$bin/pg_ctl' -D '$folder/run/data' -w -l '$folder/run/server.log' \
    -o \"-p $port -k '$folder/run' -c listen_addresses=127.0.0.1\" start" >&2
as_postgres "$bin/createdb' -h 127.0.0.1 -p $port -U postgres test" >&2
echo "postgresql://postgres@127.0.0.1:$port/test"
