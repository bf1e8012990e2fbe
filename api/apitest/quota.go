package apitest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

// FunctionQuota is what a backend's test Controller implements to cap functions per namespace as
// the backend does in production: SetFunctionQuota makes n the most functions ns may hold, with
// the usage counted as the backend counts it now (on Kubernetes, what the quota controller would
// write into the ResourceQuota's status: it is not running in a test).
type FunctionQuota interface {
	SetFunctionQuota(ns string, n int) error
}

// SetFunctionQuota caps every namespace of the in-memory stores (memstore counts per namespace).
func (m memController) SetFunctionQuota(_ string, n int) error {
	m.st.Functions.SetMaxPerNamespace(n, "functions")
	return nil
}

// A create beyond the namespace's function quota is 403 quota_exceeded naming the quota, and
// writes nothing; concurrent creates cannot pass it together; updates are not creates; another
// namespace counts its own; a delete makes room again.
func testFunctionQuota(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	ctx := context.Background()
	q, ok := e.Ctrl.(FunctionQuota)
	if !ok {
		t.Fatalf("%s's test controller does not implement apitest.FunctionQuota", bk.Name)
	}
	setQuota := func(n int) {
		t.Helper()
		if err := q.SetFunctionQuota(e.NS, n); err != nil {
			t.Fatal(err)
		}
	}
	e.Ensure()
	setQuota(3)
	// Eight at once for three places: exactly three are stored, the others refused by the quota.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.C.CreateFunction(ctx, apiv1.Function{Name: fmt.Sprintf("f%d", i), Runtime: "python3.11"})
		}()
	}
	wg.Wait()
	created, refused := 0, 0
	var msg string
	for _, err := range errs {
		var ae *apiv1.Error
		switch {
		case err == nil:
			created++
		case errors.As(err, &ae) && ae.Status == http.StatusForbidden && ae.Code == apiv1.CodeQuotaExceeded:
			refused++
			msg = ae.Message
		default:
			t.Errorf("a create beyond the quota: %v, want 403 %s", err, apiv1.CodeQuotaExceeded)
		}
	}
	if created != 3 || refused != 5 {
		t.Fatalf("%d created and %d refused of 8 concurrent creates under a quota of 3", created, refused)
	}
	if !strings.Contains(msg, "quota") || !strings.Contains(msg, "function") {
		t.Errorf("the message does not say which quota: %q", msg)
	}
	list, err := e.C.ListFunctions(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("after the refused creates: %d functions (%v), want the 3 admitted", len(list), err)
	}
	for i, err := range errs {
		if err != nil {
			if _, gerr := e.C.GetFunction(ctx, fmt.Sprintf("f%d", i)); !client.IsNotFound(gerr) {
				t.Errorf("a refused create left f%d behind: %v", i, gerr)
			}
		}
	}

	// Changing a function is not a new one.
	f := list[0]
	f.MemoryMB = 256
	if _, err := e.C.UpdateFunction(ctx, f); err != nil {
		t.Errorf("an update at the quota: %v", err)
	}
	// The quota is the namespace's: another tenant's creates are not counted against it.
	other := e.Tenant()
	other.Ensure()
	other.Function("elsewhere")

	// A delete makes room (once the backend has counted again: on Kubernetes the quota
	// controller recomputes the usage after a delete).
	if err := e.C.DeleteFunction(ctx, f.Name); err != nil {
		t.Fatal(err)
	}
	setQuota(3)
	e.Function("again")
	if _, err := e.C.CreateFunction(ctx, apiv1.Function{Name: "one-more", Runtime: "python3.11"}); !isQuotaExceeded(err) {
		t.Errorf("a fourth function: %v, want %s", err, apiv1.CodeQuotaExceeded)
	}
}

func isQuotaExceeded(err error) bool {
	var ae *apiv1.Error
	return errors.As(err, &ae) && ae.Code == apiv1.CodeQuotaExceeded && ae.Status == http.StatusForbidden
}
