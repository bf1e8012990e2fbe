package ports_test

import (
	"testing"

	"github.com/sless-dev/sless/internal/ports"
)

// A port is handed out once per process, even when the kernel offers it again before anyone
// bound it.
func TestFreeNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := ports.Free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
