package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

// runtimesDay is the suite's clock for the runtime lifecycle: after nodejs20's deprecation.
var runtimesDay = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// The runtime lifecycle: GET /v1/runtimes lists the catalog under the install's policy (any valid
// token, no namespace) with the backend's runtime images; a function created or updated on a
// deprecated runtime is admitted with a `Warning: 299` header and a Warning event naming the
// replacement; once the install blocks the runtime (--block-runtime, a restart), no function may
// be created on it or moved to it (400 naming the replacement, nothing written), while a function
// already on it may still be updated in place, with a warning.
func testRuntimes(t *testing.T, bk Backend) {
	ctx := context.Background()
	clock := func() time.Time { return runtimesDay }
	e := NewEnv(t, bk, api.WithRuntimePolicy(apiv1.RuntimePolicy{Now: clock}))
	e.Ensure()

	// The list: every runtime of the catalog, nodejs20 deprecated for nodejs22, the images the
	// backend builds on.
	items, err := e.C.Runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range items {
		names = append(names, r.Name)
		want := apiv1.RuntimeSupported
		if r.Name == apiv1.RuntimeNodejs20 {
			want = apiv1.RuntimeDeprecated
			if r.DeprecatedSince != "2026-04-30" || r.Replacement != apiv1.RuntimeNodejs22 {
				t.Errorf("nodejs20: %+v, want deprecated since 2026-04-30 for nodejs22", r)
			}
		}
		if r.Status != want || r.Language == "" || r.Version == "" || r.BlockedSince != "" {
			t.Errorf("runtime %+v, want status %s", r, want)
		}
		wantImage := ""
		if e.Be.RuntimeImages != nil {
			wantImage, _ = e.Be.RuntimeImages.RuntimeImage(r.Name)
		}
		if r.Image != wantImage {
			t.Errorf("runtime %s has image %q; the backend builds on %q", r.Name, r.Image, wantImage)
		}
	}
	if !slices.Equal(names, apiv1.Runtimes()) {
		t.Errorf("GET /v1/runtimes lists %v, want %v", names, apiv1.Runtimes())
	}
	// Any valid token reads it; none is refused.
	if _, err := e.Tenant().C.Runtimes(ctx); err != nil {
		t.Errorf("another tenant: %v", err)
	}
	if status, code, _ := e.Raw(http.MethodGet, "/v1/runtimes", "", "", nil); status != http.StatusUnauthorized || code != apiv1.CodeUnauthenticated {
		t.Errorf("GET /v1/runtimes without a token: %d %s", status, code)
	}

	// A create on a deprecated runtime: 201 with the warning, as a header and as an event.
	status, header, out := sendJSON(t, e, http.MethodPost, "/functions", apiv1.Function{Name: "legacy", Runtime: apiv1.RuntimeNodejs20})
	if status != http.StatusCreated {
		t.Fatalf("create on nodejs20: %d %s", status, out)
	}
	warns := apiv1.ParseWarnings(header.Values("Warning"))
	if len(warns) != 1 || !strings.HasPrefix(header.Get("Warning"), `299 - "`) || !strings.Contains(warns[0], "deprecated") || !strings.Contains(warns[0], apiv1.RuntimeNodejs22) {
		t.Errorf("create on nodejs20: Warning %q, want one 299 warning naming nodejs22", header.Values("Warning"))
	}
	wantEvent(t, e, "legacy", apiv1.ReasonRuntimeDeprecated, apiv1.RuntimeNodejs22)
	// The client tells them: to the context's handler.
	var told []string
	wctx := client.ContextWithWarningHandler(ctx, func(s string) { told = append(told, s) })
	if _, err := e.C.CreateFunction(wctx, apiv1.Function{Name: "modern", Runtime: apiv1.RuntimeNodejs22}); err != nil || len(told) != 0 {
		t.Fatalf("create on nodejs22: %v, warnings %q", err, told)
	}
	if _, err := e.C.UpdateFunction(wctx, apiv1.Function{Name: "legacy", Runtime: apiv1.RuntimeNodejs20, MemoryMB: 256}); err != nil || len(told) != 1 || !strings.Contains(told[0], apiv1.RuntimeNodejs22) {
		t.Fatalf("update on nodejs20: %v, warnings %q", err, told)
	}
	if evs, _ := e.C.ListEvents(ctx, "modern"); len(evs) != 0 {
		t.Errorf("a function on a supported runtime has events %+v", evs)
	}

	// The install blocks nodejs20 (restarted with --block-runtime nodejs20): the functions stay.
	b := e.Restarted(api.WithRuntimePolicy(apiv1.RuntimePolicy{Blocked: []string{apiv1.RuntimeNodejs20}, Now: clock}))
	items, err = b.C.Runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(items, func(r apiv1.Runtime) bool { return r.Name == apiv1.RuntimeNodejs20 }); i < 0 ||
		items[i].Status != apiv1.RuntimeBlocked || items[i].BlockedSince != "" || items[i].Replacement != apiv1.RuntimeNodejs22 {
		t.Errorf("nodejs20 blocked by the install: %+v", items)
	}
	before, err := b.C.ListFunctions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	modern, _ := b.C.GetFunction(ctx, "modern")
	// A create on it: 400 naming the replacement, nothing stored.
	status, header, out = sendJSON(t, b, http.MethodPost, "/functions", apiv1.Function{Name: "fresh", Runtime: apiv1.RuntimeNodejs20})
	if status != http.StatusBadRequest || !strings.Contains(string(out), apiv1.CodeInvalidArgument) || !strings.Contains(string(out), "blocked") ||
		!strings.Contains(string(out), apiv1.RuntimeNodejs22) || header.Get("Warning") != "" {
		t.Errorf("create on blocked nodejs20: %d %s (Warning %q), want 400 naming nodejs22", status, out, header.Get("Warning"))
	}
	if _, err := b.C.GetFunction(ctx, "fresh"); !client.IsNotFound(err) {
		t.Errorf("a refused create was stored: %v", err)
	}
	if evs, _ := b.C.ListEvents(ctx, "fresh"); len(evs) != 0 {
		t.Errorf("a refused create left events %+v", evs)
	}
	// A move to it: 400 naming the replacement, nothing changed.
	status, _, out = sendJSON(t, b, http.MethodPut, "/functions/modern", apiv1.Function{Name: "modern", Runtime: apiv1.RuntimeNodejs20, MemoryMB: 512})
	if status != http.StatusBadRequest || !strings.Contains(string(out), "blocked") || !strings.Contains(string(out), apiv1.RuntimeNodejs22) {
		t.Errorf("moving modern to blocked nodejs20: %d %s, want 400 naming nodejs22", status, out)
	}
	if after, err := b.C.GetFunction(ctx, "modern"); err != nil || after.Runtime != apiv1.RuntimeNodejs22 || after.MemoryMB != modern.MemoryMB {
		t.Errorf("a refused move changed the function: %+v %v", after, err)
	}
	// In place on it: admitted, with the warning (header and event).
	status, header, out = sendJSON(t, b, http.MethodPut, "/functions/legacy", apiv1.Function{Name: "legacy", Runtime: apiv1.RuntimeNodejs20, MemoryMB: 384})
	warns = apiv1.ParseWarnings(header.Values("Warning"))
	if status != http.StatusOK || len(warns) != 1 || !strings.Contains(warns[0], "blocked") || !strings.Contains(warns[0], apiv1.RuntimeNodejs22) {
		t.Errorf("in-place update on blocked nodejs20: %d %s, Warning %q", status, out, header.Values("Warning"))
	}
	if f, err := b.C.GetFunction(ctx, "legacy"); err != nil || f.MemoryMB != 384 || f.Runtime != apiv1.RuntimeNodejs20 {
		t.Errorf("the in-place update was not stored: %+v %v", f, err)
	}
	wantEvent(t, b, "legacy", apiv1.ReasonRuntimeBlocked, apiv1.RuntimeNodejs22)
	if after, _ := b.C.ListFunctions(ctx); len(after) != len(before) {
		t.Errorf("functions before the refusals: %d, after: %d", len(before), len(after))
	}
	// Away from it: no warning.
	status, header, out = sendJSON(t, b, http.MethodPut, "/functions/legacy", apiv1.Function{Name: "legacy", Runtime: apiv1.RuntimeNodejs22, MemoryMB: 384})
	if status != http.StatusOK || header.Get("Warning") != "" {
		t.Errorf("moving legacy to nodejs22: %d %s, Warning %q", status, out, header.Values("Warning"))
	}

	// An install cannot block what the catalog does not have.
	if _, err := api.New(e.Be, api.WithVerifier(e.verifier), api.WithRuntimePolicy(apiv1.RuntimePolicy{Blocked: []string{"nodejs18"}})); err == nil ||
		!strings.Contains(err.Error(), "nodejs18") {
		t.Errorf("blocking an unknown runtime: %v", err)
	}
}

// sendJSON sends body to the tenant's path under its namespace and returns status, headers and
// the answer's body.
func sendJSON(t *testing.T, e *Env, method, path string, body any) (int, http.Header, []byte) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, e.URL+"/v1/namespaces/"+e.NS+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+e.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// wantEvent checks that the function's last event is a Warning of reason whose message names
// replacement (the API writes it before it answers).
func wantEvent(t *testing.T, e *Env, name, reason, replacement string) {
	t.Helper()
	evs, err := e.C.ListEvents(context.Background(), name)
	if err != nil {
		t.Fatalf("events of %s: %v", name, err)
	}
	if n := len(evs); n == 0 || evs[n-1].Type != apiv1.EventWarning || evs[n-1].Reason != reason || !strings.Contains(evs[n-1].Message, replacement) {
		t.Errorf("events of %s: %+v, want a last Warning %s naming %s", name, evs, reason, replacement)
	}
}
