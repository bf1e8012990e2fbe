package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// egressChoices is an objects.Egress in a map.
type egressChoices struct {
	install runspec.EgressInstall
	note    string
	mu      sync.Mutex
	m       map[string]apiv1.EgressRule
}

func (e *egressChoices) Install() runspec.EgressInstall { return e.install }
func (e *egressChoices) Note() string                   { return e.note }

func (e *egressChoices) Choice(_ context.Context, ns string) (*apiv1.EgressRule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.m[ns]; ok {
		return &r, nil
	}
	return nil, nil
}

func (e *egressChoices) SetChoice(_ context.Context, ns string, r apiv1.EgressRule) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[ns] = r
	return nil
}

func egressEnv(t *testing.T, install func(ns string) runspec.EgressInstall, note string) (*apitest.Env, *egressChoices) {
	store := &egressChoices{note: note, m: map[string]apiv1.EgressRule{}}
	b := apitest.Backend{Name: "memstore", New: func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, apitest.Controller) {
		b, _ := memstore.Backend(code, r)
		b.Egress = store
		return b, nil
	}}
	e := apitest.NewEnv(t, b)
	store.install = install(e.NS)
	return e, store
}

func TestEgressRoutes(t *testing.T) {
	e, store := egressEnv(t, func(ns string) runspec.EgressInstall {
		in := runspec.EgressInstall{Default: apiv1.EgressInternet}
		for _, a := range []string{"192.168.7.0/24:*", ns + "=10.0.5.0/24:5432", "sless-0000000000000000=10.9.9.9/32:22"} {
			if err := in.AddAllow(a); err != nil {
				t.Fatal(err)
			}
		}
		return in
	}, "")
	path := "/v1/namespaces/" + e.NS + "/egress"
	get := func() apiv1.Egress {
		t.Helper()
		code, _, body := e.Raw("GET", path, e.Token, "", nil)
		var out apiv1.Egress
		if err := json.Unmarshal(body, &out); code != 200 || err != nil {
			t.Fatalf("GET: %d %s", code, body)
		}
		return out
	}
	if code, ecode, _ := e.Raw("GET", path, e.Token, "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("GET before ensure: %d %s", code, ecode)
	}
	e.Ensure()
	install := apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{"192.168.7.0/24", "10.0.5.0/24:5432"}}
	got := get()
	if got.Mode != apiv1.EgressInternet || strings.Join(got.Allow, ",") != "192.168.7.0/24,10.0.5.0/24:5432" ||
		got.Install.Mode != install.Mode || strings.Join(got.Install.Allow, ",") != strings.Join(install.Allow, ",") || got.Note != "" {
		t.Errorf("GET before any choice: %+v, want all the install permits (never another namespace's 10.9.9.9)", got)
	}

	// Bad input and widenings: 400 naming the entry, nothing stored.
	for body, names := range map[string]string{
		`{"mode":"internet","allow":["10.0.5.7"]}`:                     `"10.0.5.7"`,
		`{"mode":"internet","allow":["10.0.5.7/40:5432"]}`:             `"10.0.5.7/40:5432"`,
		`{"mode":"internet","allow":["10.0.5.7/32:99999"]}`:            `"10.0.5.7/32:99999"`,
		`{"mode":"everything"}`:                                        `"everything"`,
		`{"allow":[]}`:                                                 `mode ""`,
		`{"mode":"none","allow":["10.0.5.7/32:5433"]}`:                 `"10.0.5.7/32:5433"`,
		`{"mode":"none","allow":["10.0.5.7/32"]}`:                      `"10.0.5.7/32"`,
		`{"mode":"none","allow":["10.0.4.0/23:5432"]}`:                 `"10.0.4.0/23:5432"`,
		`{"mode":"none","allow":["10.9.9.9/32:22"]}`:                   `"10.9.9.9/32:22"`, // another namespace's
		`{"mode":"none","allow":["10.0.5.7/32:5432","0.0.0.0/0:443"]}`: `"0.0.0.0/0:443"`,
		`{"mode":"none","allow":"10.0.5.7/32:5432"}`:                   "not valid JSON",
	} {
		code, ecode, resp := e.Raw("PUT", path, e.Token, "application/json", []byte(body))
		if code != 400 || ecode != apiv1.CodeInvalidArgument || !strings.Contains(string(resp), strings.ReplaceAll(names, `"`, `\"`)) {
			t.Errorf("PUT %s: %d %s, want 400 invalid_argument naming %s", body, code, resp, names)
		}
	}
	if len(store.m) != 0 {
		t.Errorf("refused rules were stored: %v", store.m)
	}

	// A narrowing is stored in canonical form and answered as GET answers it.
	code, _, resp := e.Raw("PUT", path, e.Token, "application/json", []byte(`{"mode":"none","allow":["10.0.5.9/24:5432","192.168.7.3/32:80","192.168.7.3/32:80"]}`))
	if code != 200 {
		t.Fatalf("PUT a narrowing: %d %s", code, resp)
	}
	got = get()
	if got.Mode != apiv1.EgressNone || strings.Join(got.Allow, ",") != "10.0.5.0/24:5432,192.168.7.3/32:80" || got.Install.Mode != apiv1.EgressInternet {
		t.Errorf("GET after the narrowing: %+v", got)
	}
	if strings.TrimSpace(string(resp)) != mustJSON(t, got) {
		t.Errorf("PUT answered %s, GET %s", resp, mustJSON(t, got))
	}
	// GET's answer sent back as it is changes nothing.
	if code, _, _ := e.Raw("PUT", path, e.Token, "application/json", []byte(mustJSON(t, got))); code != 200 || mustJSON(t, get()) != mustJSON(t, got) {
		t.Errorf("PUT of GET's answer: %d %+v", code, get())
	}
	// Back to everything the install permits.
	if code, _, resp := e.Raw("PUT", path, e.Token, "application/json", []byte(`{"mode":"internet","allow":["192.168.7.0/24","10.0.5.0/24:5432"]}`)); code != 200 {
		t.Errorf("PUT all the install permits: %d %s", code, resp)
	}

	// Another tenant's namespace: 404, as on every route, and nothing changes.
	other := e.Tenant()
	other.Ensure()
	before := mustJSON(t, get())
	for _, m := range []string{"GET", "PUT"} {
		if code, ecode, _ := other.Raw(m, path, other.Token, "application/json", []byte(`{"mode":"none"}`)); code != 404 || ecode != apiv1.CodeNotFound {
			t.Errorf("%s another tenant's egress: %d %s", m, code, ecode)
		}
	}
	if after := mustJSON(t, get()); after != before {
		t.Errorf("another tenant changed the rule: %s → %s", before, after)
	}
}

// An install whose default is none: mode internet is a widening; one that cannot enforce
// internet says so.
func TestEgressInstallNoneAndNote(t *testing.T) {
	e, _ := egressEnv(t, func(string) runspec.EgressInstall { return runspec.EgressInstall{Default: apiv1.EgressNone} }, "")
	e.Ensure()
	path := "/v1/namespaces/" + e.NS + "/egress"
	if code, _, resp := e.Raw("PUT", path, e.Token, "application/json", []byte(`{"mode":"internet"}`)); code != 400 || !strings.Contains(string(resp), `\"internet\"`) {
		t.Errorf("PUT internet where the install says none: %d %s", code, resp)
	}
	const note = "not enforced here"
	n, _ := egressEnv(t, func(string) runspec.EgressInstall { return runspec.EgressInstall{} }, note)
	n.Ensure()
	_, _, body := n.Raw("GET", "/v1/namespaces/"+n.NS+"/egress", n.Token, "", nil)
	var got apiv1.Egress
	if json.Unmarshal(body, &got); got.Mode != apiv1.EgressInternet || got.Note != note {
		t.Errorf("GET where internet is not enforced: %s", body)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
