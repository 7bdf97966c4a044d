#!/bin/sh
# Run once by the postgres image's entrypoint, after initdb and before the server's final
# start: connections over TCP from other hosts are accepted with TLS only (hostssl), as the
# sink's DSN asks (sslmode=require).  The socket and 127.0.0.1 (the healthcheck) stay as the
# image made them.
set -eu
sed -i -E 's/^host([[:space:]]+all[[:space:]]+all[[:space:]]+all[[:space:]])/hostssl\1/' "$PGDATA/pg_hba.conf"
grep -q '^hostssl[[:space:]]\+all[[:space:]]\+all[[:space:]]\+all' "$PGDATA/pg_hba.conf" || {
    echo "01-hostssl-only.sh: no 'host all all all' line in $PGDATA/pg_hba.conf to make hostssl" >&2
    exit 1
}
