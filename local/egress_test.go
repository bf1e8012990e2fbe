package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// Issue 28, part 4 on the single host, with real podman containers: the install's
// NAMESPACE=CIDR:PORT reaches that namespace's containers only; a namespace narrowed to none
// reaches nothing but its allowed destinations, from its containers' first packet (a container
// started after the narrowing too); a widening is refused.
func TestEgressPerNamespace(t *testing.T) {
	testenv.NewPodman(t)
	outside := testenv.StartOutside(t)
	const ownerSub = "egress-owner@example.com"
	ownerNS := apiv1.NamespaceFor(ownerSub)
	meta, err := url.Parse(outside.MetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	// The metadata stand-in (denied to everyone: 169.254/16) allowed to one namespace, on its port.
	allowed := meta.Hostname() + "/32:" + meta.Port()
	u := startUp(t, t.TempDir(), "", "", "--egress-allow", ownerNS+"="+allowed)
	owner := &up{SlessUp: u.SlessUp, c: otherTenant(t, u, ownerSub), token: u.token, url: u.url, dataDir: u.dataDir}
	ctx := context.Background()
	u.deploy(t, "probe", "python3.11", map[string]string{"handler.py": pyProbe})
	owner.deploy(t, "probe", "python3.11", map[string]string{"handler.py": pyProbe})

	targets := map[string]string{"outside": outside.URL + "/", "allowed": outside.MetadataURL + "/"}
	probe := func(t *testing.T, who *up, fn string) map[string]any {
		t.Helper()
		tj, _ := json.Marshal(targets)
		code, body := u.get("/fn/" + who.c.Namespace() + "/" + fn + "?t=" + url.QueryEscape(string(tj)))
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("probe: %d %s", code, body)
		}
		return got
	}
	expect := func(t *testing.T, who string, got map[string]any, outsideOK, allowedOK bool) {
		t.Helper()
		for k, ok := range map[string]bool{"outside": outsideOK, "allowed": allowedOK} {
			want := any("unreachable")
			if ok {
				want = float64(200)
			}
			if got[k] != want {
				t.Errorf("%s, %s (%s): %v, want %v", who, k, targets[k], got[k], want)
			}
		}
	}
	expect(t, "a plain namespace", probe(t, u, "probe"), true, false)
	expect(t, "the namespace the install allows more", probe(t, owner, "probe"), true, true)
	eg, err := owner.c.GetEgress(ctx)
	if err != nil || eg.Mode != apiv1.EgressInternet || strings.Join(eg.Allow, ",") != allowed || eg.Note != "" {
		t.Errorf("GET egress: %+v %v", eg, err)
	}

	// Widenings: 400 naming the entry, the rule unchanged.
	for _, w := range []struct {
		c    *up
		rule apiv1.EgressRule
		name string
	}{
		{u, apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{allowed}}, allowed},
		{owner, apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"169.254.0.0/16:8000"}}, "169.254.0.0/16:8000"},
	} {
		var e *apiv1.Error
		if _, err := w.c.c.SetEgress(ctx, w.rule); !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, w.name) {
			t.Errorf("PUT %+v: %v, want 400 naming %s", w.rule, err, w.name)
		}
	}
	expect(t, "a plain namespace after its refused widening", probe(t, u, "probe"), true, false)

	if _, err := owner.c.SetEgress(ctx, apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{allowed}}); err != nil {
		t.Fatal(err)
	}
	expect(t, "narrowed to none and its allow", probe(t, owner, "probe"), false, true)
	if _, err := owner.c.SetEgress(ctx, apiv1.EgressRule{Mode: apiv1.EgressNone}); err != nil {
		t.Fatal(err)
	}
	expect(t, "narrowed to none", probe(t, owner, "probe"), false, false)
	// A container started now is under the rule from its start.
	owner.deploy(t, "probe2", "python3.11", map[string]string{"handler.py": pyProbe})
	expect(t, "a new container of the namespace narrowed to none", probe(t, owner, "probe2"), false, false)
	expect(t, "a plain namespace meanwhile", probe(t, u, "probe"), true, false)
	// A restart keeps the rule (bbolt) and the containers' registrations (Sync).
	u.stop()
	u2 := startUp(t, u.dataDir, u.Listen, u.RegAddr, "--egress-allow", ownerNS+"="+allowed)
	owner.SlessUp, u.SlessUp = u2.SlessUp, u2.SlessUp
	expect(t, "narrowed to none, after a restart", probe(t, owner, "probe"), false, false)
	expect(t, "a plain namespace, after a restart", probe(t, u, "probe"), true, false)
	// Back to what the install permits.
	if _, err := owner.c.SetEgress(ctx, apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{allowed}}); err != nil {
		t.Fatal(err)
	}
	expect(t, "back to what the install permits", probe(t, owner, "probe"), true, true)
}
