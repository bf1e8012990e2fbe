package ports

import "net"

// Free returns a TCP port on 127.0.0.1 that was free a moment ago. Another process can take it
// before the caller binds it; callers that start a server on it must handle that (retry).
func Free() (int, error) { return FreeOn("127.0.0.1") }

// FreeOn is Free on another local address (a bridge a test cluster reaches the host on).
func FreeOn(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
