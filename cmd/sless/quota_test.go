package main

import (
	"io"
	"testing"

	"github.com/sless-dev/sless/local"
)

// sless up's per-tenant caps: the documented defaults, quantities for memory, 0 for no cap.
func TestUpQuotaFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want local.Quota
	}{
		{nil, local.Quota{Functions: 100, MemoryMB: 8192, Runs: 5}},
		{[]string{"--tenant-quota-functions", "3", "--tenant-quota-memory", "640Mi", "--tenant-quota-runs", "1"}, local.Quota{Functions: 3, MemoryMB: 640, Runs: 1}},
		{[]string{"--tenant-quota-functions", "0", "--tenant-quota-memory", "0", "--tenant-quota-runs", "0"}, local.Quota{}},
		{[]string{"--tenant-quota-memory", "1500k"}, local.Quota{Functions: 100, MemoryMB: 2, Runs: 5}}, // rounded up, never to "no cap"
	} {
		c, err := parseUpFlags(tc.args, io.Discard)
		if err != nil || c.quota != tc.want {
			t.Errorf("%v: %+v %v, want %+v", tc.args, c, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"--tenant-quota-memory", "lots"}, {"--tenant-quota-memory", "-1Gi"}, {"--tenant-quota-runs", "-1"}} {
		if _, err := parseUpFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
