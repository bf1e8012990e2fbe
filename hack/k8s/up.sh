#!/usr/bin/env bash
# Brings up a real single-node Kubernetes ($KUBERNETES_VERSION) on this machine: containerd + runc
# from Debian, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
# kube-router (NetworkPolicy only), CoreDNS, a bridge CNI on 10.88.0.0/16, and the project's
# registry (token auth) on the bridge address so both the
# host and pods can use it. Needs root. Everything it writes lives under $K1N, except what kubelet,
# containerd and libcni hard-code (/var/log/containers, /run/containerd, /var/lib/kubelet/device-plugins,
# /var/lib/cni), kernel state (bridge, iptables, sysctls, cgroups) and the registry's port; host
# changes are recorded in $K1N/host/ and undone by hack/k8s/down.sh.
#
#   K1N=DIR               state directory (default $SLESS_CACHE/k1n)
#   K1N_REGISTRY_PORT=N   registry port on 10.88.0.1 (default: the previous one if free, else any free one)
#   K1N_KEEP_ON_FAILURE=1 leave a failed bring-up running for inspection (default: down.sh it)
#
# stdout: the admin kubeconfig path. Also written: $K1N/registry.port, $K1N/env (KUBECONFIG,
# K1N_REGISTRY=10.88.0.1:PORT). Images for pods are named 10.88.0.1:PORT/NAME:TAG. Running it when
# the cluster is already up is a no-op.
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
need_root
k1n_lock
HERE=$(cd "$(dirname "$0")" && pwd)

all_alive() { local c; for c in "${K1N_COMPONENTS[@]}"; do alive "$c" || return 1; done; }
# node_ready [SINCE]: Ready, reported by a kubelet heartbeat at or after SINCE (RFC 3339, UTC). After a
# restart etcd still holds the last run's Ready=True until the new kubelet reports.
node_ready() {
  local st
  st=$(kc get node "$K1N_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null) || return 1
  [ "${st%% *}" = True ] && [[ ! "${st#* }" < "${1:-}" ]]
}
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if all_alive && api_ready && node_ready ""; then
  log "already up"
  echo "$K1N/admin.kubeconfig"
  exit 0
fi
for c in "${K1N_COMPONENTS[@]}"; do
  if alive "$c"; then log "partially up ($c runs, the cluster is not healthy): stopping it first"; "$HERE/down.sh"; break; fi
done

# fail COMPONENT MESSAGE: say which component failed, show its log, undo the half bring-up.
fail() {
  _k1n_failing=1
  log "error: $1: $2"
  if [ -f "$K1N/logs/$1.log" ]; then
    echo "--- last 30 lines of $K1N/logs/$1.log" >&2
    tail -n 30 "$K1N/logs/$1.log" >&2
    echo "---" >&2
  fi
  if [ "${K1N_KEEP_ON_FAILURE:-}" = 1 ]; then
    log "left running (K1N_KEEP_ON_FAILURE=1); hack/k8s/down.sh cleans up"
  else
    log "stopping what was started (K1N_KEEP_ON_FAILURE=1 keeps it)"; "$HERE/down.sh" >&2 || true
  fi
  exit 1
}
# Anything else that fails (set -e) still cleans up, and says where.
set -E
trap '_k1n_line=$LINENO' ERR
# shellcheck disable=SC2154  # both are set inside the traps
trap 'rc=$?; [ $rc -eq 0 ] || [ -n "${_k1n_failing:-}" ] || fail up.sh "unexpected failure (exit $rc) near line ${_k1n_line:-?}"' EXIT

# start NAME CMD...: run a component detached (own session: a Ctrl-C or a test runner killing its
# process group must not take the cluster down), log to logs/NAME.log, pid to NAME.pid.
start() {
  local name=$1; shift
  setsid "$@" > "$K1N/logs/$name.log" 2>&1 < /dev/null 8>&- &   # 8: the lock, not theirs to hold
  local pid=$!
  echo $pid > "$K1N/$name.pid"
  disown   # not our job any more: no "Killed" notice when down.sh stops it
  # Until the fork has exec'd, its command line is this script's, which pid_of does not accept:
  # on a busy machine a readiness check right after start would take it for an exit.
  local i
  for i in $(seq 1 100); do
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$K1N/" && break
    [ -d "/proc/$pid" ] || break
    sleep 0.02
  done
}
# wait_until WHAT TIMEOUT "COMPONENTS" CMD...: poll CMD; fail fast if a component exits meanwhile.
wait_until() {
  local what=$1 timeout=$2 comps=$3 c; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    for c in $comps; do alive "$c" || fail "$c" "exited while waiting for: $what"; done
    [ $SECONDS -lt $deadline ] || fail "${comps%% *}" "timed out after ${timeout}s waiting for: $what"
    sleep 0.2
  done
  log "$what"
}
port_free() { ! ss -Hltn "( sport = :$1 )" | grep -q .; }
# choose_port NAME [WANTED]: WANTED, else the port used last time if still free (stable image names
# and etcd member URLs across restarts), else a free one.
choose_port() {
  local f=$K1N/$1.port p=${2:-}
  # Below the NodePort range (30000–32767), which kube-router lets pods reach on the node: a host
  # service there would be open to every pod whatever its NetworkPolicy says.
  if [ -z "$p" ] && [ -f "$f" ] && port_free "$(cat "$f")" && [ "$(cat "$f")" -lt 30000 ]; then p=$(cat "$f"); fi
  while [ -z "$p" ]; do p=$((20000 + RANDOM % 10000)); port_free "$p" || p=; done
  echo "$p" > "$f"; echo "$p"
}

mkdir -p "$K1N"/{bin,logs,host,manifests,images,pki,kubelet,podlogs,registry} \
  "$K1N"/containerd/{root,state,runc,opt,certs.d} "$K1N"/cni/{net.d,ipam}

# --- binaries: the cluster's (cached by build.sh), and sless for the registry, built in parallel.
log "binaries"
# Straight to the target: go skips the link when the binary there is up to date (and renames
# a new one into place, so it is never half written).
(cd "$ROOT_DIR" && go build -o "$K1N/bin/sless" ./cmd/sless) > "$K1N/logs/sless-build.log" 2>&1 &
sless_build=$!
"$HERE/build.sh" > /dev/null || fail build "hack/k8s/build.sh failed"
for b in "$K8S_BIN"/*; do ln -sfn "$b" "$K1N/bin/$(basename "$b")"; done   # kubectl etc. at $K1N/bin

# --- host state to restore later, recorded before anything changes it (kept until down.sh has
# restored it, so a second up.sh never records already-changed values).
if [ ! -f "$K1N/host/recorded" ]; then
  # kubelet (protectKernelDefaults=false), the bridge plugin (isGateway) and kube-proxy may set these.
  # ip_forward first: restoring it resets conf.*.forwarding and accept_redirects, recorded after it.
  for s in net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.default.forwarding \
           net.ipv4.conf.all.accept_redirects net.ipv4.conf.default.accept_redirects vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
           kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet \
           net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables \
           net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established \
           net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal; do
    v=$(sysctl -n "$s" 2>/dev/null) && echo "$s=$v"
  done > "$K1N/host/sysctl.orig"
  # Paths kubelet/containerd create outside $K1N whatever they are configured with (container log
  # links, shim sockets, libcni's result cache, kubelet's device-plugin socket); down.sh removes
  # them only if they did not exist before.
  for p in /var/log/containers /run/containerd /var/lib/cni /var/lib/kubelet /usr/libexec/kubernetes; do [ -e "$p" ] || echo "$p"; done > "$K1N/host/created"
  # Tables and KUBE-* chains that existed before, so down.sh removes only ours.
  nft list tables > "$K1N/host/nft.tables" 2>/dev/null || true
  for ipt in iptables ip6tables; do "$ipt-save" 2>/dev/null | awk -v f="$ipt" '/^\*/ {t=substr($0,2)} /^:KUBE-/ {print f, t, substr($1,2)}'; done > "$K1N/host/kube.chains"
  : > "$K1N/host/guard.rules"
  touch "$K1N/host/recorded"
fi

# --- the bridge, created before kubelet (it is the node IP) and before the registry (it listens on it).
if ! ip link show "$K1N_BRIDGE" >/dev/null 2>&1; then
  other=$(ip -4 route show "$K1N_POD_CIDR" | grep -v "dev $K1N_BRIDGE" || true)
  [ -z "$other" ] || fail up.sh "$K1N_POD_CIDR is already routed on this machine: $other"
  ip link add "$K1N_BRIDGE" type bridge
  ip addr add "$K1N_NODE_IP/16" dev "$K1N_BRIDGE"
  ip link set "$K1N_BRIDGE" up
fi

reg_port=$(choose_port registry "${K1N_REGISTRY_PORT:-}")
REG=$K1N_NODE_IP:$reg_port

# --- guard rules: pod traffic never leaves the machine, and the API, kubelet and registry ports are
# closed on the external interface(s) (those carrying a default route).
ext_ifs=$({ ip -4 -o route show default; ip -6 -o route show default; } |
  awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}' | sort -u)
if [ -z "$ext_ifs" ]; then
  ext_ifs=$(ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -vE "^(lo|$K1N_BRIDGE|veth.*)$" || true)
  log "no default route; guarding every interface: ${ext_ifs//$'\n'/ }"
fi
guard() {
  iptables -C "$@" 2>/dev/null && return 0
  iptables -I "$@"
  echo "$*" >> "$K1N/host/guard.rules"
}
for ifc in $ext_ifs; do
  guard FORWARD -s "$K1N_POD_CIDR" -o "$ifc" -m comment --comment k1n-guard -j DROP
  for port in "$K1N_API_PORT" "$K1N_KUBELET_PORT" "$reg_port"; do
    guard INPUT -i "$ifc" -p tcp --dport "$port" -m comment --comment k1n-guard -j DROP
  done
done
log "bridge $K1N_BRIDGE $K1N_NODE_IP/16, guard rules on ${ext_ifs//$'\n'/ }"

# --- the registry's keys (kept across runs: the install's Secret and every pull secret derive from
# them) and the node's credential, which containerd's config needs before it starts.
wait "$sless_build" || {
  [ -x "$K1N/bin/sless" ] || fail sless-build "go build ./cmd/sless failed"
  log "warning: go build ./cmd/sless failed (logs/sless-build.log); using the previous $K1N/bin/sless"
}
NODE_CRED=$("$K1N/bin/sless" registry credential --auth-dir "$K1N/registry-auth" --registry "$REG" node) || fail sless "sless registry credential failed"
read -r NODE_USER NODE_PASS < <(python3 -c 'import json,sys; a=list(json.loads(sys.argv[1])["auths"].values())[0]; print(a["username"], a["password"])' "$NODE_CRED")

# --- configuration files (rewritten every time: the registry port may differ).
# containerd: only what differs from its defaults. restrict_oom_score_adj is the one setting without
# which no pod starts here (no CAP_SYS_RESOURCE for negative oom_score_adj).
cat > "$K1N/containerd/config.toml" <<EOF
version = 2
root = "$K1N/containerd/root"
state = "$K1N/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$K1N/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$K1N/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$REG/$PAUSE_TAG"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K1N/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$K1N/containerd/runc"
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$K1N/containerd/certs.d"
  # The registry serves nothing anonymously: the node pulls system images (pause, coredns, the
  # operator) with its own pull-only credential; function pods bring their namespace's.
  [plugins."io.containerd.grpc.v1.cri".registry.configs."$REG".auth]
    username = "$NODE_USER"
    password = "$NODE_PASS"
EOF
chmod 600 "$K1N/containerd/config.toml"
# The registry speaks plain HTTP: tell CRI so (its default is https).
rm -rf "$K1N/containerd/certs.d"; mkdir -p "$K1N/containerd/certs.d/$REG"
cat > "$K1N/containerd/certs.d/$REG/hosts.toml" <<EOF
server = "http://$REG"
[host."http://$REG"]
  capabilities = ["pull", "resolve"]
EOF
# No ipMasq and no outside route: nothing from pods leaves the host (the guard rule makes sure).
cat > "$K1N/cni/net.d/10-k1n.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "k1n",
  "plugins": [{
    "type": "bridge", "bridge": "$K1N_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$K1N_POD_CIDR", "gateway": "$K1N_NODE_IP"}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$K1N/cni/ipam"}
  }]
}
EOF

# --- containerd and etcd first; the PKI (≈ 2 s from scratch) is made while they start.
start containerd containerd --config "$K1N/containerd/config.toml"
etcd_port=$(choose_port etcd); etcd_peer_port=$(choose_port etcd-peer)
start etcd etcd --name k1n --data-dir "$K1N/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "k1n=http://127.0.0.1:$etcd_peer_port" \
  --unsafe-no-fsync --quota-backend-bytes 2147483648

# --- PKI (once per state dir). EC keys: a tenth of the time of RSA, and every component takes them.
pki() {
  local d=$K1N/pki tmp; tmp=$(mktemp -d "$K1N/pki.tmp.XXXXXX")
  (
    cd "$tmp"
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
    key ca
    openssl req -x509 -new -key ca.key -subj /CN=k1n-ca -days 3650 -out ca.crt 2>/dev/null
    key sa; openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    # cert NAME SUBJECT [SANS]: a client cert, or a server+client cert when SANS is given.
    cert() {
      key "$1"
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "${3:-}" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$3"
        else echo "extendedKeyUsage=clientAuth"; fi; } > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver /CN=kube-apiserver "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$K1N_NODE_IP,IP:$K1N_API_IP"
    cert apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client
    cert admin /O=system:masters/CN=kubernetes-admin
    cert kube-controller-manager /CN=system:kube-controller-manager
    cert kube-scheduler /CN=system:kube-scheduler
    cert kube-proxy /CN=system:kube-proxy
    cert kubelet "/O=system:nodes/CN=system:node:$K1N_NODE"
    cert kubelet-serving "/CN=$K1N_NODE" "DNS:$K1N_NODE,DNS:localhost,IP:$K1N_NODE_IP,IP:127.0.0.1"
  ) || true   # (set -e does not apply inside a `||`): check the result instead
  local f
  for f in ca sa apiserver apiserver-kubelet-client admin kube-controller-manager kube-scheduler kube-proxy kubelet kubelet-serving; do
    if [ ! -s "$tmp/$f.key" ] || { [ "$f" != sa ] && [ ! -s "$tmp/$f.crt" ]; }; then
      rm -rf "$tmp"; fail up.sh "creating the PKI failed ($f)"
    fi
  done
  rm -rf "$d"; mv "$tmp" "$d"
}
[ -f "$K1N/pki/kubelet-serving.crt" ] || pki
b64() { base64 -w0 < "$1"; }
for who in admin kube-controller-manager kube-scheduler kubelet kube-proxy; do
  cat > "$K1N/$who.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: k1n
  cluster:
    server: https://$K1N_NODE_IP:$K1N_API_PORT
    certificate-authority-data: $(b64 "$K1N/pki/ca.crt")
users:
- name: $who
  user:
    client-certificate-data: $(b64 "$K1N/pki/$who.crt")
    client-key-data: $(b64 "$K1N/pki/$who.key")
contexts:
- name: k1n
  context: {cluster: k1n, user: $who}
current-context: k1n
EOF
done
printf 'export KUBECONFIG=%s\nexport K1N_REGISTRY=%s\n' "$K1N/admin.kubeconfig" "$REG" > "$K1N/env"

cat > "$K1N/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $K1N_NODE_IP
port: $K1N_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$K1N/containerd/containerd.sock
podLogsDir: $K1N/podlogs
tlsCertFile: $K1N/pki/kubelet-serving.crt
tlsPrivateKeyFile: $K1N/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $K1N/pki/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [$K1N_DNS_IP]
resolvConf: /etc/resolv.conf
# A pod's processes are bounded: a fork bomb in one tenant's pod cannot exhaust the node's pids
# (Kubernetes has no per-pod pids field; a cluster running sless sets this).
podPidsLimit: 256
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
EOF
sed "s|@IMAGE@|$REG/$COREDNS_TAG|; s|@DNS_IP@|$K1N_DNS_IP|" "$HERE/coredns.yaml" > "$K1N/manifests/coredns.yaml"
log "PKI, kubeconfigs and configs in $K1N"

wait_until "containerd" 30 containerd ctr_ version
wait_until "etcd on 127.0.0.1:$etcd_port" 30 etcd curl -sf "http://127.0.0.1:$etcd_port/health"

# --- the apiserver; the registry comes up while it starts (the sless build may still be linking),
# and only kubelet needs the registry's images.
P=$K1N/pki
# Bound to the bridge address only: the host reaches it there, pods through the `kubernetes`
# Service (advertise address); the guard rule covers traffic routed to it from outside anyway.
start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address="$K1N_NODE_IP" --advertise-address="$K1N_NODE_IP" --secure-port="$K1N_API_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range="$K1N_SVC_CIDR" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
  --profiling=false -v=1

# Token auth, sless the issuer on the same address: the realm is http://$REG/token, which
# containerd on the node reaches (no cluster DNS there). config.json: the platform's credential,
# for crane and the install scripts (DOCKER_CONFIG=$K1N/registry-auth).
start registry "$K1N/bin/sless" registry --listen "$REG" --root "$K1N/registry" --auth-dir "$K1N/registry-auth" \
  --write-docker-config "$K1N/registry-auth/config.json"
registry_challenges() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$REG/v2/")" = 401 ]; }
wait_until "registry on http://$REG" 30 registry registry_challenges

# push_images: pause and coredns into the registry (once per binary version), then into containerd
# while the apiserver is still starting, so the first pods do not wait for pulls (≈ 2 s from scratch).
push_images() {
  local crane stamp want name tag
  crane=$(crane_bin)
  want="$(cat "$K8S_BIN/.pause.key" "$K8S_BIN/.coredns.key")"
  stamp=$K1N/registry/.k1n-images
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    for name in pause coredns; do
      case $name in pause) tag=$PAUSE_TAG;; coredns) tag=$COREDNS_TAG;; esac
      # A one-file layer onto an empty base: no Docker Hub, no base image.
      tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$K8S_BIN" -cf "$K1N/images/$name.tar" "$name"
      DOCKER_CONFIG=$K1N/registry-auth "$crane" append --insecure -f "$K1N/images/$name.tar" -t "$REG/$tag"
      DOCKER_CONFIG=$K1N/registry-auth "$crane" mutate --insecure --set-platform linux/amd64 --entrypoint "/$name" "$REG/$tag" -t "$REG/$tag"
    done
    echo "$want" > "$stamp"
  fi
  for tag in "$PAUSE_TAG" "$COREDNS_TAG"; do
    ctr_ -n k8s.io images pull --plain-http --user "$NODE_USER:$NODE_PASS" "$REG/$tag" >/dev/null || echo "pre-pull of $REG/$tag failed; kubelet will pull it"
  done
}
push_images > "$K1N/logs/images.log" 2>&1 &
images_push=$!

wait_until "kube-apiserver ready on https://$K1N_NODE_IP:$K1N_API_PORT" 120 "kube-apiserver etcd" api_ready

# --- controllers, scheduler, kube-proxy; kubelet once the pause image is in the registry.
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig="$K1N/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$K1N/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$K1N/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10257 \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --use-service-account-credentials=true --service-cluster-ip-range="$K1N_SVC_CIDR" \
  --kube-api-qps=200 --kube-api-burst=400 --leader-elect=false -v=1
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$K1N/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$K1N/kube-scheduler.kubeconfig" --authorization-kubeconfig="$K1N/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false -v=1
# NodePorts only on the bridge address, never on the external interface.
start kube-proxy "$K8S_BIN/kube-proxy" --kubeconfig="$K1N/kube-proxy.kubeconfig" --hostname-override="$K1N_NODE" \
  --proxy-mode=iptables --cluster-cidr="$K1N_POD_CIDR" --nodeport-addresses="$K1N_POD_CIDR" \
  --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
  --iptables-localhost-nodeports=false \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 -v=1
wait "$images_push" || fail images "pushing the pause/coredns images to $REG failed"
log "images $REG/$PAUSE_TAG, $REG/$COREDNS_TAG"
start kubelet "$K8S_BIN/kubelet" --config="$K1N/kubelet-config.yaml" \
  --kubeconfig="$K1N/kubelet.kubeconfig" --root-dir="$K1N/kubelet" \
  --hostname-override="$K1N_NODE" --node-ip="$K1N_NODE_IP" --volume-plugin-dir="$K1N/kubelet/volume-plugins" -v=2

# CoreDNS goes in right away (kube-system may take a moment to exist); it schedules once the node
# is Ready and untainted.
wait_until "coredns applied" 30 kube-apiserver kc_apply -f "$K1N/manifests/coredns.yaml"
ALL="kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy containerd etcd registry"
wait_until "node $K1N_NODE Ready" 120 "$ALL" node_ready "$started"
# NetworkPolicy: kube-router's policy controller alone (iptables + ipset). It needs the Node object,
# so it starts once kubelet has registered it; only CoreDNS runs by then, and it covers running
# pods at its first sync. The admin kubeconfig: a test cluster's shortcut.
start kube-router "$K8S_BIN/kube-router" --run-firewall=true --run-router=false --run-service-proxy=false \
  --enable-cni=false --enable-pod-egress=false --hostname-override="$K1N_NODE" --kubeconfig="$K1N/admin.kubeconfig" \
  --health-port=0 --metrics-port=0 --iptables-sync-period=1m -v=1
ALL="$ALL kube-router"
policies_synced() { grep -q "sync iptables took" "$K1N/logs/kube-router.log"; }
wait_until "network policies enforced (kube-router)" 60 "$ALL" policies_synced
untainted() { [ -z "$(kc get node "$K1N_NODE" -o jsonpath='{.spec.taints}')" ]; }
wait_until "node untainted" 120 "$ALL" untainted
wait_until "default service account" 60 "kube-controller-manager $ALL" kc get serviceaccount default -n default
# A CoreDNS container started by this run's kubelet and Ready (the Deployment's status may be stale).
coredns_ready() {
  kc -n kube-system get pods -l k8s-app=kube-dns \
    -o jsonpath='{range .items[*]}{.status.containerStatuses[0].ready} {.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}' |
    awk -v s="$started" '$1 == "true" && $2 >= s {ok = 1} END {exit !ok}'
}
wait_until "coredns ready" 120 "$ALL" coredns_ready
log "cluster up: KUBECONFIG=$K1N/admin.kubeconfig, registry $REG"
echo "$K1N/admin.kubeconfig"
