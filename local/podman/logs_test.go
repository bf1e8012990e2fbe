package podman

import (
	"bytes"
	"strings"
	"testing"
)

// Logs keeps the end of what podman prints, however much and however written.
func TestTailBufferKeepsTheEnd(t *testing.T) {
	var all bytes.Buffer
	tb := &tailBuffer{max: 100}
	for i, n := range []int{10, 95, 3, 250, 1, 99, 100, 7} {
		p := []byte(strings.Repeat(string(rune('a'+i)), n))
		all.Write(p)
		if w, err := tb.Write(p); w != n || err != nil {
			t.Fatalf("write of %d: %d %v", n, w, err)
		}
		want := all.Bytes()[max(0, all.Len()-100):]
		if !bytes.Equal(tb.b, want) {
			t.Fatalf("after %d bytes: %q, want %q", all.Len(), tb.b, want)
		}
	}
}
