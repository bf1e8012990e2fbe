package config_test

import (
	"testing"

	"github.com/sless-dev/sless/internal/kubetest"
)

// Every manifest applies to a real kube-apiserver (server-side validation; the CRDs are already
// installed by envtest from the same files). The namespace comes from manager.yaml, so it goes
// first (the leader election's Role and the service account live in it).
func TestManifestsApply(t *testing.T) {
	env := kubetest.Start(t)
	for _, f := range []string{"manager/manager.yaml", "rbac/role.yaml", "rbac/role_binding.yaml", "rbac/namespace_deletes.yaml", "rbac/tenant_updates.yaml", "rbac/service_account.yaml"} {
		applyFile(t, env.Client, f)
	}
}
