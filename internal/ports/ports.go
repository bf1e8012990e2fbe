// Package ports picks loopback ports at run time.
package ports

import "net"

// Free returns a TCP port on 127.0.0.1 that was free a moment ago. Another process can take it
// before the caller binds it; callers that start a server on it must handle that (retry).
func Free() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
