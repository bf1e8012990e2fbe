package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// HeldRead sends GET path with token to the server at baseURL ("http://host:port") on a
// connection with a 4 KiB receive buffer, reads the status line, which must be 200, and no more:
// the server is then writing an answer its client does not take, as a slow or hostile client
// makes it. Close the connection to let the server go on.
func HeldRead(t testing.TB, baseURL, path, token string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: sless\r\nAuthorization: Bearer %s\r\n\r\n", path, token)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	status, err := bufio.NewReaderSize(c, 16).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("a held read of %s: %q %v", path, status, err)
	}
	return c
}

// AuthGet sends GET url with token as the Bearer (none when it is empty) and returns the
// answer's status, header and body.
func AuthGet(t testing.TB, url, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
