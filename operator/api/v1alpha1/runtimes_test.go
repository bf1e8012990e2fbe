package v1alpha1_test

import (
	"os"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/api/apiv1"
)

// The CRD's runtime enum is the wire list: a runtime the API takes must not be refused by the
// Kubernetes API server (nor the reverse).
func TestCRDRuntimesAreTheWireList(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/sless.dev_functions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range crd.Spec.Versions {
		for _, e := range v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["runtime"].Enum {
			var s string
			if err := yaml.Unmarshal(e.Raw, &s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
	}
	slices.Sort(got)
	if want := apiv1.Runtimes(); !slices.Equal(got, want) {
		t.Errorf("the CRD's runtime enum is %v, apiv1.Runtimes() is %v", got, want)
	}
}
