#!/bin/bash
# Creates the least-privilege CDC user, run once by the mysql image on its first start,
# after 01-cdc.sql (which created cdc_control.cdc_signal).
#
# The password is read from $CDC_PASSWORD (set in docker/.env); it is never written in
# the repository.  The user may read the binlog (REPLICATION SLAVE, REPLICATION CLIENT),
# read every table for chunked snapshots (SELECT) and write only the signal table
# (INSERT, DELETE: window markers and their clean-up).
#
# The image's entrypoint sources this file (or executes it if it is executable); it works
# either way.  No `set -u` here: when sourced, shell options leak into the entrypoint.

if [ -z "${CDC_PASSWORD:-}" ]; then
    echo "02-cdc-user.sh: CDC_PASSWORD is not set (put it in docker/.env)" >&2
    exit 1
fi

# Quote the password as a MySQL string literal: double backslashes and single quotes.
cdc_password_sql=$(printf '%s' "$CDC_PASSWORD" | sed -e 's/\\/\\\\/g' -e "s/'/''/g")

cdc_user_sql="
CREATE USER IF NOT EXISTS 'cdc'@'%' IDENTIFIED BY '${cdc_password_sql}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'cdc'@'%';
GRANT INSERT, DELETE ON cdc_control.cdc_signal TO 'cdc'@'%';
"

if declare -F docker_process_sql > /dev/null; then
    # Sourced by the entrypoint: use its helper (root credentials, init socket).
    docker_process_sql --database=mysql <<< "$cdc_user_sql"
else
    MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysql --protocol=socket -uroot --database=mysql <<< "$cdc_user_sql"
fi
unset cdc_password_sql cdc_user_sql
