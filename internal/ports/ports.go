package ports

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

// Free returns a TCP port on 127.0.0.1 that was free a moment ago. Another process can take it
// before the caller binds it; callers that start a server on it must handle that (retry).
func Free() (int, error) { return FreeOn("127.0.0.1") }

// given are the ports this process handed out: the kernel may offer a port again while the first
// caller has not bound it yet, and two servers of one test would then fight over it.
var (
	givenMu sync.Mutex
	given   = map[string]bool{}
)

// FreeOn is Free on another local address (a bridge a test cluster reaches the host on). It never
// returns a port it returned before in this process.
func FreeOn(host string) (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		key := net.JoinHostPort(host, strconv.Itoa(port))
		givenMu.Lock()
		fresh := !given[key]
		given[key] = true
		givenMu.Unlock()
		if fresh {
			return port, nil
		}
	}
	return 0, fmt.Errorf("ports: no port on %s that was not handed out before", host)
}
