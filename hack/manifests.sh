#!/usr/bin/env bash
# Generates operator/api/v1alpha1/zz_generated.deepcopy.go and the CRDs under
# operator/config/crd/bases and the RBAC roles (sless-api, sless-controller) under operator/config/rbac from the kubebuilder markers. --check fails if the committed files differ.
. "$(dirname "$0")/lib.sh"
cd "$ROOT_DIR"
CG=$(ls "$SLESS_CACHE"/bin/controller-gen-"$CONTROLLER_GEN_VERSION" 2>/dev/null) || die "controller-gen missing: hack/install-go-tools.sh controller-gen"
"$CG" object paths=./operator/api/...
"$CG" crd paths=./operator/api/... output:crd:artifacts:config=operator/config/crd/bases
# Two accounts, two roles: the API's from what kubestore does, the controller's from the
# reconcilers' (controller-gen names its output role.yaml: each goes through its own directory).
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$CG" rbac:roleName=sless-api paths="./operator/kubestore/..." output:rbac:artifacts:config="$tmp/api"
"$CG" rbac:roleName=sless-controller paths="./operator/controllers/..." output:rbac:artifacts:config="$tmp/controller"
mv "$tmp/api/role.yaml" operator/config/rbac/api_role.yaml
mv "$tmp/controller/role.yaml" operator/config/rbac/controller_role.yaml
if [ "${1:-}" = "--check" ]; then
  if [ -n "$(git status --porcelain -- operator/api operator/config)" ]; then
    git --no-pager diff --stat -- operator/api operator/config
    die "generated operator files are stale: run make manifests and commit the result"
  fi
fi
