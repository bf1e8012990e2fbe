#!/usr/bin/env bash
# Everything `make test` needs, installed once and cached: Debian packages first (apt cannot run
# twice at once), then Go tools and base images in parallel (downloads dominate), with progress.
. "$(dirname "$0")/lib.sh"
"$HACK_DIR/install-apt.sh" --k8s
"$HACK_DIR/install-go-tools.sh" crane minio terraform controller-gen kube-score & tools=$!
"$HACK_DIR/build-bases.sh" all >/dev/null & bases=$!
"$HACK_DIR/build-envtest.sh" >/dev/null & envtest=$!
"$HACK_DIR/k8s/build.sh" >/dev/null & k8s=$!
rc=0
wait $tools || { log "installing Go tools failed"; rc=1; }
wait $bases || { log "building base images failed"; rc=1; }
wait $envtest || { log "building the envtest assets (kube-apiserver, etcd) failed"; rc=1; }
wait $k8s || { log "building the single-node cluster's binaries (hack/k8s/build.sh) failed"; rc=1; }
exit $rc
