package testenv

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
)

// AcceptAndClose accepts every connection to ln and closes it at once, until ln is closed: a
// target that only says whether a connection got through.
func AcceptAndClose(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// LinkLocal is the IPv6 link-local address the kernel derives from mac (EUI-64): what an
// interface with IPv6 on has, and what an attacker next to it computes.
func LinkLocal(t testing.TB, mac string) string {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		t.Fatalf("MAC %q: %v", mac, err)
	}
	return fmt.Sprintf("fe80::%02x%02x:%02xff:fe%02x:%02x%02x", hw[0]^2, hw[1], hw[2], hw[3], hw[4], hw[5])
}

// MustRun runs a command of the test's setup (ip, iptables) and fails t with its output if it
// fails.
func MustRun(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}
