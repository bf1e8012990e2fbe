#!/usr/bin/env bash
# Builds the Go tools the tests and benchmarks use from the Go module proxy, in parallel, each into
# $SLESS_CACHE/bin/<name>-<version> (atomic: temp dir, renamed on success). Usage:
#   install-go-tools.sh [crane] [kaniko] [minio] [terraform] [controller-gen] [kube-score]     (default: crane)
. "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || set -- crane
pids=(); names=()
for tool in "$@"; do
  case $tool in
    crane)  go_install_cached crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" >/dev/null & ;;
    kaniko) "$HACK_DIR/build-kaniko.sh" >/dev/null & ;;
    minio)  go_install_cached minio "github.com/minio/minio@$MINIO_VERSION" >/dev/null & ;;
    controller-gen) go_install_cached controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION" >/dev/null & ;;
    kube-score) go_install_cached kube-score "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION" >/dev/null & ;;
    terraform) go_install_cached terraform "github.com/hashicorp/terraform@$TERRAFORM_VERSION" >/dev/null & ;;
    *) die "unknown tool $tool";;
  esac
  pids+=($!); names+=("$tool")
done
rc=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then log "${names[$i]} ready"; else log "${names[$i]} FAILED"; rc=1; fi
done
exit $rc
