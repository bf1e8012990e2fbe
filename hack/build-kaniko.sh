#!/usr/bin/env bash
# Builds kaniko's executor from the Go module proxy (no prebuilt binaries can be fetched here) and
# prints the path of an OCI image layout holding it, for the benchmark's kaniko anchor.
. "$(dirname "$0")/lib.sh"
out="$SLESS_CACHE/kaniko-$KANIKO_VERSION"
if [ -f "$out/layout/index.json" ]; then echo "$out"; exit 0; fi
tmp=$(mktemp -d "$SLESS_CACHE/tmp.kaniko.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
log "building kaniko executor $KANIKO_VERSION from the Go module proxy (≈5 min, cached afterwards)"
mkdir -p "$tmp/mod" "$tmp/root/kaniko/.docker" "$tmp/root/etc/ssl/certs"
cd "$tmp/mod"
go mod init kanikobuild >/dev/null 2>&1
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/GoogleContainerTools/kaniko/cmd/executor"
GO
go get "github.com/GoogleContainerTools/kaniko@$KANIKO_VERSION" >&2
# kaniko's own go.mod may carry replace lines; copy them so the build matches upstream.
modfile=$(go list -m -f '{{.GoMod}}' "github.com/GoogleContainerTools/kaniko")
awk '/^replace /{print} /^replace \($/{f=1} f{print} /^\)$/{f=0}' "$modfile" >> go.mod
go mod tidy >&2 || true
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/root/kaniko/executor" github.com/GoogleContainerTools/kaniko/cmd/executor >&2
echo '{}' > "$tmp/root/kaniko/.docker/config.json"
cp /etc/ssl/certs/ca-certificates.crt "$tmp/root/etc/ssl/certs/" 2>/dev/null || true
mkdir -p "$out.tmp"
"$(mkbase_bin)" -desc "kaniko executor $KANIKO_VERSION" -rootfs "$tmp/root" -o "$out.tmp/layout" \
  -entrypoint /kaniko/executor -env PATH=/usr/local/bin:/kaniko:/bin -env HOME=/root \
  -env DOCKER_CONFIG=/kaniko/.docker/ -env SSL_CERT_DIR=/kaniko/ssl/certs >&2
cp "$tmp/root/kaniko/executor" "$out.tmp/executor"
rm -rf "$out"; mv "$out.tmp" "$out"
log "kaniko ready: $out"
echo "$out"
