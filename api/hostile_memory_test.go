package api_test

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apitest"
)

// TestHostileRequestsMemory: requests with made-up methods of up to a megabyte each, as anyone
// could send to /fn/, must not grow the heap or /metrics. Before the method label was bounded and
// headers limited to 64 KiB, 600 such requests of 1000 KiB left 594 MiB in use and 601 series
// (PROBE_METHOD_KIB varies the method's length).
func TestHostileRequestsMemory(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	host := strings.TrimPrefix(e.URL, "http://")
	hdr := ""
	long := strings.Repeat("A", 1000<<10)
	if n, _ := strconv.Atoi(os.Getenv("PROBE_METHOD_KIB")); n > 0 {
		long = strings.Repeat("A", n<<10)
	}
	codes := map[string]int{}
	for i := range 300 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "M%04d%s /fn/x/y HTTP/1.1\r\nHost: a\r\n%sConnection: close\r\n\r\n", i, long, hdr)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 12)
		n, _ := c.Read(buf)
		codes[string(buf[min(9, n):n])]++
		c.Close()
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	mfs, _ := e.Srv.Metrics().Gather()
	series := 0
	methods := map[string]bool{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "sless_http") {
			series += len(mf.Metric)
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetName() == "method" {
						methods[l.GetValue()] = true
					}
				}
			}
		}
	}
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 32<<20 {
		t.Errorf("heap in use grew by %d MiB", grown>>20)
	}
	if len(methods) > 10 || series > 40 {
		t.Errorf("%d method values, %d series", len(methods), series)
	}
	t.Logf("codes %v; heap in use %.1f MiB -> %.1f MiB; TotalAlloc +%.0f MiB; sless_http series %d; method values %d",
		codes, float64(before.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20),
		float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), series, len(methods))
}
