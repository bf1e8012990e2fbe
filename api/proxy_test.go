package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// A function whose address does not accept connections yet (kube-proxy lags a pod's readiness; a
// rollout just replaced it) gets the request once it does: nothing was sent, so even a POST with a
// body is retried, and it arrives whole.
func TestProxyRetriesUntilTheFunctionListens(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	e.Ensure()
	port := testenv.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	e.Function("late")
	e.Ready("late", "http://"+addr)
	got := make(chan string, 1)
	go func() {
		time.Sleep(400 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			got <- "listen: " + err.Error()
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- r.Method + " " + string(b)
			io.WriteString(w, "late but there")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}()
	code, _, body := e.Raw("POST", "/fn/"+e.NS+"/late", "", "text/plain", []byte("the whole body"))
	if code != 200 || string(body) != "late but there" {
		t.Fatalf("%d %s", code, body)
	}
	if g := <-got; g != "POST the whole body" {
		t.Errorf("the function got %q", g)
	}
}

// An instance that cannot be reached is resolved again on each retry: a rollout replaced it and
// the request goes to the new one.
func TestProxyRetryResolvesAgain(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	e.Ensure()
	e.Function("moved")
	e.Ready("moved", fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)))
	up, _ := apitest.EchoUpstream(t)
	go func() {
		time.Sleep(200 * time.Millisecond)
		e.Resolver.Set(e.NS, "moved", up.URL)
	}()
	if code, _, body := e.Raw("POST", "/fn/"+e.NS+"/moved", "", "text/plain", []byte("hello")); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
}

// With a serving view (the Kubernetes backend's cache), /fn/ reads functions and triggers from it,
// not from the stores the REST routes use.
func TestProxyReadsTheServingView(t *testing.T) {
	code, _ := codestore.NewDir(t.TempDir())
	res := apitest.NewResolver()
	backend, _ := memstore.Backend(code, res)
	view, viewStores := memstore.Backend(code, res)
	backend.Serving = &objects.ServingView{Functions: view.Functions, Triggers: view.Triggers}
	v, _ := auth.New(auth.WithHS256Secret(apitest.Secret))
	srv, err := api.New(backend, api.WithVerifier(v), api.WithTempDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	up, _ := apitest.EchoUpstream(t)
	ns := "sless-00000000000000f1"
	res.Set(ns, "seen", up.URL)
	view.Functions.Create(context.Background(), ns, objects.FunctionSpec{Name: "seen", Runtime: "python3.11"})
	viewStores.Functions.SetStatus(ns, "seen", func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady })
	if resp, err := http.Get(hs.URL + "/fn/" + ns + "/seen"); err != nil || resp.StatusCode != 200 {
		t.Errorf("a function in the serving view only: %v %v", resp, err)
	}
	backend.Functions.Create(context.Background(), ns, objects.FunctionSpec{Name: "stored", Runtime: "python3.11"})
	res.Set(ns, "stored", up.URL)
	if resp, err := http.Get(hs.URL + "/fn/" + ns + "/stored"); err != nil || resp.StatusCode != 404 {
		t.Errorf("a function not (yet) in the serving view: %v %v, want 404", resp, err)
	}
}
