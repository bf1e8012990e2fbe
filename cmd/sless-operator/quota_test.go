package main

import (
	"strings"
	"testing"

	"github.com/sless-dev/sless/operator/resources"
)

// The tenant quota flags default to resources.DefaultTenantQuota, take Kubernetes quantities and
// refuse values that are not positive.
func TestTenantQuotaFlags(t *testing.T) {
	base := []string{"--registry", "r:5000", "--runtime", "python3.11=r/rt@sha256:1"}
	c, err := parseFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	d := resources.DefaultTenantQuota
	if c.quota.CPU.Cmp(d.CPU) != 0 || c.quota.Memory.Cmp(d.Memory) != 0 || c.quota.EphemeralStorage.Cmp(d.EphemeralStorage) != 0 ||
		c.quota.Pods != d.Pods || c.quota.Functions != d.Functions || c.quota.ContainerCPU.Cmp(d.ContainerCPU) != 0 {
		t.Errorf("defaults %+v, want %+v", c.quota, d)
	}
	c, err = parseFlags(append(base, "--tenant-quota-cpu", "4", "--tenant-quota-memory", "2Gi", "--tenant-quota-ephemeral-storage", "10Gi",
		"--tenant-quota-pods", "7", "--tenant-quota-functions", "3", "--tenant-container-cpu", "500m"))
	if err != nil {
		t.Fatal(err)
	}
	if c.quota.CPU.String() != "4" || c.quota.Memory.String() != "2Gi" || c.quota.EphemeralStorage.String() != "10Gi" ||
		c.quota.Pods != 7 || c.quota.Functions != 3 || c.quota.ContainerCPU.String() != "500m" {
		t.Errorf("set %+v", c.quota)
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
