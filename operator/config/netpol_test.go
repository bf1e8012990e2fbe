package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// /metrics names every tenant's namespace and functions: both workloads serve it on a port of its
// own (--metrics-listen), which their pod templates' scrape annotations name and their
// NetworkPolicies open to monitoring namespaces only, never to every pod.
func TestMetricsPortForMonitoringOnly(t *testing.T) {
	b, err := os.ReadFile("manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	ports := map[string]int{} // workload → its metrics port
	policies := map[string]networkingv1.NetworkPolicy{}
	for {
		var obj struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "Deployment":
			var dep appsv1.Deployment
			if err := json.Unmarshal(raw, &dep); err != nil {
				t.Fatal(err)
			}
			ann := dep.Spec.Template.Annotations
			c := dep.Spec.Template.Spec.Containers[0]
			named := 0
			for _, p := range c.Ports {
				if p.Name == "metrics" {
					named = int(p.ContainerPort)
				}
			}
			listen := ""
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--metrics-listen="); ok {
					listen = v
				}
			}
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(named) ||
				listen != ":"+strconv.Itoa(named) || named == 0 || named == 8080 {
				t.Errorf("%s: scrape annotations %v, port metrics %d, --metrics-listen %q: want them to agree, on a port of its own",
					dep.Name, ann, named, listen)
			}
			ports[dep.Name] = named
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			if err := json.Unmarshal(raw, &np); err != nil {
				t.Fatal(err)
			}
			policies[np.Name] = np
		}
	}
	for _, name := range []string{"sless-api", "sless-controller"} {
		np, ok := policies[name]
		if !ok || ports[name] == 0 {
			t.Fatalf("no NetworkPolicy or Deployment %s", name)
		}
		opened := false
		for _, r := range np.Spec.Ingress {
			metrics := len(r.Ports) == 0
			for _, p := range r.Ports {
				metrics = metrics || p.Port.IntValue() == ports[name]
			}
			if !metrics {
				continue
			}
			if len(r.From) == 0 {
				t.Errorf("%s: the metrics port is open to every pod", name)
			}
			for _, f := range r.From {
				if f.NamespaceSelector == nil || f.NamespaceSelector.MatchLabels["sless.dev/monitoring"] != "true" || f.PodSelector != nil || f.IPBlock != nil {
					t.Errorf("%s: the metrics port is open to %+v, want namespaces labelled sless.dev/monitoring=true only", name, f)
				}
				opened = true
			}
		}
		if !opened {
			t.Errorf("%s: no Prometheus may reach the metrics port", name)
		}
	}
}
