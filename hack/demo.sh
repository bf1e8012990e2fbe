#!/usr/bin/env bash
# make demo: the builder on its embedded defaults. Starts a CNCF Distribution registry (embedded in
# sless), makes a tiny base image from Debian's busybox-static, builds examples/hello-python onto it
# in-process, shows what was built with crane, then changes one line and rebuilds.
. "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
DEMO=${SLESS_DEMO_DIR:-$SLESS_CACHE/demo}
CRANE=$(go_install_cached crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION")
log "building sless"
go build -o bin/sless ./cmd/sless
BASE=$("$HACK_DIR/build-bases.sh" busybox)

# A previous demo's registry is stopped first; its data dir is reused.
if [ -f "$DEMO/registry.pid" ] && kill -0 "$(cat "$DEMO/registry.pid")" 2>/dev/null; then
  kill "$(cat "$DEMO/registry.pid")"; sleep 0.5
fi
mkdir -p "$DEMO"
bin/sless registry --listen 127.0.0.1:0 --root "$DEMO/registry" > "$DEMO/registry.addr" 2> "$DEMO/registry.log" &
echo $! > "$DEMO/registry.pid"
for _ in $(seq 50); do [ -s "$DEMO/registry.addr" ] && break; sleep 0.1; done
REG=$(head -1 "$DEMO/registry.addr"); [ -n "$REG" ] || die "registry did not start: $(cat "$DEMO/registry.log")"
log "registry (CNCF Distribution, embedded) on $REG"

"$CRANE" push "$BASE" "$REG/sless/base-busybox:latest" >/dev/null 2>&1
log "base image pushed: $REG/sless/base-busybox:latest ($("$CRANE" digest "$REG/sless/base-busybox:latest"))"

SRC="$DEMO/hello-python"; rm -rf "$SRC"; cp -r examples/hello-python "$SRC"
echo; echo "\$ sless build --runtime-image $REG/sless/base-busybox:latest --src $SRC --handler handler.handle --to $REG/fn/hello:latest"
REF=$(bin/sless build --runtime-image "$REG/sless/base-busybox:latest" --src "$SRC" --handler handler.handle \
  --function hello --namespace demo --runtime python3.11 --to "$REG/fn/hello:latest" | tail -1)
echo "$REF"
echo; echo "\$ crane manifest $REF"; "$CRANE" manifest "$REF" | python3 -m json.tool
echo; echo "\$ crane config $REF"; "$CRANE" config "$REF" | python3 -m json.tool

echo; log "changing one line of code and rebuilding"
sed -i 's/hello, /hi, /' "$SRC/handler.py"
start=$(date +%s%N)
REF2=$(bin/sless build --quiet --runtime-image "$REG/sless/base-busybox:latest" --src "$SRC" --handler handler.handle \
  --function hello --namespace demo --runtime python3.11 --to "$REG/fn/hello:latest")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$REF2"
echo "rebuild + push of a one-line change took $ms ms (whole CLI process); layers now:"
"$CRANE" manifest "$REF2" | python3 -c 'import json,sys; [print("  ", l["digest"][:19], l["size"], "bytes") for l in json.load(sys.stdin)["layers"]]'
echo
echo "The registry keeps running on $REG (pid $(cat "$DEMO/registry.pid")); stop it with: kill $(cat "$DEMO/registry.pid")"
