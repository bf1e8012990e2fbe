#!/usr/bin/env bash
# Stops the hack/k8s cluster and undoes every host change up.sh and its components made: processes
# (by recorded pid only; other containers on this machine are left alone), pod processes and our
# containerd's shims, mounts under $K1N, iptables rules and chains, the k1n0 bridge and its veths,
# kubepods cgroups, sysctls, and the paths outside $K1N that kubelet/containerd hard-code (only if
# up.sh saw them absent). Safe to run when nothing runs.
#
#   hack/k8s/down.sh [--wipe]    --wipe also deletes the cluster state (everything in $K1N but bin/)
#   K1N=DIR                      state directory (default $SLESS_CACHE/k1n)
#
# Fast on purpose (no graceful pod deletion): kubelet goes first, then pod processes are killed
# through their cgroups, so pods come back on the next up.sh unless --wipe.
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
need_root
k1n_lock
set +e   # best effort from here on: one failed step must not leave the rest undone
wipe=
case ${1:-} in --wipe) wipe=1;; "") ;; *) die "usage: $0 [--wipe]";; esac
rc=0
warn() { log "warning: $*"; rc=1; }

# stop WAIT NAME...: SIGTERM, up to WAIT tenths of a second, then SIGKILL; all named at once.
stop() {
  local c pid pids=() i wait=$1; shift
  for c in "$@"; do
    if pid=$(pid_of "$c"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  for ((i = 0; i < wait && ${#pids[@]} > 0; i++)); do
    local left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    pids=("${left[@]}")
    [ ${#pids[@]} -eq 0 ] || sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for c in "$@"; do rm -f "$K1N/$c.pid"; done
}

# 1. Everything that would restart or reconcile pods. None of them keeps state worth a graceful
# stop (that is etcd's job), so they get one second.
stop 10 kubelet kube-proxy kube-router kube-controller-manager kube-scheduler
log "kubelet, kube-proxy, kube-router, controllers stopped"

# 2. Pod processes: every process in a kubepods cgroup is one of this cluster's containers. Killing
# them directly skips graceful deletion (tens of seconds) and needs no API.
cgroup_pids() {
  local d
  for d in /sys/fs/cgroup/*/kubepods; do [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} +; done 2>/dev/null | sort -u
}
for ((i = 0; i < 20; i++)); do
  mapfile -t pp < <(cgroup_pids)
  [ ${#pp[@]} -gt 0 ] || break
  kill -KILL "${pp[@]}" 2>/dev/null || true
  sleep 0.1
done
[ ${#pp[@]} -eq 0 ] || warn "pod processes left: ${pp[*]}"

# 3. The rest of the control plane and the runtime (the apiserver before etcd: without etcd its
# graceful shutdown hangs; with it, it still takes ~5 s, and it has no state of its own).
# containerd leaves its shims running by design.
stop 10 kube-apiserver registry
stop 50 containerd etcd
for pid in $(ps -eo pid=,args= | awk -v a="-address $K1N/containerd/containerd.sock" 'index($0, a) && /containerd-shim/ {print $1}'); do
  kill -KILL "$pid" 2>/dev/null || true
done
log "control plane, containerd, registry and shims stopped"

# 4. Mounts under $K1N (container rootfs, shm, netns, pod volumes, kubelet's rshared root), deepest first.
for ((i = 0; i < 3; i++)); do
  mapfile -t mnts < <(findmnt -rn -o TARGET | awk -v p="$K1N/" 'index($0, p) == 1' | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-)
  [ ${#mnts[@]} -gt 0 ] || break
  for m in "${mnts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
done
leftover=$(findmnt -rn -o TARGET | awk -v p="$K1N/" 'index($0, p) == 1' || true)
[ -z "$leftover" ] || warn "mounts left under $K1N: $leftover"

# 5. iptables: kube-proxy's rules, the KUBE-* chains kubelet creates (KUBE-FIREWALL, canaries,
# hint), our guard rules, and the tables that only exist because of all that.
if [ -x "$K8S_BIN/kube-proxy" ]; then "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
for ipt in iptables ip6tables; do
  for t in filter nat mangle raw; do
    rules=$("$ipt" -t "$t" -S 2>/dev/null) || continue
    mine=$(awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}' <<< "$rules" | while read -r ch; do
      grep -qx "$ipt $t $ch" "$K1N/host/kube.chains" 2>/dev/null || echo "$ch"   # else not ours
    done | tr '\n' ' ')
    [ -n "${mine// /}" ] || continue
    # Unhook them from the other chains: rule numbers from -S order, deleted bottom up.
    awk -v mine="$mine" 'BEGIN { n = split(mine, a, " "); for (i = 1; i <= n; i++) m[a[i]] = 1 }
      $1 == "-A" { c[$2]++; if (!($2 in m)) for (i = 3; i < NF; i++) if (($i == "-j" || $i == "-g") && ($(i + 1) in m)) print $2, c[$2] }' \
      <<< "$rules" | sort -k1,1 -k2,2rn | while read -r from n; do "$ipt" -t "$t" -D "$from" "$n"; done
    for ch in $mine; do "$ipt" -t "$t" -F "$ch"; done
    for ch in $mine; do "$ipt" -t "$t" -X "$ch" || warn "$ipt -t $t: cannot delete chain $ch"; done
  done
done
# kube-router's ipsets (KUBE-SRC-…, KUBE-DST-…, inet6:…), free once the rules above are gone.
if command -v ipset >/dev/null; then
  for set in $(ipset list -n 2>/dev/null | grep -E '^(inet6:)?KUBE-'); do ipset destroy "$set" 2>/dev/null || warn "cannot destroy ipset $set"; done
fi
if [ -f "$K1N/host/guard.rules" ]; then
  while read -r -a rule; do
    [ ${#rule[@]} -gt 0 ] || continue
    while iptables -D "${rule[@]}" 2>/dev/null; do :; done
  done < "$K1N/host/guard.rules"
fi
# iptables-nft creates a table on first use; drop the ones that were absent before and are now
# down to empty built-in chains with ACCEPT policies.
if [ -f "$K1N/host/nft.tables" ] && command -v nft >/dev/null; then
  while read -r _ fam tbl; do
    grep -qx "table $fam $tbl" "$K1N/host/nft.tables" && continue
    case $fam in ip) ipt=iptables;; ip6) ipt=ip6tables;; *) continue;; esac
    case $tbl in filter|nat|mangle|raw|security) ;; *) continue;; esac
    if ! "$ipt" -t "$tbl" -S 2>/dev/null | grep -qv -- '^-P [A-Z]* ACCEPT$'; then
      nft delete table "$fam" "$tbl" || warn "cannot delete nft table $fam $tbl"
    fi
  done < <(nft list tables 2>/dev/null)
fi
log "iptables cleaned"

# 6. Network: the veths on our bridge (their pods are gone), then the bridge.
for v in $(ip -o link show master "$K1N_BRIDGE" 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}'); do
  ip link del "$v" 2>/dev/null || true
done
ip link del "$K1N_BRIDGE" 2>/dev/null || true

# 7. kubepods cgroups (kubelet creates them in every hierarchy, runc adds per-pod/container ones).
for c in /sys/fs/cgroup/*/kubepods; do
  find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  [ ! -d "$c" ] || warn "cgroup $c is still there"
done

# 8. sysctls back to what up.sh recorded, and paths outside $K1N that we created.
if [ -f "$K1N/host/sysctl.orig" ]; then
  while IFS='=' read -r k v; do
    [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -qw "$k=$v" || warn "cannot restore $k=$v"
  done < "$K1N/host/sysctl.orig"
fi
if [ -f "$K1N/host/created" ]; then
  while read -r p; do [ -n "$p" ] && rm -rf --one-file-system "$p"; done < "$K1N/host/created"
fi
[ $rc -ne 0 ] || rm -rf "$K1N/host"   # all undone: the next up.sh records afresh
rm -rf "$K1N/cni/ipam"                 # every address it holds belonged to a killed pod
log "host restored"

if [ -n "$wipe" ]; then
  # Never recurse into a mount (a leftover bind mount could lead into host data).
  if [ -n "$(findmnt -rn -o TARGET | awk -v p="$K1N/" 'index($0, p) == 1')" ]; then
    die "not wiping: mounts remain under $K1N"
  fi
  find "$K1N" -mindepth 1 -maxdepth 1 ! -name bin ! -name .lock -exec rm -rf --one-file-system {} +
  log "state wiped ($K1N/bin kept)"
fi
exit $rc
