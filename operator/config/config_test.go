// Package config holds the operator's install manifests (kubectl apply -k operator/config/default).
package config_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sless-dev/sless/internal/kubetest"
)

// Every manifest applies to a real kube-apiserver (server-side validation; the CRDs are already
// installed by envtest from the same files).
func TestManifestsApply(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	for _, f := range []string{"rbac/role.yaml", "rbac/service_account.yaml", "rbac/role_binding.yaml", "manager/manager.yaml"} {
		b, err := os.ReadFile(filepath.Join(".", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "rbac/service_account.yaml" { // the namespace comes from manager.yaml, applied last here
			continue
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := env.Client.Create(ctx, &u); err != nil {
				t.Errorf("%s: %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
	b, _ := os.ReadFile("rbac/service_account.yaml")
	var sa unstructured.Unstructured
	yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&sa.Object)
	if err := env.Client.Create(ctx, &sa); err != nil {
		t.Errorf("service account: %v", err)
	}
}
