#!/usr/bin/env bash
# Installs sless into the k1n cluster the way a user would: the operator's image built by our own
# builder (hack/operator-image: static binaries appended onto an empty base, no Dockerfile) and
# pushed to the cluster's registry, the runtime images built with `sless runtime build` on the
# Debian bases, the secrets the install manifest expects, and operator/config/ applied with
# `kubectl apply -k` through an overlay that sets the image and the configuration. The REST API and
# /fn/ are published on a NodePort of the node address (10.88.0.1), reachable from the host.
#
# Needs a running cluster (hack/k8s/up.sh) and, in the environment:
#   SLESS_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  the code store (reachable from pods)
#   SLESS_JWT_PUBLIC_KEY   PEM file: the API verifies RS256/ES256 tokens with it
# and optionally SLESS_S3_BUCKET (sless-code), SLESS_NPM_REGISTRY, SLESS_PIP_INDEX_URL,
# SLESS_DEPS_EGRESS, SLESS_DATABASE_URL (PostgreSQL for the invocation history; reachable from pods),
# SLESS_FUNCTION_REGISTRY (host:port the platform pushes function images to and tenant pods pull
# them from, if not the registry's own address: the e2e puts a fault-injecting proxy there, which
# containerd must know as plain HTTP), SLESS_CLUSTER_CIDRS (the cluster's pod, Service and node
# ranges tenant code never reaches; default: this cluster's K1N_POD_CIDR, K1N_SVC_CIDR and node
# address; set it empty for an install that names none), SLESS_EGRESS_DENY, SLESS_EGRESS_DEFAULT
# (internet), SLESS_EGRESS_ALLOW ([NAMESPACE=]CIDR:PORT, comma-separated), SLESS_BLOCK_RUNTIMES
# (runtime names, comma-separated: the API's --block-runtime). Writes $K1N/sless.env (SLESS_ENDPOINT, REGISTRY, OPERATOR_IMAGE, RUNTIME_*)
# and prints SLESS_ENDPOINT.
. "$(dirname "$0")/common.sh"
: "${SLESS_S3_ENDPOINT:?}" "${AWS_ACCESS_KEY_ID:?}" "${AWS_SECRET_ACCESS_KEY:?}" "${SLESS_JWT_PUBLIC_KEY:?}"
api_ready || die "the cluster is not up (hack/k8s/up.sh)"
cd "$ROOT_DIR"
REG=$(registry_addr)
FNREG=${SLESS_FUNCTION_REGISTRY:-$REG}
CRANE=$(crane_bin)
# The registry's platform credential (written by up.sh's `sless registry`), for every push here.
export DOCKER_CONFIG=$K1N/registry-auth

log "building the operator image with sless's own builder"
OPERATOR_IMAGE=$(go run ./hack/operator-image --to "$REG/sless/operator:dev")
log "operator image $OPERATOR_IMAGE"

go build -o "$K1N/bin/sless" ./cmd/sless
"$HACK_DIR/build-bases.sh" all >/dev/null
declare -A RT
for rt in python3.11 python3.13 nodejs20 nodejs22 nodejs24 provided; do
  base="$REG/sless/base-$rt:latest"
  if [ "$("$CRANE" digest "$base" 2>/dev/null)" != "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$SLESS_CACHE/bases/$rt/index.json")" ]; then
    log "pushing the $rt base"
    "$CRANE" push "$SLESS_CACHE/bases/$rt" "$base" >/dev/null
  fi
  RT[$rt]=$("$K1N/bin/sless" runtime build --runtime "$rt" --base "$base" --to "$REG/sless/runtime-$rt:latest" --quiet)
  log "runtime $rt: ${RT[$rt]}"
done

# A NodePort picked at run time (kube-proxy routes node-ip:port; nothing binds it on the host).
PORT_FILE=$K1N/sless-api.nodeport
if [ ! -s "$PORT_FILE" ]; then
  python3 - > "$PORT_FILE" <<'PY'
import random, socket
used = set()
for line in open("/proc/net/tcp").read().splitlines()[1:] + open("/proc/net/tcp6").read().splitlines()[1:]:
    used.add(int(line.split()[1].rsplit(":", 1)[1], 16))
print(random.choice([p for p in range(30000, 32768) if p not in used]))
PY
fi
NODEPORT=$(cat "$PORT_FILE")
ENDPOINT="http://$K1N_NODE_IP:$NODEPORT"

log "secrets and the install overlay"
kc create namespace sless-system --dry-run=client -o yaml | kc_apply -f - >/dev/null
kc -n sless-system create secret generic sless-jwt --from-file=public.pem="$SLESS_JWT_PUBLIC_KEY" --dry-run=client -o yaml | kc_apply -f - >/dev/null
# The event key: the API trusts X-Sless-Event-* headers from a namespace's rabbitmq consumer
# holding HMAC(key, namespace), which the controller gives each consumer. Kept across installs.
[ -s "$K1N/event-key" ] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$K1N/event-key")
kc -n sless-system create secret generic sless-event-key --from-file=key="$K1N/event-key" --dry-run=client -o yaml | kc_apply -f - >/dev/null
# From a file, not the command line, where ps would show the secret.
s3env=$(mktemp); trap 'rm -f "$s3env"' EXIT; chmod 600 "$s3env"
printf 'AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$s3env"
kc -n sless-system create secret generic sless-s3 --from-env-file="$s3env" --dry-run=client -o yaml | kc_apply -f - >/dev/null
# The package indexes: their URLs may carry credentials (a Secret, read by the operator from its
# environment, never its argv).
ixenv=$(mktemp); chmod 600 "$ixenv"
printf 'PIP_INDEX_URL=%s\nNPM_REGISTRY=%s\n' "${SLESS_PIP_INDEX_URL:-}" "${SLESS_NPM_REGISTRY:-}" > "$ixenv"
kc -n sless-system create secret generic sless-indexes --from-env-file="$ixenv" --dry-run=client -o yaml | kc_apply -f - >/dev/null
rm -f "$ixenv"
if [ -n "${SLESS_DATABASE_URL:-}" ]; then
  dbenv=$(mktemp); chmod 600 "$dbenv"
  printf 'DATABASE_URL=%s\n' "$SLESS_DATABASE_URL" > "$dbenv"
  kc -n sless-system create secret generic sless-database --from-env-file="$dbenv" --dry-run=client -o yaml | kc_apply -f - >/dev/null
  rm -f "$dbenv"
fi
# The registry's keys, shared by `sless registry` and the operator (which derives each tenant's
# pull credential and each deps Job's push credential from them), and the node's pull-only
# credential for the operator's own image.
kc -n sless-system create secret generic sless-registry-auth --from-file=signing-key.pem="$K1N/registry-auth/signing-key.pem" \
  --from-file=secret="$K1N/registry-auth/secret" --dry-run=client -o yaml | kc_apply -f - >/dev/null
nodecfg=$(mktemp); trap 'rm -f "$s3env" "$nodecfg"' EXIT; chmod 600 "$nodecfg"
"$K1N/bin/sless" registry credential --auth-dir "$K1N/registry-auth" --registry "$REG" node > "$nodecfg"
kc -n sless-system create secret generic sless-registry --type=kubernetes.io/dockerconfigjson \
  --from-file=.dockerconfigjson="$nodecfg" --dry-run=client -o yaml | kc_apply -f - >/dev/null
OVERLAY=$K1N/sless-install
rm -rf "$OVERLAY"; mkdir -p "$OVERLAY/e2e"
cp -r operator/config "$OVERLAY/config"
cat > "$OVERLAY/e2e/kustomization.yaml" <<YAML
resources:
  - ../config/default
images:
  - name: sless-operator
    newName: ${OPERATOR_IMAGE%@*}
    digest: ${OPERATOR_IMAGE#*@}
patches:
  - path: config.yaml
  - path: service.yaml
  - path: autoscale.yaml
    target: {kind: Deployment, name: sless-controller}
YAML
# Shorter autoscaling windows than production's (60 s / 6 s), so the e2e sees a scale to zero
# within seconds of its idle timeout (SLESS_AUTOSCALE_STABLE_WINDOW etc. override).
cat > "$OVERLAY/e2e/autoscale.yaml" <<YAML
- op: add
  path: /spec/template/spec/containers/0/args/-
  value: --autoscale-stable-window=${SLESS_AUTOSCALE_STABLE_WINDOW:-10s}
- op: add
  path: /spec/template/spec/containers/0/args/-
  value: --autoscale-panic-window=${SLESS_AUTOSCALE_PANIC_WINDOW:-2s}
YAML
cat > "$OVERLAY/e2e/config.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: sless-operator
  namespace: sless-system
data:
  REGISTRY: "$FNREG"
  PUBLIC_URL: "$ENDPOINT"
  RUNTIME_PYTHON: "${RT[python3.11]/#$REG/$FNREG}"
  RUNTIME_NODE: "${RT[nodejs20]/#$REG/$FNREG}"
  RUNTIME_PYTHON313: "${RT[python3.13]/#$REG/$FNREG}"
  RUNTIME_NODE22: "${RT[nodejs22]/#$REG/$FNREG}"
  RUNTIME_NODE24: "${RT[nodejs24]/#$REG/$FNREG}"
  RUNTIME_PROVIDED: "${RT[provided]/#$REG/$FNREG}"
  OPERATOR_IMAGE: "${OPERATOR_IMAGE/#$REG/$FNREG}"
  S3_ENDPOINT: "$SLESS_S3_ENDPOINT"
  S3_BUCKET: "${SLESS_S3_BUCKET:-sless-code}"
  DEPS_EGRESS: "${SLESS_DEPS_EGRESS:-$K1N_NODE_IP/32:${FNREG##*:}}"
  CLUSTER_CIDRS: "${SLESS_CLUSTER_CIDRS-$K1N_POD_CIDR,$K1N_SVC_CIDR,$K1N_NODE_IP/32}"
  EGRESS_DENY: "${SLESS_EGRESS_DENY:-}"
  EGRESS_DEFAULT: "${SLESS_EGRESS_DEFAULT:-internet}"
  EGRESS_ALLOW: "${SLESS_EGRESS_ALLOW:-}"
  BLOCK_RUNTIMES: "${SLESS_BLOCK_RUNTIMES:-}"
YAML
cat > "$OVERLAY/e2e/service.yaml" <<YAML
apiVersion: v1
kind: Service
metadata:
  name: sless-api
  namespace: sless-system
spec:
  type: NodePort
  ports:
    - name: http
      port: 80
      targetPort: 8080
      nodePort: $NODEPORT
YAML
log "kubectl apply -k (CRDs, RBAC, the sless-api and sless-controller Deployments, Services)"
# The single sless-operator Deployment of earlier installs is replaced by the two.
kc -n sless-system delete deploy/sless-operator networkpolicy/sless-operator --ignore-not-found --wait=false >/dev/null 2>&1 || true
# So are the single account, role and admission policies of earlier installs (sless-api and
# sless-controller have their own now).
kc delete clusterrolebinding/sless-operator clusterrole/sless-operator validatingadmissionpolicybinding/sless-operator-namespace-deletes \
  validatingadmissionpolicybinding/sless-operator-tenant-updates validatingadmissionpolicy/sless-operator-namespace-deletes \
  validatingadmissionpolicy/sless-operator-tenant-updates --ignore-not-found >/dev/null 2>&1 || true
kc -n sless-system delete serviceaccount/sless-operator rolebinding/sless-operator role/sless-operator --ignore-not-found >/dev/null 2>&1 || true
kc apply -k "$OVERLAY/e2e" >/dev/null
# A changed ConfigMap or Secret alone does not restart the pods; the image digest usually changes with it.
kc -n sless-system rollout restart deploy/sless-api deploy/sless-controller >/dev/null
if ! { kc -n sless-system rollout status deploy/sless-controller --timeout=180s >/dev/null &&
       kc -n sless-system rollout status deploy/sless-api --timeout=180s >/dev/null; }; then
  kc -n sless-system get pods -o wide >&2 || true
  for p in $(kc -n sless-system get pods -o name); do
    kc -n sless-system describe "$p" | sed -n '/^Events:/,$p' | tail -8 >&2 || true
    kc -n sless-system logs "$p" --tail=20 >&2 || kc -n sless-system logs "$p" --previous --tail=20 >&2 || true
  done
  die "sless did not become ready"
fi
# The old pod's endpoint lingers in kube-proxy's rules for a moment after the rollout: wait for
# five answers in a row.
ok=0
for i in $(seq 1 150); do
  if curl -sf -m 2 "$ENDPOINT/readyz" >/dev/null; then ok=$((ok + 1)); [ $ok -ge 5 ] && break; else ok=0; fi
  sleep 0.2
done
[ $ok -ge 5 ] || die "the API is not reachable at $ENDPOINT"
# kube-controller-manager's quota controller learns of new resources (the Function CRD) on its
# discovery resync (every 30 s), and counts them in a quota when the quota changes (or on its
# 5-minute resync) when its spec changes; until then a quota on count/functions.sless.dev has no
# status for it and every Function create is refused (the operator changes the quota's spec and
# back then, as this probe does). Wait until a probe quota is counted.
kc create namespace sless-quota-probe --dry-run=client -o yaml | kc_apply -f - >/dev/null
kc -n sless-quota-probe create quota probe --hard=count/functions.sless.dev=1 --dry-run=client -o yaml | kc_apply -f - >/dev/null
counted() {
  kc -n sless-quota-probe get quota probe -o json 2>/dev/null |
    python3 -c 'import json,sys; sys.exit(0 if "count/functions.sless.dev" in json.load(sys.stdin).get("status",{}).get("used",{}) else 1)'
}
for i in $(seq 1 90); do
  counted && break
  for v in '"0"' null; do kc -n sless-quota-probe patch quota probe --type=merge -p "{\"spec\":{\"hard\":{\"count/recount.sless.dev\":$v}}}" >/dev/null; done
  sleep 1
done
counted || die "the quota controller does not count functions.sless.dev after 90 s"
log "the quota controller counts functions"
kc delete namespace sless-quota-probe --wait=false >/dev/null
cat > "$K1N/sless.env" <<ENV
SLESS_ENDPOINT=$ENDPOINT
REGISTRY=$FNREG
OPERATOR_IMAGE=${OPERATOR_IMAGE/#$REG/$FNREG}
RUNTIME_PYTHON=${RT[python3.11]/#$REG/$FNREG}
RUNTIME_NODE=${RT[nodejs20]/#$REG/$FNREG}
RUNTIME_PYTHON313=${RT[python3.13]/#$REG/$FNREG}
RUNTIME_NODE22=${RT[nodejs22]/#$REG/$FNREG}
RUNTIME_NODE24=${RT[nodejs24]/#$REG/$FNREG}
RUNTIME_PROVIDED=${RT[provided]/#$REG/$FNREG}
ENV
log "sless installed: API and /fn/ at $ENDPOINT"
echo "$ENDPOINT"
