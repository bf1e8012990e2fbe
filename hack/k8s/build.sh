#!/usr/bin/env bash
# Builds everything the single-node cluster of hack/k8s/up.sh runs, none of which can be downloaded
# as a release here: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
# kubectl from the Go module proxy (same throwaway-module trick as hack/build-envtest.sh), CoreDNS
# with a minimal plugin set, and the pod sandbox's pause (hack/k8s/pause). Also installs the Debian
# packages the node needs. Prints the bin dir on stdout.
#
#   hack/k8s/build.sh            K1N_BUILD_JOBS=2 (parallel builds; 2 cores here, tests run alongside)
#
# Cache: $SLESS_CACHE/k8s-$KUBERNETES_VERSION/{bin,src,logs}. Each binary is linked into a temp dir
# and renamed into bin/ only when complete; bin/.NAME.key records what it was built from (versions,
# ldflags, source hash), so a run with everything cached does no go invocation at all.
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"

K8S_DIR=$SLESS_CACHE/k8s-$KUBERNETES_VERSION
BIN=$K8S_DIR/bin
JOBS=${K1N_BUILD_JOBS:-2}
mkdir -p "$BIN" "$K8S_DIR/src" "$K8S_DIR/logs"
# One build at a time per cache dir (up.sh calls this script; two up.sh runs must not race).
exec 9>"$K8S_DIR/.lock"
flock 9

# --- Debian packages: containerd, runc, conntrack (kube-proxy), CNI plugins, etcd, ...
missing=()
for p in $K1N_APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  log "installing Debian packages: ${missing[*]}"
  # No systemd here, so the containerd/etcd services the packages enable never start.
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    > "$K8S_DIR/logs/apt.log" 2>&1 || { tail -n 30 "$K8S_DIR/logs/apt.log" >&2; die "apt-get install failed"; }
fi

V=$KUBERNETES_VERSION
minor=${V#v*.}; minor=${minor%%.*}
major=${V#v}; major=${major%%.*}

# --- The throwaway module requiring k8s.io/kubernetes, kept in src/kubernetes for later runs.
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...) at v0.0.0 and
# replaces them with ./staging paths, which a dependent module cannot see: replace each with its
# published v0.Y.Z instead.
k8s_module() {
  local dir=$K8S_DIR/src/kubernetes
  [ -f "$dir/.ready" ] && return 0
  local tmp; tmp=$(mktemp -d "$K8S_DIR/src/kubernetes.tmp.XXXXXX")
  log "preparing the k8s.io/kubernetes@$V module"
  (
    cd "$tmp"
    go mod init k1nbuild >/dev/null 2>&1
    go mod edit -require="k8s.io/kubernetes@$V"
    modfile=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$V" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [ -f "$modfile" ] || { echo "no go.mod for k8s.io/kubernetes@$V" >&2; exit 1; }
    for m in $(awk '$1 ~ /^k8s.io\// && $2 == "v0.0.0" {print $1}' "$modfile" | sort -u); do
      go mod edit -replace="$m=$m@$KUBERNETES_STAGING_VERSION"
    done
    # A tools-tagged file pins the commands' dependencies for `go mod tidy` without being built.
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
        printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"
      done
      printf ')\n'
    } > tools.go
    GOFLAGS=-mod=mod go mod tidy
  ) > "$K8S_DIR/logs/kubernetes-module.log" 2>&1 || {
    tail -n 30 "$K8S_DIR/logs/kubernetes-module.log" >&2; rm -rf "$tmp"; die "preparing the k8s.io/kubernetes module failed"; }
  touch "$tmp/.ready"
  rm -rf "$dir"; mv "$tmp" "$dir"
}

# --- CoreDNS as its own module with only the plugins the cluster's Corefile uses (no forward:
# pods get no outside DNS on purpose).
coredns_module() {
  local dir=$K8S_DIR/src/coredns-$COREDNS_VERSION
  [ -f "$dir/.ready" ] && return 0
  local tmp; tmp=$(mktemp -d "$K8S_DIR/src/coredns.tmp.XXXXXX")
  cat > "$tmp/main.go" <<'EOF'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	"github.com/coredns/coredns/coremain"
)

// The order plugins run in; upstream generates this list from plugin.cfg.
func init() {
	dnsserver.Directives = []string{"errors", "log", "health", "ready", "kubernetes", "cache", "loadbalance"}
}

func main() { coremain.Run() }
EOF
  (
    cd "$tmp"
    go mod init k1ncoredns >/dev/null 2>&1
    go mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION"
    GOFLAGS=-mod=mod go mod tidy
  ) >> "$1" 2>&1 || { rm -rf "$tmp"; return 1; }
  touch "$tmp/.ready"
  rm -rf "$dir"; mv "$tmp" "$dir"
}

LD_VERSION="-X k8s.io/component-base/version.gitVersion=$V -X k8s.io/component-base/version.gitMajor=$major"
LD_VERSION+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
LD_VERSION+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
LD_VERSION+=" -X k8s.io/client-go/pkg/version.gitVersion=$V -X k8s.io/client-go/pkg/version.gitMajor=$major"
LD_VERSION+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
# Without these ldflags everything reports v0.0.0-master+$Format:%H$ and kubectl's version check
# fails. CGO_ENABLED=0 and no -trimpath: the same compile cache keys as build-envtest.sh's
# kube-apiserver, so its packages are reused.
K8S_LDFLAGS="-s -w $LD_VERSION"
pause_src=$ROOT_DIR/hack/k8s/pause/main.go

key_of() {
  case $1 in
    coredns) echo "coredns $COREDNS_VERSION" ;;
    kube-router) echo "kube-router $KUBE_ROUTER_VERSION" ;;
    pause) echo "pause $(sha256sum < "$pause_src" | cut -c1-16)" ;;
    *) echo "$1 $V $KUBERNETES_STAGING_VERSION $K8S_LDFLAGS" ;;
  esac
}
cached() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.key" 2>/dev/null)" = "$(key_of "$1")" ]; }

# build NAME: one component into a temp dir, renamed into bin/ on success. Runs as a background job.
build() {
  local name=$1 s; s=$(date +%s)
  local tmp; tmp=$(mktemp -d "$K8S_DIR/tmp.$name.XXXXXX")
  local blog=$K8S_DIR/logs/build-$name.log
  : > "$blog"
  log "$name: building"
  local rc=0
  case $name in
    pause)
      (cd "$ROOT_DIR" && CGO_ENABLED=0 go build -ldflags '-s -w' -o "$tmp/$name" ./hack/k8s/pause) >> "$blog" 2>&1 || rc=$? ;;
    kube-router)
      # Its go.mod has no replace directives: go install of the command at its version works.
      (cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$tmp" go install -ldflags '-s -w' \
        "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION") >> "$blog" 2>&1 || rc=$? ;;
    coredns)
      { coredns_module "$blog" &&
        (cd "$K8S_DIR/src/coredns-$COREDNS_VERSION" &&
         CGO_ENABLED=0 GOFLAGS=-mod=mod go build -ldflags '-s -w' -o "$tmp/$name" .) >> "$blog" 2>&1; } || rc=$? ;;
    *)
      (cd "$K8S_DIR/src/kubernetes" &&
       CGO_ENABLED=0 GOFLAGS=-mod=mod go build -ldflags "$K8S_LDFLAGS" -o "$tmp/$name" "k8s.io/kubernetes/cmd/$name") >> "$blog" 2>&1 || rc=$? ;;
  esac
  if [ $rc -eq 0 ] && [ -x "$tmp/$name" ]; then
    mv -f "$tmp/$name" "$BIN/$name"
    key_of "$name" > "$BIN/.$name.key"
    rm -rf "$tmp"
    log "$name: built in $(( $(date +%s) - s ))s"
  else
    rm -rf "$tmp"
    log "$name: FAILED after $(( $(date +%s) - s ))s; last lines of $blog:"
    tail -n 30 "$blog" >&2
    return 1
  fi
}

# Longest builds first, so two workers finish close together.
all=(coredns kubelet kube-controller-manager kubectl kube-apiserver kube-router kube-proxy kube-scheduler pause)
todo=()
for c in "${all[@]}"; do
  if cached "$c"; then log "$c: cached"; else todo+=("$c"); fi
done
if [ ${#todo[@]} -gt 0 ]; then
  for c in "${todo[@]}"; do
    case $c in coredns|pause|kube-router) ;; *) k8s_module; break ;; esac
  done
  rm -rf "$K8S_DIR"/tmp.*   # leftovers of an interrupted run
  failed=0 running=0
  for c in "${todo[@]}"; do
    if [ $running -ge "$JOBS" ]; then
      wait -n || failed=$((failed + 1)); running=$((running - 1))
    fi
    build "$c" & running=$((running + 1))
  done
  while [ $running -gt 0 ]; do wait -n || failed=$((failed + 1)); running=$((running - 1)); done
  [ $failed -eq 0 ] || die "$failed component(s) failed to build (logs in $K8S_DIR/logs)"
fi
log "all binaries ready in $BIN"
echo "$BIN"
