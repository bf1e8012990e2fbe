#!/usr/bin/env bash
# Quick end-to-end check of the running hack/k8s cluster, for tests and by hand: builds a tiny static
# HTTP server (hack/k8s/smoke) into an image on an empty base, pushes it to the cluster registry,
# runs it as a Deployment behind a Service, curls the pod IP and the ClusterIP from the host, runs a
# Job that fetches the Service by its DNS name from inside the cluster, and
# deletes its namespace (without waiting for it to be gone).
#
#   K1N=DIR    state directory of the cluster (default $SLESS_CACHE/k1n)
#
# stdout: one line of timings. Exit status 1 (with pod status and events) if any step fails.
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
{ api_ready && [ -f "$K1N/registry.port" ]; } || die "the cluster is not up (hack/k8s/up.sh)"
REG=$(registry_addr)
ns=k1n-smoke-$(date +%s)-$$
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$EPOCHREALTIME

failed() {
  log "FAILED: $*"
  { kc -n "$ns" get all -o wide; kc -n "$ns" describe pods | tail -n 40
    kc -n "$ns" get events --sort-by=.lastTimestamp | tail -n 20; } >&2 2>/dev/null || true
  kc delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  exit 1
}

# 1. Image: the binary as the only layer of an empty image, tagged by content.
t=$EPOCHREALTIME
img_dir=$K1N/images/smoke
mkdir -p "$img_dir"
(cd "$ROOT_DIR" && CGO_ENABLED=0 go build -ldflags '-s -w' -o "$img_dir/smoke" ./hack/k8s/smoke) || die "building hack/k8s/smoke failed"
IMAGE=$REG/k1n-smoke:$(sha256sum < "$img_dir/smoke" | cut -c1-12)
crane=$(crane_bin)
if ! DOCKER_CONFIG=$K1N/registry-auth "$crane" digest --insecure "$IMAGE" >/dev/null 2>&1; then
  tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$img_dir" -cf "$img_dir/layer.tar" smoke
  { DOCKER_CONFIG=$K1N/registry-auth "$crane" append --insecure -f "$img_dir/layer.tar" -t "$IMAGE" &&
    DOCKER_CONFIG=$K1N/registry-auth "$crane" mutate --insecure --set-platform linux/amd64 --entrypoint /smoke "$IMAGE" -t "$IMAGE"; } \
    > "$img_dir/push.log" 2>&1 || { cat "$img_dir/push.log" >&2; die "pushing $IMAGE failed"; }
fi
t_image=$(since "$t")
log "image $IMAGE (${t_image}s)"

# 2. Deployment + Service, until Ready.
t=$EPOCHREALTIME
kc create namespace "$ns" >/dev/null
kc_apply -n "$ns" -f - >/dev/null <<EOF || failed "apply"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: web
        image: $IMAGE
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
kc -n "$ns" rollout status deploy/web --timeout=120s >/dev/null || failed "Deployment not Ready in 120s"
t_deploy=$(since "$t")
log "Deployment Ready (${t_deploy}s after apply)"

# 3. From the host: the pod IP over the bridge, and the ClusterIP through kube-proxy's rules.
pod_ip=$(kc -n "$ns" get pod -l app=web -o jsonpath='{.items[0].status.podIP}')
out=$(curl -sf -m 5 "http://$pod_ip:8080/") || failed "curl http://$pod_ip:8080/ from the host"
log "host -> pod $pod_ip:8080: $out"
svc_ip=$(kc -n "$ns" get svc web -o jsonpath='{.spec.clusterIP}')
for ((i = 0; ; i++)); do
  out=$(curl -sf -m 2 "http://$svc_ip/") && break
  [ $i -lt 50 ] || failed "curl http://$svc_ip/ (ClusterIP) from the host"
  sleep 0.2
done
log "host -> Service $svc_ip:80: $out"

# 4. A Job: DNS (CoreDNS), Service routing and pod-to-pod traffic from inside the cluster.
t=$EPOCHREALTIME
kc_apply -n "$ns" -f - >/dev/null <<EOF || failed "apply Job"
apiVersion: batch/v1
kind: Job
metadata: {name: check}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      containers:
      - name: check
        image: $IMAGE
        args: [get, "http://web.$ns.svc.cluster.local/"]
EOF
for ((i = 0; ; i++)); do
  st=$(kc -n "$ns" get job check -o jsonpath='{.status.succeeded}/{.status.failed}')
  [ "$st" = "1/" ] && break
  [ "${st#*/}" = "" ] || failed "Job failed: $(kc -n "$ns" logs job/check 2>&1)"
  [ $i -lt 600 ] || failed "Job not complete in 120s"
  sleep 0.2
done
t_job=$(since "$t")
log "Job complete (${t_job}s after apply): $(kc -n "$ns" logs job/check)"

# 5. Clean up. Not waited for: the namespace controller always waits 5 s before deleting a
# namespace's content (so admission caches see it terminating); that is not worth a test's time.
t=$EPOCHREALTIME
kc delete namespace "$ns" --wait=false >/dev/null || failed "deleting namespace $ns"
t_clean=$(since "$t")
log "namespace $ns deleting (in the background)"
echo "smoke ok: image ${t_image}s, deployment ready ${t_deploy}s, job ${t_job}s, cleanup ${t_clean}s, total $(since "$t_all")s"
