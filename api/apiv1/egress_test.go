package apiv1_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
)

func TestParseEgressAllow(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.5.7/32:5432":   "10.0.5.7/32:5432",
		"10.0.5.7/24:5432":   "10.0.5.0/24:5432",
		"10.0.5.0/24:*":      "10.0.5.0/24",
		"10.0.5.0/24":        "10.0.5.0/24",
		"2001:db8::/64:443":  "2001:db8::/64:443",
		"2001:db8::1/128":    "2001:db8::1/128",
		"0.0.0.0/0:53":       "0.0.0.0/0:53",
		"198.18.0.1/32:8000": "198.18.0.1/32:8000",
	} {
		a, err := apiv1.ParseEgressAllow(in)
		if err != nil || a.String() != want {
			t.Errorf("%s: %v %v, want %s", in, a, err, want)
		}
	}
	for _, bad := range []string{"", "10.0.5.7", "10.0.5.7:5432", "10.0.5.300/32:1", "10.0.5.7/33:1", "10.0.5.7/32:0", "10.0.5.7/32:65536",
		"10.0.5.7/32:http", "::ffff:10.0.0.1/128:80", "10.0.5.7/32:5432 "} {
		_, err := apiv1.ParseEgressAllow(bad)
		var e *apiv1.Error
		if !errors.As(err, &e) || e.Code != apiv1.CodeInvalidArgument || !strings.Contains(e.Message, "egress allow") {
			t.Errorf("%q: %v, want invalid_argument", bad, err)
		}
	}
}

func TestNarrowerEgress(t *testing.T) {
	permitted := apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{"10.0.5.0/24:5432", "10.0.6.0/24"}}
	for _, ok := range []apiv1.EgressRule{
		{Mode: apiv1.EgressInternet},
		{Mode: apiv1.EgressNone},
		{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.7/32:5432", "10.0.6.0/25:80", "10.0.6.0/24"}},
	} {
		if err := apiv1.NarrowerEgress(permitted, ok); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, tc := range []struct {
		want  apiv1.EgressRule
		names string
	}{
		{apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.7/32:5433"}}, `"10.0.5.7/32:5433"`},
		{apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.7/32"}}, `"10.0.5.7/32"`}, // any port where 5432 only
		{apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.7/32:5432", "10.0.4.0/23:5432"}}, `"10.0.4.0/23:5432"`},
		{apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"2001:db8::/64:5432"}}, `"2001:db8::/64:5432"`},
		{apiv1.EgressRule{Mode: "all"}, `"all"`},
		{apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.7"}}, `"10.0.5.7"`},
	} {
		err := apiv1.NarrowerEgress(permitted, tc.want)
		var e *apiv1.Error
		if !errors.As(err, &e) || e.Code != apiv1.CodeInvalidArgument || !strings.Contains(e.Message, tc.names) {
			t.Errorf("%+v: %v, want invalid_argument naming %s", tc.want, err, tc.names)
		}
	}
	none := apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.5.0/24:5432"}}
	if err := apiv1.NarrowerEgress(none, apiv1.EgressRule{Mode: apiv1.EgressInternet}); err == nil || !strings.Contains(err.Error(), `"internet"`) {
		t.Errorf("internet where the install says none: %v", err)
	}
}
