package apiv1_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// The lifecycle by date and by the install: nodejs20 is supported before 2026-04-30 and deprecated
// from that day (a warning naming nodejs22); blocked by the install, it takes no new function and
// no function moving to it, while one already on it is admitted with a warning.
func TestRuntimePolicy(t *testing.T) {
	day := func(s string) func() time.Time {
		return func() time.Time { d, _ := time.Parse(time.DateOnly, s); return d.Add(23 * time.Hour) }
	}
	before := apiv1.RuntimePolicy{Now: day("2026-04-29")}
	if r, _ := before.Lookup("nodejs20"); r.Status != apiv1.RuntimeSupported {
		t.Errorf("nodejs20 the day before: %+v", r)
	}
	if w, err := before.Admit("nodejs20", ""); w != "" || err != nil {
		t.Errorf("the day before: %q %v", w, err)
	}
	on := apiv1.RuntimePolicy{Now: day("2026-04-30")}
	if r, _ := on.Lookup("nodejs20"); r.Status != apiv1.RuntimeDeprecated {
		t.Errorf("nodejs20 on the day: %+v", r)
	}
	if w, err := on.Admit("nodejs20", ""); err != nil || !strings.Contains(w, "deprecated since 2026-04-30") || !strings.Contains(w, "nodejs22") {
		t.Errorf("deprecated: %q %v", w, err)
	}
	blocked := apiv1.RuntimePolicy{Blocked: []string{"nodejs20", "python3.13"}, Now: day("2026-04-30")}
	for _, tc := range []struct{ rt, previous, want string }{{"nodejs20", "", "use nodejs22"}, {"nodejs20", "nodejs22", "use nodejs22"}, {"python3.13", "", "use a supported runtime"}} {
		w, err := blocked.Admit(tc.rt, tc.previous)
		var ae *apiv1.Error
		if w != "" || err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidArgument {
			t.Errorf("Admit(%s, %q) blocked: %q %v, want invalid_argument saying %q", tc.rt, tc.previous, w, err, tc.want)
		}
	}
	if w, err := blocked.Admit("nodejs20", "nodejs20"); err != nil || !strings.Contains(w, "blocked") || !strings.Contains(w, "nodejs22") {
		t.Errorf("in place on a blocked runtime: %q %v", w, err)
	}
	if w, err := blocked.Admit("nodejs22", "nodejs20"); w != "" || err != nil {
		t.Errorf("away from a blocked runtime: %q %v", w, err)
	}
	if err := (apiv1.RuntimePolicy{Blocked: []string{"nodejs18"}}).Validate(); err == nil || !strings.Contains(err.Error(), "nodejs18") {
		t.Errorf("an unknown blocked runtime: %v", err)
	}
	if n := len(on.List()); n != len(apiv1.Runtimes()) {
		t.Errorf("List has %d runtimes, the catalog %d", n, len(apiv1.Runtimes()))
	}
}
