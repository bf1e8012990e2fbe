package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

func fnB(ns, fn string, mb int) booking {
	return booking{ns: ns, fn: fn, role: runspec.RoleFunction, mb: mb}
}

func jobB(ns, fn string, mb int) booking {
	return booking{ns: ns, fn: fn, role: runspec.RoleJob, mb: mb}
}

// The ledger's accounting, with podman's listing played by a map (the real listing is exercised
// by local's TestTenantQuotas against podman).
func TestLedger(t *testing.T) {
	ctx := context.Background()
	listed := map[string]booking{"a-old": fnB("a", "old", 128), "b-big": fnB("b", "big", 400)}
	lists := 0
	l := newLedger(func(context.Context) (map[string]booking, error) {
		lists++
		out := map[string]booking{}
		for k, v := range listed {
			out[k] = v
		}
		return out, nil
	})
	if err := l.reserve(ctx, "x", fnB("a", "x", 1<<20), false); err != nil || lists != 0 {
		t.Fatalf("without limits: %v (listed %d times)", err, lists)
	}
	l.setLimits(Limits{MemoryMB: 512, Runs: 2})
	must := func(name string, b booking) {
		t.Helper()
		if err := l.reserve(ctx, name, b, false); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	refused := func(name string, b booking, runs bool) *QuotaError {
		t.Helper()
		err := l.reserve(ctx, name, b, false)
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Runs != runs || !errors.Is(err, objects.ErrQuotaExceeded) {
			t.Fatalf("%s: %v, want a quota error (runs %v)", name, err, runs)
		}
		if _, ok := l.b[name]; ok {
			t.Fatalf("%s was refused but booked", name)
		}
		return qe
	}

	// What runs already (read from podman on first use) counts, per namespace.
	must("a-f", fnB("a", "f", 256))   // 128 + 256
	must("a-j1", jobB("a", "f", 128)) // 512: full
	if lists != 1 {
		t.Errorf("listed %d times, want once (on first use)", lists)
	}
	qe := refused("a-j2", jobB("a", "f", 64), false)
	if qe.Used != 512 || qe.Asked != 64 || qe.Never() || !strings.Contains(qe.Error(), "512 MiB of the 512 MiB") {
		t.Errorf("memory refusal %+v: %v", qe, qe)
	}
	must("b-x", fnB("b", "x", 100)) // another namespace: 400 + 100

	// Released memory is free again; runs are counted apart from memory.
	l.release("a-j1")
	must("a-j2", jobB("a", "f", 64))
	must("a-c", booking{ns: "a", fn: "f", role: runspec.RoleCron, mb: 32})
	qe = refused("a-j3", jobB("a", "f", 0), true)
	if !strings.Contains(qe.Error(), "2 job and cron runs going") {
		t.Errorf("runs refusal: %v", qe)
	}

	// A function's new container takes its old one's place: 128 + 96 (runs) + 288 = 512.
	must("a-f-v2", booking{ns: "a", fn: "f", role: runspec.RoleFunction, mb: 288, version: "v2", replaces: true})
	refused("a-g", fnB("a", "g", 32), false) // but both versions count for everyone else
	qe = refused("a-huge", fnB("a", "huge", 600), false)
	if !qe.Never() || !strings.Contains(qe.Error(), "lower memory_mb") {
		t.Errorf("a container beyond the whole limit: %v (never %v)", qe, qe.Never())
	}

	// A run reserved before it starts is taken over, not counted twice nor checked again.
	l.setLimits(Limits{MemoryMB: 512, Runs: 3})
	l.release("a-f")  // the old version went
	l.release("a-j2") // a run ended: 448 taken
	must("a-j4", jobB("a", "f", 32))
	if err := l.reserve(ctx, "a-j4", jobB("a", "f", 32), true); err != nil || len(l.b) != 6 {
		t.Errorf("taking over a reservation: %v, %d booked", err, len(l.b))
	}
}

// Before refusing, the ledger reads podman again (at most every refreshEvery): a container that
// exited or was removed by hand stops counting; one reserved but not started yet keeps counting.
func TestLedgerRefreshesBeforeRefusing(t *testing.T) {
	ctx := context.Background()
	listed := map[string]booking{"a-old": fnB("a", "old", 300)}
	l := newLedger(func(context.Context) (map[string]booking, error) {
		out := map[string]booking{}
		for k, v := range listed {
			out[k] = v
		}
		return out, nil
	})
	l.setLimits(Limits{MemoryMB: 512})
	if err := l.reserve(ctx, "a-starting", fnB("a", "starting", 100), false); err != nil {
		t.Fatal(err)
	}
	delete(listed, "a-old") // removed behind sless's back
	// Just refreshed: refused on what it knows.
	if err := l.reserve(ctx, "a-new", fnB("a", "new", 200), false); err == nil {
		t.Fatal("admitted without a refresh due")
	}
	l.refreshed = time.Now().Add(-refreshEvery)
	if err := l.reserve(ctx, "a-new", fnB("a", "new", 200), false); err != nil {
		t.Fatalf("after the refresh: %v", err)
	}
	if _, ok := l.b["a-starting"]; !ok {
		t.Error("a reserved container, not listed yet, was dropped by the refresh")
	}
	l.refreshed = time.Now().Add(-refreshEvery)
	if err := l.reserve(ctx, "a-more", fnB("a", "more", 300), false); err == nil {
		t.Error("admitted beyond the limit: 100 reserved + 200 + 300")
	}
}

// The instances of one version all count: a scaled-out function takes its memory limit once per
// container; only the version a new one replaces is left out.
func TestLedgerCountsEveryInstance(t *testing.T) {
	ctx := context.Background()
	l := newLedger(func(context.Context) (map[string]booking, error) { return map[string]booking{}, nil })
	l.setLimits(Limits{MemoryMB: 300})
	v1, v2 := "sless-a-f-0123456789ab-c0ffee", "sless-a-f-ba9876543210-123456"
	book := func(name string) error {
		return l.reserve(ctx, name, booking{ns: "a", fn: "f", role: runspec.RoleFunction, mb: 128, version: versionOf(name)}, false)
	}
	if err := errors.Join(book(v1), book(v1+"-1")); err != nil {
		t.Fatal(err)
	}
	var qe *QuotaError
	if err := book(v1 + "-2"); !errors.As(err, &qe) || qe.Used != 256 {
		t.Fatalf("a third instance of 128 MiB under 300: %v, want a QuotaError with 256 used", err)
	}
	// A new version replaces v1: its first instance fits beside v1's two; its second does not
	// (v1's are counted against it, or versions switched in a row could each hold the quota).
	first := booking{ns: "a", fn: "f", role: runspec.RoleFunction, mb: 128, version: v2, replaces: true}
	if err := l.reserve(ctx, v2, first, false); err != nil {
		t.Fatalf("the new version's first instance: %v", err)
	}
	if err := book(v2 + "-1"); !errors.As(err, &qe) {
		t.Fatalf("the new version's second instance while the old one's two run: %v, want a QuotaError", err)
	}
}

func TestVersionOf(t *testing.T) {
	for name, want := range map[string]string{
		"sless-a-f-0123456789ab-c0ffee":          "sless-a-f-0123456789ab-c0ffee",
		"sless-a-f-0123456789ab-123456":          "sless-a-f-0123456789ab-123456", // six digits: the config hash
		"sless-a-f-0123456789ab-123456-7":        "sless-a-f-0123456789ab-123456",
		"sless-a-f-0123456789ab-123456-42":       "sless-a-f-0123456789ab-123456",
		"sless-a-f-0123456789ab-123456-previous": "sless-a-f-0123456789ab-123456-previous",
		"sless-a-f-0123456789ab-123456-07":       "sless-a-f-0123456789ab-123456-07",
	} {
		if got := versionOf(name); got != want {
			t.Errorf("versionOf(%s) = %s, want %s", name, got, want)
		}
		if got := ofVersion(name, want); !got {
			t.Errorf("ofVersion(%s, %s) = false", name, want)
		}
	}
}
