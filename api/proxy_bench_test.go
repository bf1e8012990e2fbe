package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sless-dev/sless/api/apitest"
)

// BenchmarkProxy is the API's own cost per /fn/ request (a trivial upstream, keep-alive client).
func BenchmarkProxy(b *testing.B) {
	e := apitest.NewEnv(b, apitest.Memstore)
	e.Ensure()
	e.Function("f")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	e.Ready("f", up.URL)
	url := e.URL + "/fn/" + e.NS + "/f/x"
	client := &http.Client{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
	}
}

// BenchmarkDirect is BenchmarkProxy's client and upstream without the API in between.
func BenchmarkDirect(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	client := &http.Client{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Get(up.URL + "/x")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET: %d", resp.StatusCode)
		}
	}
}
