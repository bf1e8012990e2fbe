package config_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/internal/kubetest"
)

// Every manifest applies to a real kube-apiserver (server-side validation; the CRDs are already
// installed by envtest from the same files). The namespace comes from manager.yaml, so it goes
// first (the leader election's Role and the service account live in it).
func TestManifestsApply(t *testing.T) {
	env := kubetest.Start(t)
	env.Apply(t, "manager/manager.yaml")
	env.Apply(t, kubetest.Kustomized(t, "rbac")...)
}

// Each workload runs as its own account, and the public one holds no registry key: the API derives
// no credential (the controller writes every pull secret), so code execution in it yields none.
func TestWorkloadsRunAsTheirOwnAccounts(t *testing.T) {
	b, err := os.ReadFile("manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		seen[d.Name] = true
		spec := d.Spec.Template.Spec
		if spec.ServiceAccountName != d.Name {
			t.Errorf("%s runs as %q, want its own account %q", d.Name, spec.ServiceAccountName, d.Name)
		}
		if d.Name != "sless-api" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "sless-registry-auth" {
				t.Errorf("sless-api mounts the registry's keys (volume %s)", v.Name)
			}
		}
		for _, a := range spec.Containers[0].Args {
			if strings.HasPrefix(a, "--registry-auth-dir") || strings.HasPrefix(a, "--pull-secret-file") {
				t.Errorf("sless-api is given %s", a)
			}
		}
	}
	if !seen["sless-api"] || !seen["sless-controller"] {
		t.Errorf("manager.yaml's Deployments: %v", seen)
	}
}

// Every $(KEY) a workload's args name is a key of the ConfigMap sless-operator (a missing one
// would reach the flag as the literal "$(KEY)"), and the API takes BLOCK_RUNTIMES as
// --block-runtime (empty by default: nothing blocked).
func TestArgsFromTheConfigMap(t *testing.T) {
	b, err := os.ReadFile("manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]string
	args := map[string][]string{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cm corev1.ConfigMap
		if err := sigsyaml.Unmarshal([]byte(doc), &cm); err == nil && cm.Kind == "ConfigMap" && cm.Name == "sless-operator" {
			keys = cm.Data
			continue
		}
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			args[d.Name] = append(args[d.Name], c.Args...)
		}
	}
	if keys == nil || len(args) < 2 {
		t.Fatalf("manager.yaml: ConfigMap sless-operator %v, Deployments' args %v", keys, args)
	}
	ref := regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)
	for name, as := range args {
		for _, a := range as {
			for _, m := range ref.FindAllStringSubmatch(a, -1) {
				if _, ok := keys[m[1]]; !ok {
					t.Errorf("%s passes %s, but the ConfigMap sless-operator has no key %s", name, a, m[1])
				}
			}
		}
	}
	if v, ok := keys["BLOCK_RUNTIMES"]; !ok || v != "" {
		t.Errorf("BLOCK_RUNTIMES: %q (present %v), want an empty default", v, ok)
	}
	if !slices.Contains(args["sless-api"], "--block-runtime=$(BLOCK_RUNTIMES)") {
		t.Errorf("sless-api's args lack --block-runtime=$(BLOCK_RUNTIMES): %v", args["sless-api"])
	}
}
