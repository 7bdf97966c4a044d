#!/usr/bin/env bash
# gh-ost (github.com/github/gh-ost) for the online schema change tests, built from its Go module
# at the release in scripts/gh-ost.version, once, into a cache outside the checkout:
#
#   CDC_GH_OST_DIR   where it goes (default /var/cache/gh-ost-cdc); the binary is
#                    $CDC_GH_OST_DIR/<version>/gh-ost, Go's module and build caches beside it
#   GO               the Go toolchain (default: go on PATH, else /usr/local/go/bin/go)
#
# Instant when the binary is there.  Not `go install ...@<version>`: that command also asks the
# module proxy for the module's version list (for deprecation notices), which the proxy reached
# here refuses (403); the release itself is served, so it is downloaded (`go mod download`,
# checked against sum.golang.org) and built from its own go.mod and go.sum.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(tr -d '[:space:]' < "$HERE/gh-ost.version")"
DIR="${CDC_GH_OST_DIR:-/var/cache/gh-ost-cdc}"
BIN="$DIR/$VERSION/gh-ost"

if [ -x "$BIN" ]; then
  echo "gh-ost: $BIN ($VERSION)"
  exit 0
fi
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
if [ ! -x "$GO" ]; then
  echo "building gh-ost $VERSION needs Go (https://go.dev/dl/, or GO=/path/to/go): none at $GO" >&2
  exit 1
fi
if ! mkdir -p "$DIR/$VERSION" 2>/dev/null || [ ! -w "$DIR/$VERSION" ]; then
  echo "cannot write $DIR/$VERSION: run 'make gh-ost' once as a user who can, or set CDC_GH_OST_DIR to a" \
       "writable directory (the tests read the same variable)" >&2
  exit 1
fi
exec 9>"$DIR/.lock"
flock 9
if [ -x "$BIN" ]; then  # built by another make while this one waited
  echo "gh-ost: $BIN ($VERSION)"
  exit 0
fi
export GOPATH="$DIR/go" GOMODCACHE="$DIR/go/mod" GOCACHE="$DIR/go/build" GOFLAGS=-modcacherw GOTOOLCHAIN=local
start=$(date +%s)
echo "building gh-ost $VERSION from its Go module into $BIN (once; a few minutes)"
src="$("$GO" mod download -json "github.com/github/gh-ost@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
  echo "go mod download github.com/github/gh-ost@$VERSION gave no module directory" >&2
  exit 1
fi
(cd "$src" && "$GO" build -mod=mod -trimpath -ldflags "-X main.AppVersion=$VERSION" -o "$BIN.partial" ./go/cmd/gh-ost)
mv "$BIN.partial" "$BIN"
echo "gh-ost: $BIN ($("$BIN" --version); $(( $(date +%s) - start )) s)"
