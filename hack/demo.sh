#!/usr/bin/env bash
# make demo: the platform on its embedded defaults. Starts `sless up` (API, /fn/ proxy, embedded
# CNCF Distribution registry, in-process builder, podman runner) in the background, deploys
# examples/hello-python, examples/hello-node and examples/hello-go (the provided runtime: a Go binary
# built here with the machine's Go) with Terraform (the provider at the seed's address through
# dev_overrides), calls them on /fn/, shows an image with crane, changes one line and applies
# again (timing the rebuild and the switch), and leaves the platform running.
. "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
DEMO=${SLESS_DEMO_DIR:-$SLESS_CACHE/demo}
DATA="$DEMO/data"
mkdir -p "$DEMO"
CRANE=$(go_install_cached crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION")
TERRAFORM=$(go_install_cached terraform "github.com/hashicorp/terraform@$TERRAFORM_VERSION")
log "building sless and terraform-provider-sless"
go build -o bin/sless ./cmd/sless
go build -o bin/terraform-provider-sless ./cmd/terraform-provider-sless
"$HACK_DIR/build-bases.sh" all >/dev/null

# A previous demo is stopped first (its functions are adopted by the new one).
if [ -f "$DEMO/sless.pid" ] && kill -0 "$(cat "$DEMO/sless.pid")" 2>/dev/null; then
  log "stopping the previous demo (pid $(cat "$DEMO/sless.pid"))"
  kill "$(cat "$DEMO/sless.pid")"; while kill -0 "$(cat "$DEMO/sless.pid")" 2>/dev/null; do sleep 0.2; done
fi
# Each demo starts from a clean data dir; the previous demo's containers are this instance's orphans
# then, and sless up removes them at start.
rm -rf "$DATA"
free_or() { # the default address if free, else a free port on 127.0.0.1
  python3 - "$1" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket()
try:
    s.bind((host, int(port))); print(sys.argv[1])
except OSError:
    s.close(); s = socket.socket(); s.bind((host, 0)); print(f"{host}:{s.getsockname()[1]}")
finally:
    s.close()
PY
}
LISTEN=$(free_or 127.0.0.1:8080); REGISTRY=$(free_or 127.0.0.1:5000); METRICS=$(free_or 127.0.0.1:9091)
log "starting sless up on $LISTEN (registry $REGISTRY, metrics $METRICS, data in $DATA)"
nohup bin/sless up --data-dir "$DATA" --listen "$LISTEN" --registry-listen "$REGISTRY" --metrics-listen "$METRICS" \
  --podman-root "$SLESS_CACHE/podman" --bases-dir "$SLESS_CACHE/bases" > "$DEMO/sless.out" 2> "$DEMO/sless.log" &
echo $! > "$DEMO/sless.pid"
E="http://$LISTEN"
for i in $(seq 1 600); do
  curl -sf "$E/readyz" >/dev/null && break
  kill -0 "$(cat "$DEMO/sless.pid")" 2>/dev/null || die "sless up exited: $(tail -5 "$DEMO/sless.log")"
  sleep 0.2
done
curl -sf "$E/readyz" >/dev/null || die "sless up not ready: $(tail -5 "$DEMO/sless.log")"
cat "$DEMO/sless.out"
TOKEN=$(cat "$DATA/dev-token"); AUTH="Authorization: Bearer $TOKEN"
NS=$(python3 -c "import hashlib; print('sless-' + hashlib.sha256(b'dev').hexdigest()[:16])")
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
curl -sf -XPOST -H "$AUTH" "$E/v1/namespaces/$NS/ensure" >/dev/null

# Terraform uses the provider just built, at the seed's source address (dev_overrides: no init).
cat > "$DEMO/terraformrc" <<RC
provider_installation {
  dev_overrides { "terra.k8c.ru/naeel/sless" = "$ROOT_DIR/bin" }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE="$DEMO/terraformrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
export SLESS_ENDPOINT="$E" SLESS_API_TOKEN="$TOKEN"
for ex in hello-python hello-node hello-go; do rm -rf "$DEMO/$ex"; cp -r "examples/$ex" "$DEMO/$ex"; done
# provided: the function is your own executable; hello-go's is built here, never committed.
(cd "$DEMO/hello-go/src" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o ../code/bootstrap .) || die "building examples/hello-go failed"
tf() { "$TERRAFORM" -chdir="$DEMO/$1" "${@:2}"; }

echo; log "terraform apply examples/hello-python, examples/hello-node and examples/hello-go (runtime provided)"
tf hello-python apply -auto-approve -input=false | grep -E "^(Apply|sless_)" || die "terraform apply failed"
tf hello-node apply -auto-approve -input=false | grep -E "^(Apply|sless_)" || die "terraform apply failed"
tf hello-go apply -auto-approve -input=false | grep -E "^(Apply|sless_)" || die "terraform apply failed"
URL=$(tf hello-python output -raw url); NODE_URL=$(tf hello-node output -raw trigger_url); GO_URL=$(tf hello-go output -raw url)
echo "\$ curl '$URL?name=demo'"; curl -s "$URL?name=demo"; echo
echo "\$ curl $NODE_URL/some/path"; curl -s "$NODE_URL/some/path"; echo
echo "\$ curl '$GO_URL/any/path?name=demo'"; curl -s "$GO_URL/any/path?name=demo"; echo
IMAGE=$(tf hello-python output -raw image)
# The registry serves nothing anonymously: crane uses the platform's credential sless up wrote.
echo; echo "\$ DOCKER_CONFIG=$DATA/registry-auth crane manifest $IMAGE"
DOCKER_CONFIG="$DATA/registry-auth" "$CRANE" manifest "$IMAGE" | python3 -m json.tool

echo; log "changing one line of hello-python and applying again"
sed -i 's/hello, /hi again, /' "$DEMO/hello-python/code/handler.py"
start=$(date +%s%N)
tf hello-python apply -auto-approve -input=false | grep -E "^(Apply|sless_)" || die "terraform apply failed"
total=$(( ($(date +%s%N) - start) / 1000000 ))
echo "\$ curl $URL"; curl -s "$URL"; echo
BUILD=$(curl -sf -H "$AUTH" "$E/v1/namespaces/$NS/functions/hello-python" | json 'd["status"]["build"]["duration_ms"]')
echo "terraform apply of a one-line change, until the new code answers: ${total} ms (of which the in-process build: ${BUILD} ms)"
echo "terraform plan now: $(tf hello-python plan -detailed-exitcode -input=false >/dev/null 2>&1; [ $? = 0 ] && echo 'no changes' || echo 'CHANGES (unexpected)')"

echo; log "what the author reads: the last build's log and the function's own output"
echo "\$ sless logs hello-python --build"; bin/sless logs hello-python --build || die "sless logs --build failed"
echo "\$ sless logs hello-python --tail 6"; bin/sless logs hello-python --tail 6 || die "sless logs failed"
echo
echo "sless up keeps running (pid $(cat "$DEMO/sless.pid"), log $DEMO/sless.log). Try:"
echo "  export SLESS_ENDPOINT=$E SLESS_API_TOKEN=\$(cat $DATA/dev-token) TF_CLI_CONFIG_FILE=$DEMO/terraformrc"
echo "  cd $DEMO/hello-python && $TERRAFORM apply"
echo "  curl $NODE_URL"
echo "  curl $GO_URL"
echo "  curl http://$METRICS/metrics | grep ^sless_function_requests_total   (Prometheus's port; $E/metrics answers 404)"
echo "Stop it with: kill $(cat "$DEMO/sless.pid")   (function containers keep running and are adopted on the next start)"
