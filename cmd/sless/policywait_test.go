package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/internal/testenv"
)

func TestPolicyWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	testenv.AcceptAndClose(ln)
	// Reachable throughout: not enforced, an error at the timeout.
	var out bytes.Buffer
	if err := policyWait(context.Background(), addr, 300*time.Millisecond, &out); err == nil ||
		!strings.Contains(err.Error(), "no NetworkPolicy is enforced") {
		t.Errorf("reachable target: %v", err)
	}
	// Denied after a while (the listener goes, as a policy coming into force would deny it).
	time.AfterFunc(300*time.Millisecond, func() { ln.Close() })
	start := time.Now()
	if err := policyWait(context.Background(), addr, 10*time.Second, &out); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || !strings.Contains(out.String(), "network policy in force") {
		t.Errorf("returned after %v: %s", d, out.String())
	}
}
