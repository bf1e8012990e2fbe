package main

import (
	"context"
	"io"
	"testing"

	"github.com/sless-dev/sless/local"
)

// parseUp runs `sless up`'s command line up to the point where it would start.
func parseUp(args []string) (*upConfig, error) {
	var got *upConfig
	cmd := upCmd(func(_ context.Context, c *upConfig, _, _ io.Writer) error { got = c; return nil })
	cmd.SetArgs(append([]string{}, args...)) // nil would make cobra read os.Args
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return got, cmd.Execute()
}

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
		c, err := parseUp(tc.args)
		if err != nil || c.localQuota() != tc.want {
			t.Errorf("%v: %+v %v, want %+v", tc.args, c, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"--tenant-quota-memory", "lots"}, {"--tenant-quota-memory", "-1Gi"}, {"--tenant-quota-runs", "-1"}} {
		if _, err := parseUp(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
