package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/sless-dev/sless/cmd/internal/options"
	"github.com/sless-dev/sless/operator/resources"
)

// parseFlags runs sless-operator's command line up to the point where it would start.
func parseFlags(args []string) (*config, error) {
	var got *config
	cmd := newCommand(func(_ context.Context, c *config) error { got = c; return nil })
	cmd.SetArgs(append([]string{}, args...)) // nil would make cobra read os.Args
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return got, cmd.Execute()
}

// The tenant quota flags default to resources.DefaultTenantQuota, take Kubernetes quantities and
// refuse values that are not positive.
func TestTenantQuotaFlags(t *testing.T) {
	base := []string{"--registry", "r:5000", "--runtime", "python3.11=r/rt@sha256:1"}
	c, err := parseFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	d, q := resources.DefaultTenantQuota, c.tenantQuota()
	if q.CPU.Cmp(d.CPU) != 0 || q.Memory.Cmp(d.Memory) != 0 || q.EphemeralStorage.Cmp(d.EphemeralStorage) != 0 ||
		q.Pods != d.Pods || q.Functions != d.Functions || q.ContainerCPU.Cmp(d.ContainerCPU) != 0 {
		t.Errorf("defaults %+v, want %+v", q, d)
	}
	// The caps both servers share default to the operator's.
	if d.Functions != options.DefaultQuotaFunctions || d.Memory.String() != options.DefaultQuotaMemory {
		t.Errorf("options' defaults (%d functions, %s) differ from resources.DefaultTenantQuota's (%d, %s)",
			options.DefaultQuotaFunctions, options.DefaultQuotaMemory, d.Functions, d.Memory.String())
	}
	c, err = parseFlags(append(base, "--tenant-quota-cpu", "4", "--tenant-quota-memory", "2Gi", "--tenant-quota-ephemeral-storage", "10Gi",
		"--tenant-quota-pods", "7", "--tenant-quota-functions", "3", "--tenant-container-cpu", "500m"))
	if err != nil {
		t.Fatal(err)
	}
	q = c.tenantQuota()
	if q.CPU.String() != "4" || q.Memory.String() != "2Gi" || q.EphemeralStorage.String() != "10Gi" ||
		q.Pods != 7 || q.Functions != 3 || q.ContainerCPU.String() != "500m" {
		t.Errorf("set %+v", q)
	}
	if resources.DefaultTenantQuota.CPU.String() != "16" {
		t.Error("setting a flag changed the defaults")
	}
	for _, bad := range [][]string{{"--tenant-quota-functions", "0"}, {"--tenant-quota-memory", "0"}, {"--tenant-quota-cpu", "lots"}} {
		if _, err := parseFlags(append(base, bad...)); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) && !strings.Contains(err.Error(), "positive") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// What the environment gives fills the flags left empty, and the defaults that differ between the
// two servers are the operator's.
func TestOperatorDefaults(t *testing.T) {
	t.Setenv("PIP_INDEX_URL", "https://u:p@pypi.example/simple")
	t.Setenv("DATABASE_URL", "postgres://db/sless")
	c, err := parseFlags([]string{"--registry", "r:5000", "--runtime", "python3.11=r/rt@sha256:1", "--npm-registry", "https://npm.example/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.indexes.PipIndexURL != "https://u:p@pypi.example/simple" || c.indexes.NPMRegistry != "https://npm.example/" || c.databaseURL != "postgres://db/sless" {
		t.Errorf("from the environment: %+v, %q", c.indexes, c.databaseURL)
	}
	if c.api.Address(options.OperatorListen) != ":8080" || c.api.PublicURL != "http://127.0.0.1:8080" || c.role != roleAll || !c.autoscaleOn || !c.leaderElect {
		t.Errorf("defaults: listen %q, public URL %q, role %q, autoscale %v, leader-elect %v", c.api.Address(options.OperatorListen), c.api.PublicURL, c.role, c.autoscaleOn, c.leaderElect)
	}
	if _, err := parseFlags([]string{"--registry", "r:5000", "--runtime", "python3.11=r/rt@sha256:1", "--jwks-url", "http://idp/jwks", "--jwt-public-key", "k.pem"}); err == nil ||
		!strings.Contains(err.Error(), "at most one") {
		t.Errorf("two key sources: %v", err)
	}
}
