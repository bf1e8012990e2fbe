# Shared helpers for hack/ scripts. Source it; do not run it.
set -euo pipefail
HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT_DIR=$(cd "$HACK_DIR/.." && pwd)
# shellcheck source=versions.env
. "$HACK_DIR/versions.env"
SLESS_CACHE=${SLESS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sless}
mkdir -p "$SLESS_CACHE/bin"
_t0=${_t0:-$(date +%s)}
log() { printf '[%s +%4ss] %s\n' "$(basename "$0")" "$(( $(date +%s) - _t0 ))" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# go_install_cached NAME MODULE@VERSION [PKG]: build a Go binary into a temp dir and rename it into
# $SLESS_CACHE/bin/NAME-VERSION only on success, so an interrupted build never leaves a broken binary.
go_install_cached() {
  local name=$1 modver=$2 out="$SLESS_CACHE/bin/$1-${2##*@}"
  if [ -x "$out" ]; then echo "$out"; return 0; fi
  local tmp; tmp=$(mktemp -d "$SLESS_CACHE/tmp.XXXXXX")
  log "building $name from $modver (first time only)"
  if GOBIN="$tmp" CGO_ENABLED=0 go install "$modver" >&2; then
    mv "$tmp/$(basename "${modver%@*}")" "$out"; rm -rf "$tmp"; echo "$out"
  else rm -rf "$tmp"; die "building $name failed"; fi
}
# mkbase: the rootfs → OCI layout tool in hack/mkbase, built once per source change.
mkbase_bin() {
  local out="$SLESS_CACHE/bin/mkbase"
  (cd "$ROOT_DIR" && go build -o "$out.tmp" ./hack/mkbase && mv "$out.tmp" "$out") >&2
  echo "$out"
}
