#!/usr/bin/env bash
# What `make demo` needs, and nothing more: podman (Debian), the Terraform CLI and crane (built
# from the Go module proxy) and every runtime's base image (debootstrap, the npm registry), the last two in
# parallel, with progress. Cached under $SLESS_CACHE like everything else; `make test` needs more
# (hack/setup-test.sh: envtest, MinIO, the single-node cluster).
. "$(dirname "$0")/lib.sh"
"$HACK_DIR/install-apt.sh" --demo
"$HACK_DIR/install-go-tools.sh" crane terraform & tools=$!
"$HACK_DIR/build-bases.sh" all >/dev/null & bases=$!
rc=0
wait $tools || { log "installing crane and terraform failed"; rc=1; }
wait $bases || { log "building the base images failed"; rc=1; }
exit $rc
