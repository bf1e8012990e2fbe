package runtimes_test

import (
	"slices"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runtimes"
)

// The runtimes clients may name (apiv1) are exactly the runtimes implemented here.
func TestCatalogIsTheWireList(t *testing.T) {
	if got, want := runtimes.Names(), apiv1.Runtimes(); !slices.Equal(got, want) {
		t.Errorf("runtimes.Names() = %v, apiv1.Runtimes() = %v", got, want)
	}
	for _, n := range apiv1.Runtimes() {
		rt, ok := runtimes.Lookup(n)
		if !ok || rt.DefaultHandler != apiv1.DefaultEntrypoint || apiv1.ValidEntrypoint(rt.DefaultHandler) != nil {
			t.Errorf("runtime %s: %+v", n, rt)
		}
	}
}
