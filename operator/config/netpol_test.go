package config_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sless-dev/sless/runspec"
)

// The index proxy lends the package indexes' credentials: only tenant namespaces' dependency
// installs may reach its port, not any pod of the cluster (their own egress policy narrows the
// rest of a tenant's pods, but not a pod of another namespace).
func TestIndexProxyOnlyForInstalls(t *testing.T) {
	b, err := os.ReadFile("manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	found := false
	for {
		var np networkingv1.NetworkPolicy
		if err := d.Decode(&np); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if np.Kind != "NetworkPolicy" || np.Name != "sless-controller" {
			continue
		}
		found = true
		for _, r := range np.Spec.Ingress {
			proxy := len(r.Ports) == 0
			for _, p := range r.Ports {
				proxy = proxy || p.Port.IntValue() == 3128
			}
			if !proxy {
				continue
			}
			if len(r.From) == 0 {
				t.Error("the index proxy's port is open to every pod")
			}
			for _, f := range r.From {
				if f.NamespaceSelector == nil || f.NamespaceSelector.MatchLabels[runspec.LabelManagedBy] != runspec.ManagedBy ||
					f.PodSelector == nil || f.PodSelector.MatchLabels[runspec.LabelRole] != string(runspec.RoleDeps) || f.IPBlock != nil {
					t.Errorf("the index proxy's port is open to %+v, want tenant namespaces' deps pods only", f)
				}
			}
		}
	}
	if !found {
		t.Fatal("no NetworkPolicy sless-controller in manager.yaml")
	}
}
