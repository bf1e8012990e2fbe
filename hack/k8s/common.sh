# Shared by hack/k8s/*.sh: where the single-node cluster ("k1n") keeps its state, its fixed
# addresses, and small helpers. Source it; do not run it.
# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# All cluster state (PKI, etcd, containerd, kubelet, registry, logs, pid files) lives under $K1N.
K1N=${K1N:-$SLESS_CACHE/k1n}
K1N=$(realpath -m "$K1N")
case $K1N in *[[:space:]]*|/) die "K1N must be a directory path without spaces: '$K1N'";; esac
K8S_BIN=$SLESS_CACHE/k8s-$KUBERNETES_VERSION/bin   # hack/k8s/build.sh puts the binaries here

# The node is the host itself, reachable from pods at the bridge address. A dummy interface would
# be nicer, but this kernel has no dummy driver, and kubelet refuses a loopback node IP.
K1N_BRIDGE=k1n0
K1N_NODE_IP=10.88.0.1
K1N_POD_CIDR=10.88.0.0/16
K1N_SVC_CIDR=10.96.0.0/16
K1N_API_IP=10.96.0.1      # first service IP: the `kubernetes` Service
K1N_DNS_IP=10.96.0.10
K1N_API_PORT=6443
K1N_KUBELET_PORT=10250
K1N_NODE=k1n
PAUSE_TAG=pause:3.10
COREDNS_TAG=coredns:${COREDNS_VERSION#v}

# Start order; down.sh stops them in reverse groups.
K1N_COMPONENTS=(registry containerd etcd kube-apiserver kube-controller-manager kube-scheduler kube-router kubelet kube-proxy)

# Progress lines with tenths of a second (a bring-up takes ~15 s; whole seconds say too little).
_k1n_t0=${_k1n_t0:-$EPOCHREALTIME}
elapsed() { awk -v a="$_k1n_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
log() { printf '[%s +%5ss] %s\n' "$(basename "$0")" "$(elapsed)" "$*" >&2; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it sets up networking, mounts and cgroups)"; }

# pid_of NAME: the pid of a running component we started. The pid file alone is not enough (pids
# get reused): the process must still be the one whose command line names $K1N.
pid_of() {
  local f=$K1N/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$K1N/" || return 1
  echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }

# kubectl with the cluster's admin identity, and its discovery cache under $K1N rather than ~/.kube.
# One up.sh/down.sh at a time per state dir (tests may call up.sh concurrently: the second one
# waits, then finds the cluster up). up.sh runs down.sh itself with the lock held: K1N_LOCKED.
k1n_lock() {
  [ -z "${K1N_LOCKED:-}" ] || return 0
  mkdir -p "$K1N"
  exec 8> "$K1N/.lock"
  flock 8
  export K1N_LOCKED=1
}

kc() { "$K8S_BIN/kubectl" --kubeconfig "$K1N/admin.kubeconfig" --cache-dir "$K1N/kubectl-cache" "$@"; }
# Server-side apply without the client's OpenAPI download: 0.2 s instead of 1.5-3 s per call.
kc_apply() { kc apply --server-side --force-conflicts --validate=false "$@"; }
ctr_() { ctr --address "$K1N/containerd/containerd.sock" "$@"; }

api_ready() {
  [ -f "$K1N/pki/admin.crt" ] &&
  [ "$(curl -s -m 2 --cacert "$K1N/pki/ca.crt" --cert "$K1N/pki/admin.crt" --key "$K1N/pki/admin.key" \
        "https://$K1N_NODE_IP:$K1N_API_PORT/readyz" 2>/dev/null)" = ok ]
}

registry_addr() { echo "$K1N_NODE_IP:$(cat "$K1N/registry.port")"; }

# crane, built once into $SLESS_CACHE/bin like the other hack/ scripts do.
crane_bin() { go_install_cached crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"; }
