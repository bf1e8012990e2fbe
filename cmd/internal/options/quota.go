package options

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The tenant caps both servers default to (sless-operator's are resources.DefaultTenantQuota's,
// which a test of cmd/sless-operator holds equal).
const (
	DefaultQuotaFunctions = 100
	DefaultQuotaMemory    = "8Gi"
)

// TenantQuota bounds what one tenant namespace may hold and run. Each server adds caps of its own
// (sless-operator CPU, pods and disk; sless up runs at once) and its own rule for 0: no cap on
// the single host, refused by the operator (a ResourceQuota of 0 would admit nothing).
type TenantQuota struct {
	Functions int64
	Memory    resource.Quantity
}

// AddFlags declares the shared tenant caps on fs.
func (o *TenantQuota) AddFlags(fs *pflag.FlagSet) {
	o.Memory = resource.MustParse(DefaultQuotaMemory)
	fs.Int64Var(&o.Functions, "tenant-quota-functions", DefaultQuotaFunctions, "functions a tenant namespace may hold; a create beyond is 403 quota_exceeded (sless-operator: the ResourceQuota's count/functions.sless.dev; sless up: 0 for no cap)")
	QuantityVar(fs, &o.Memory, "tenant-quota-memory", "memory limits a tenant namespace's running functions, jobs and cron runs may have together, e.g. 8Gi or 512Mi (sless-operator: the ResourceQuota's limits.memory; sless up: a start beyond fails and is retried, a run beyond waits, 0 for no cap)")
}

// MemoryMiB is Memory in MiB, rounded up: a small positive value must not become 0, "no cap".
func (o *TenantQuota) MemoryMiB() int {
	return int((o.Memory.Value() + 1<<20 - 1) >> 20)
}

// quantityValue is a flag holding a Kubernetes quantity ("16", "500m", "8Gi").
type quantityValue resource.Quantity

// QuantityVar declares a flag holding a Kubernetes quantity; *q is its default.
func QuantityVar(fs *pflag.FlagSet, q *resource.Quantity, name, usage string) {
	fs.Var((*quantityValue)(q), name, usage)
}

func (v *quantityValue) String() string {
	q := (*resource.Quantity)(v)
	return q.String()
}

func (v *quantityValue) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("want a quantity such as 8Gi or 512Mi, not %q", s)
	}
	*v = quantityValue(q)
	return nil
}

func (v *quantityValue) Type() string { return "quantity" }
