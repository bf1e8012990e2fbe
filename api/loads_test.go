package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/invoke"
)

// The internal listener's handler reports what /fn/ serves now, per function and instance; the
// public handler does not serve it.
func TestLoadsHandlerServesTheActivatorsLoad(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	e.Ensure()
	e.Function("slow")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}))
	defer up.Close()
	e.Ready("slow", up.URL)
	loads := httptest.NewServer(e.Srv.LoadsHandler(nil))
	defer loads.Close()

	done := make(chan int, 1)
	go func() {
		code, _, _ := e.Raw("GET", "/fn/"+e.NS+"/slow", "", "", nil)
		done <- code
	}()
	<-entered
	var l apiv1.Loads
	getJSON(t, loads.URL+apiv1.LoadsPath, &l)
	if len(l.Functions) != 1 {
		t.Fatalf("loads %+v", l)
	}
	f := l.Functions[0]
	if f.Namespace != e.NS || f.Name != "slow" || f.InFlight != 1 || f.Held != 0 || len(f.Instances) != 1 ||
		f.Instances[0].InFlight != 1 || f.Instances[0].ID == "" || time.Since(f.Instances[0].LastActive) > time.Minute {
		t.Errorf("loads %+v", l)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("the request answered %d", code)
	}

	// Neither the public handler nor the internal one without Pokes serve the other paths.
	for _, u := range []string{e.URL + apiv1.LoadsPath, e.URL + apiv1.PokesPath, loads.URL + apiv1.PokesPath} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || strings.Contains(string(b), "slow") {
			t.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
		}
	}
}

// A poll of PokesPath answers as soon as a request is held (Poke), with the functions poked, or
// with none when its wait ends; a poke with no poll waiting does not block.
func TestPokesLongPoll(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	p := invoke.NewPokes()
	p.Poke("sless-0000000000000001", "nobody-listens")
	srv := httptest.NewServer(e.Srv.LoadsHandler(p))
	defer srv.Close()

	got := make(chan apiv1.Pokes, 1)
	go func() {
		var out apiv1.Pokes
		getJSON(t, srv.URL+apiv1.PokesPath+"?wait=10s", &out)
		got <- out
	}()
	want := apiv1.FunctionRef{Namespace: "sless-0000000000000001", Name: "hot"}
	start := time.Now()
poking: // until the poll waits (a poke with none waiting is dropped)
	for {
		p.Poke(want.Namespace, want.Name)
		select {
		case out := <-got:
			if len(out.Functions) != 1 || out.Functions[0] != want {
				t.Errorf("pokes %+v, want %+v only", out, want)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("the poll answered after %v", time.Since(start))
			}
			break poking
		case <-time.After(20 * time.Millisecond):
		}
	}
	start = time.Now()
	var out apiv1.Pokes
	getJSON(t, srv.URL+apiv1.PokesPath+"?wait=100ms", &out)
	if len(out.Functions) != 0 || time.Since(start) < 100*time.Millisecond || time.Since(start) > 5*time.Second {
		t.Errorf("a quiet poll answered %+v after %v", out, time.Since(start))
	}
	if resp, err := http.Get(srv.URL + apiv1.PokesPath + "?wait=soon"); err != nil || resp.StatusCode != 400 {
		t.Errorf("a bad wait: %v %v", resp, err)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET %s: %s", url, resp.Status)
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Error(err)
	}
}
