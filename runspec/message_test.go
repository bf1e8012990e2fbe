package runspec_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sless-dev/sless/runspec"
)

// A message is clipped to 4 KiB from its front, at a character boundary, and made valid UTF-8.
func TestClipMessage(t *testing.T) {
	for name, c := range map[string]struct {
		in       string
		want     int // bytes
		wantTail string
	}{
		"short":              {in: `{"sum": 600}`, want: 12, wantTail: `{"sum": 600}`},
		"exactly 4 KiB":      {in: strings.Repeat("x", runspec.MaxResultBytes), want: runspec.MaxResultBytes, wantTail: "xxx"},
		"a 1 MiB line":       {in: strings.Repeat("x", 1<<20) + "THE END", want: runspec.MaxResultBytes, wantTail: "THE END"},
		"multi-byte at edge": {in: strings.Repeat("ж", 1<<12) + "конец", want: runspec.MaxResultBytes - 1, wantTail: "конец"},
		"invalid UTF-8":      {in: "bad \xff\xfe end", want: len("bad \uFFFD end"), wantTail: "\uFFFD end"},
	} {
		got := runspec.ClipMessage(c.in)
		if len(got) != c.want || !strings.HasSuffix(got, c.wantTail) || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes ending %q (valid UTF-8: %v), want %d ending %q", name, len(got), got[max(0, len(got)-12):], utf8.ValidString(got), c.want, c.wantTail)
		}
		if len(c.in) > runspec.MaxResultBytes && !strings.HasPrefix(got, "…") {
			t.Errorf("%s: a clipped message does not say so: %q…", name, got[:12])
		}
	}
}
