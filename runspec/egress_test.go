package runspec_test

import (
	"fmt"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

func TestEgressInstall(t *testing.T) {
	var e runspec.EgressInstall
	for _, a := range []string{"192.168.7.0/24", "sless-aa=10.0.5.0/24:5432", "sless-bb=10.0.9.9/32:*"} {
		if err := e.AddAllow(a); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"Not_A_NS=10.0.0.0/8:1", "sless-aa=10.0.0.1", "10.0.0.0/8:0"} {
		if err := e.AddAllow(bad); err == nil {
			t.Errorf("--egress-allow %s accepted", bad)
		}
	}
	if err := e.SetDefault("everything"); err == nil {
		t.Error("--egress-default everything accepted")
	}
	if got := fmt.Sprint(e.Permitted("sless-aa")); got != "{internet [192.168.7.0/24 10.0.5.0/24:5432]}" {
		t.Errorf("Permitted(sless-aa) = %s", got)
	}
	if got := fmt.Sprint(e.Permitted("sless-cc")); got != "{internet [192.168.7.0/24]}" {
		t.Errorf("Permitted(sless-cc) = %s", got)
	}
	for _, tc := range []struct {
		choice *apiv1.EgressRule
		want   string
	}{
		{nil, "internet [192.168.7.0/24 10.0.5.0/24:5432]"},
		{&apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.7/32:5432"}}, "none [10.0.5.7/32:5432]"},
		// Wider than the install now: narrowed to it.
		{&apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{"10.0.5.7/32:5433", "10.0.9.9/32"}}, "internet []"},
		// Unreadable: the narrowest.
		{&apiv1.EgressRule{Mode: "x"}, "none []"},
	} {
		m, a := e.Effective("sless-aa", tc.choice)
		if got := fmt.Sprintf("%s %v", m, a); got != tc.want {
			t.Errorf("Effective(%+v) = %s, want %s", tc.choice, got, tc.want)
		}
	}
	e.Default = apiv1.EgressNone
	if m, _ := e.Effective("sless-aa", &apiv1.EgressRule{Mode: apiv1.EgressInternet}); m != apiv1.EgressNone {
		t.Errorf("a choice of internet under an install of none: %s", m)
	}
}
