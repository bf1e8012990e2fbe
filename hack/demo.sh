#!/usr/bin/env bash
# make demo: the platform on its embedded defaults. Starts `sless up` (API, /fn/ proxy, embedded
# CNCF Distribution registry, in-process builder, podman runner) in the background, deploys
# examples/hello-python and examples/hello-node through the API, calls them on /fn/, shows an image
# with crane, changes one line and redeploys (timing the rebuild and the switch), and leaves the
# platform running.
. "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
DEMO=${SLESS_DEMO_DIR:-$SLESS_CACHE/demo}
DATA="$DEMO/data"
mkdir -p "$DEMO"
CRANE=$(go_install_cached crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION")
log "building sless"
go build -o bin/sless ./cmd/sless
"$HACK_DIR/build-bases.sh" python3.11 nodejs20 >/dev/null

# A previous demo is stopped first (its functions are adopted by the new one).
if [ -f "$DEMO/sless.pid" ] && kill -0 "$(cat "$DEMO/sless.pid")" 2>/dev/null; then
  log "stopping the previous demo (pid $(cat "$DEMO/sless.pid"))"
  kill "$(cat "$DEMO/sless.pid")"; while kill -0 "$(cat "$DEMO/sless.pid")" 2>/dev/null; do sleep 0.2; done
fi
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
LISTEN=$(free_or 127.0.0.1:8080); REGISTRY=$(free_or 127.0.0.1:5000)
log "starting sless up on $LISTEN (registry $REGISTRY, data in $DATA)"
nohup bin/sless up --data-dir "$DATA" --listen "$LISTEN" --registry-listen "$REGISTRY" \
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

deploy() { # NAME RUNTIME DIR: create (once), upload a zip, wait for Ready; prints the function JSON
  local name=$1 runtime=$2 dir=$3 zip="$DEMO/$1.zip"
  curl -s -XPOST -H "$AUTH" "$E/v1/namespaces/$NS/functions" -d "{\"name\":\"$name\",\"runtime\":\"$runtime\"}" >/dev/null
  rm -f "$zip"; (cd "$dir" && python3 -m zipfile -c "$zip" $(ls))
  local sha; sha=$(curl -sf -XPOST -H "$AUTH" -H "Content-Type: application/zip" --data-binary @"$zip" \
    "$E/v1/namespaces/$NS/functions/$name/upload" | json 'd["code_sha256"]')
  for i in $(seq 1 600); do
    local f; f=$(curl -sf -H "$AUTH" "$E/v1/namespaces/$NS/functions/$name")
    case "$(echo "$f" | json 'd["status"]["code_sha256"] + " " + d["status"]["phase"] + " " + d["status"].get("message","")')" in
      "$sha Ready ") echo "$f"; return 0;;
      *Failed*) die "$name failed: $(echo "$f" | json 'd["status"]["message"]')";;
    esac
    sleep 0.05
  done
  die "$name did not become Ready"
}

echo; log "deploying examples/hello-python and examples/hello-node through the API"
SRC="$DEMO/hello-python"; rm -rf "$SRC"; cp -r examples/hello-python "$SRC"
PY=$(deploy hello-python python3.11 "$SRC")
deploy hello-node nodejs20 examples/hello-node >/dev/null
echo "\$ curl '$E/fn/$NS/hello-python?name=demo'"; curl -s "$E/fn/$NS/hello-python?name=demo"; echo
echo "\$ curl $E/fn/$NS/hello-node/some/path"; curl -s "$E/fn/$NS/hello-node/some/path"; echo
IMAGE=$(echo "$PY" | json 'd["status"]["image"]')
echo; echo "\$ crane manifest $IMAGE"; "$CRANE" manifest "$IMAGE" | python3 -m json.tool

echo; log "changing one line of hello-python and redeploying"
sed -i 's/hello, /hi again, /' "$SRC/handler.py"
start=$(date +%s%N)
PY2=$(deploy hello-python python3.11 "$SRC")
for i in $(seq 1 200); do curl -s "$E/fn/$NS/hello-python" | grep -q "hi again" && break; sleep 0.01; done
total=$(( ($(date +%s%N) - start) / 1000000 ))
echo "\$ curl $E/fn/$NS/hello-python"; curl -s "$E/fn/$NS/hello-python"; echo
echo "upload → new response on /fn/: ${total} ms (build $(echo "$PY2" | json 'd["status"]["build"]["duration_ms"]') ms, the rest is container start, health check and the switch)"
echo
echo "sless up keeps running (pid $(cat "$DEMO/sless.pid"), log $DEMO/sless.log). Try:"
echo "  export SLESS_ENDPOINT=$E SLESS_API_TOKEN=\$(cat $DATA/dev-token)"
echo "  curl $E/fn/$NS/hello-node"
echo "Stop it with: kill $(cat "$DEMO/sless.pid")   (function containers keep running and are adopted on the next start)"
