#!/usr/bin/env bash
# Builds envtest's assets, which cannot be downloaded here: kube-apiserver from the Go module proxy
# (a throwaway module requiring k8s.io/kubernetes with every k8s.io/<staging> module replaced by its
# v0.Y.Z release) and etcd from Debian's etcd-server. Prints the directory for KUBEBUILDER_ASSETS.
. "$(dirname "$0")/lib.sh"
out="$SLESS_CACHE/envtest-$KUBERNETES_VERSION"
if [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ]; then echo "$out"; exit 0; fi
command -v etcd >/dev/null || { SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo; $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server >&2; }
# Debian starts an etcd service on :2379; tests never use it.
tmp=$(mktemp -d "$SLESS_CACHE/tmp.envtest.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
log "building kube-apiserver $KUBERNETES_VERSION from the Go module proxy (≈ 9 min the first time)"
cd "$tmp"
go mod init envtestbuild >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@$KUBERNETES_VERSION"
modfile=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
for m in $(awk '$1 ~ /^k8s.io\// && $2 == "v0.0.0" {print $1}' "$modfile" | sort -u); do
  go mod edit -replace="$m=$m@$KUBERNETES_STAGING_VERSION"
done
printf 'package main\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools.go
GOFLAGS=-mod=mod go mod tidy >&2 || true
mkdir -p "$out.tmp"
v=$KUBERNETES_VERSION
GOFLAGS=-mod=mod CGO_ENABLED=0 go build -o "$out.tmp/kube-apiserver" \
  -ldflags "-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" \
  k8s.io/kubernetes/cmd/kube-apiserver >&2
cp "$(command -v etcd)" "$out.tmp/etcd"
rm -rf "$out"; mv "$out.tmp" "$out"
log "envtest assets ready: $out"
echo "$out"
