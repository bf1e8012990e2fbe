#!/usr/bin/env bash
# podman with the project's settings and its own storage under $SLESS_CACHE/podman, so tests and
# benchmarks never touch (or depend on) the machine's default container storage.
. "$(dirname "$0")/lib.sh"
export CONTAINERS_CONF="$ROOT_DIR/local/podman/containers.conf"
exec podman --root "$SLESS_CACHE/podman/root" --runroot "$SLESS_CACHE/podman/run" \
  --storage-driver overlay --cgroup-manager cgroupfs --runtime runc "$@"
