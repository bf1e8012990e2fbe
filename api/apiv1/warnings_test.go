package apiv1_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
)

func TestWarningHeader(t *testing.T) {
	for text, want := range map[string]string{
		"runtime nodejs20 is deprecated; move to nodejs22": `299 - "runtime nodejs20 is deprecated; move to nodejs22"`,
		`a "quoted" \ word`: `299 - "a \"quoted\" \\ word"`,
		"bell\a and é":      `299 - "bell? and ?"`,
	} {
		if got := apiv1.WarningHeader(text); got != want {
			t.Errorf("WarningHeader(%q) = %s, want %s", text, got, want)
		}
	}
}

func TestParseWarnings(t *testing.T) {
	h := http.Header{}
	h.Add("Warning", apiv1.WarningHeader(`one, with a "comma"`))
	h.Add("Warning", `299 - "two" "Wed, 21 Oct 2015 07:28:00 GMT", 110 proxy "stale", 299 api.example:443 "three"`)
	h.Add("Warning", `299 - "unterminated`)
	h.Add("Warning", `garbage`)
	got := apiv1.ParseWarnings(h.Values("Warning"))
	if want := []string{`one, with a "comma"`, "two", "three"}; !slices.Equal(got, want) {
		t.Errorf("ParseWarnings = %q, want %q", got, want)
	}
	if got := apiv1.ParseWarnings(nil); got != nil {
		t.Errorf("no header: %q", got)
	}
}
