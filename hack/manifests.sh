#!/usr/bin/env bash
# Generates operator/api/v1alpha1/zz_generated.deepcopy.go and the CRDs under
# operator/config/crd/bases and the RBAC role under operator/config/rbac from the kubebuilder markers. --check fails if the committed files differ.
. "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
CG=$(ls "$SLESS_CACHE"/bin/controller-gen-"$CONTROLLER_GEN_VERSION" 2>/dev/null) || die "controller-gen missing: hack/install-go-tools.sh controller-gen"
"$CG" object paths=./operator/api/...
"$CG" crd paths=./operator/api/... output:crd:artifacts:config=operator/config/crd/bases
"$CG" rbac:roleName=sless-operator paths="./operator/..." output:rbac:artifacts:config=operator/config/rbac
if [ "${1:-}" = "--check" ]; then
  if [ -n "$(git status --porcelain -- operator/api operator/config)" ]; then
    git --no-pager diff --stat -- operator/api operator/config
    die "generated operator files are stale: run make manifests and commit the result"
  fi
fi
