#!/usr/bin/env bash
# A real MySQL server for the embedded stack (`cdc stack up --flavor mysql`), built once in a
# cache outside the checkout.  Debian 12 ships MariaDB only; Debian's unstable suite serves
# `mysql-server-core` 9.x, which needs a newer glibc than Debian 12's, so it lives in a
# Debian unstable root of its own (debootstrap --variant=minbase) and runs chrooted there
# (cdc/stack/mysql_root.py).
#
#   CDC_MYSQL_ROOT   where the root is (default /var/cache/mysql-cdc/sid-root)
#   CDC_DEBIAN_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
#
# Idempotent: when the root's stamp exists it prints the version and exits at once.  The
# root is built beside its final place (<root>.partial) and moved there when complete, under
# a lock, so a build cut short leaves no half root behind and two makes never build twice.
# Needs root (debootstrap, chroot, mount).  About 3 minutes and 800 MB: docs/mysql.md.
set -euo pipefail

ROOT="${CDC_MYSQL_ROOT:-/var/cache/mysql-cdc/sid-root}"
MIRROR="${CDC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STAMP="$ROOT/.cdc-mysql-root"
VERSION_FILE="$ROOT/CDC_MYSQL_VERSION"

if [ -f "$STAMP" ] && [ -x "$ROOT/usr/sbin/mysqld" ]; then
  echo "MySQL root: $ROOT (mysql $(cat "$VERSION_FILE"))"
  exit 0
fi

if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then  # building needs root (debootstrap, chroot, mount); running it does not
    exec sudo CDC_MYSQL_ROOT="$ROOT" CDC_DEBIAN_MIRROR="$MIRROR" bash "$0" "$@"
  fi
  echo "building the MySQL root ($ROOT) needs root: debootstrap, chroot and mount (run 'make mysql-server' as root once)" >&2
  exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "installing system packages: debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
fi

mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9
if [ -f "$STAMP" ] && [ -x "$ROOT/usr/sbin/mysqld" ]; then  # built by another make while this one waited
  echo "MySQL root: $ROOT (mysql $(cat "$VERSION_FILE"))"
  exit 0
fi

PARTIAL="$ROOT.partial"
cleanup() {
  if mountpoint -q "$PARTIAL/proc" 2>/dev/null; then umount "$PARTIAL/proc" || umount -l "$PARTIAL/proc"; fi
}
trap cleanup EXIT

start=$(date +%s)
if [ -d "$PARTIAL" ]; then
  cleanup
  rm -rf --one-file-system "$PARTIAL"
fi
echo "building the MySQL root in $ROOT (Debian unstable, minbase; a few minutes, once)"
LOG="$ROOT.build.log"
: > "$LOG"
failed() {
  echo "building the MySQL root failed ($1); the log: $LOG" >&2
  tail -20 "$LOG" >&2
  exit 1
}
debootstrap --variant=minbase sid "$PARTIAL" "$MIRROR" >> "$LOG" 2>&1 || failed debootstrap

mount -t proc proc "$PARTIAL/proc"
# No service is ever started inside the root by a package's scripts.
printf '#!/bin/sh\nexit 101\n' > "$PARTIAL/usr/sbin/policy-rc.d"
chmod 755 "$PARTIAL/usr/sbin/policy-rc.d"
in_root() { chroot "$PARTIAL" env DEBIAN_FRONTEND=noninteractive LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
# The mirror reached from some machines is a snapshot whose Release file has expired.
APT=(apt-get -o Acquire::Check-Valid-Until=false -o Dpkg::Use-Pty=0)
in_root "${APT[@]}" update >> "$LOG" 2>&1 || failed "apt-get update in the root"
in_root "${APT[@]}" install -y --no-install-recommends mysql-server-core mysql-client-core >> "$LOG" 2>&1 \
  || failed "apt-get install mysql-server-core mysql-client-core in the root"
in_root "${APT[@]}" clean
cleanup

version=$(in_root /usr/sbin/mysqld --version | sed -n 's/.*Ver \([0-9][0-9.]*\).*/\1/p')
if [ -z "$version" ]; then
  echo "the MySQL root's mysqld does not run: chroot $PARTIAL /usr/sbin/mysqld --version" >&2
  exit 1
fi
# The stack runs it from this machine through the root's own loader (cdc/stack/mysql_root.py).
L="$PARTIAL/usr/lib/x86_64-linux-gnu"
if ! OPENSSL_CONF=/dev/null "$L/ld-linux-x86-64.so.2" --library-path "$L" "$PARTIAL/usr/sbin/mysqld" --version >/dev/null; then
  echo "the MySQL root's mysqld does not run through its loader from this machine" >&2
  exit 1
fi
echo "$version" > "$PARTIAL/CDC_MYSQL_VERSION"
took=$(( $(date +%s) - start ))
size=$(du -sxm "$PARTIAL" | cut -f1)
printf 'mysql %s\nbuilt %s in %ss, %s MB\n' "$version" "$(date -u +%FT%TZ)" "$took" "$size" > "$PARTIAL/.cdc-mysql-root"
if [ -e "$ROOT" ]; then  # a root without its stamp: not one this script finished
  rm -rf --one-file-system "$ROOT"
fi
mv "$PARTIAL" "$ROOT"
echo "MySQL root: $ROOT (mysql $version; built in ${took}s, ${size} MB)"
