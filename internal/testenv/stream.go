package testenv

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Streaming handlers for both backends' tests (CheckStreaming): /yield yields, sleeps 1 s, yields; /disconnect yields every 200 ms until
// closed, which it counts in a module global that /closes reads.
const (
	// StreamHandlerPython is the python one.
	StreamHandlerPython = `import time

closes = 0


def handle(event):
    global closes
    p = event["path"]
    if p == "/closes":
        return {"closes": closes}
    if p == "/yield":
        def gen():
            yield "first\n"
            time.sleep(1)
            yield "second\n"
        return gen()
    if p == "/disconnect":
        def gen():
            global closes
            try:
                yield "first\n"
                while True:
                    time.sleep(0.2)
                    yield "tick\n"
            except GeneratorExit:
                closes += 1
                raise
        return gen()
    return "ok"
`
	// StreamHandlerNode is the node one.
	StreamHandlerNode = `let closes = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

exports.handle = async (event) => {
  if (event.path === '/closes') return { closes };
  if (event.path === '/yield') return (async function* () {
    yield 'first\n';
    await sleep(1000);
    yield 'second\n';
  })();
  if (event.path === '/disconnect') return (async function* () {
    try {
      yield 'first\n';
      for (;;) {
        await sleep(200);
        yield 'tick\n';
      }
    } finally {
      closes++; // it never ends by itself: only a close gets here
    }
  })();
  return 'ok';
};
`
)

// CheckStreaming checks a function serving StreamHandlerPython or StreamHandlerNode at fnURL
// (/fn/…, warm: the caller has had an answer from it), with one instance: the first chunk comes
// while the handler still runs (< 300 ms; it sleeps 1 s before its second), and a client that
// goes mid-stream closes the handler's generator, which counts it, and the function serves on.
func CheckStreaming(t *testing.T, fnURL string) {
	t.Helper()
	get := func(path string) (int, string) {
		resp, err := http.Get(fnURL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	closes := func() float64 {
		code, body := get("/closes")
		var m map[string]float64
		if code != 200 || json.Unmarshal([]byte(body), &m) != nil {
			t.Fatalf("/closes: %d %s", code, body)
		}
		return m["closes"]
	}
	before := closes()

	start := time.Now()
	resp, err := http.Get(fnURL + "/yield")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	firstAt := time.Since(start)
	rest, _ := io.ReadAll(br)
	all := time.Since(start)
	resp.Body.Close()
	t.Logf("first chunk through /fn/ after %v, the whole body after %v", firstAt, all)
	if err != nil || first != "first\n" || string(rest) != "second\n" || resp.StatusCode != 200 {
		t.Fatalf("%d %q %q %v", resp.StatusCode, first, rest, err)
	}
	if firstAt > 300*time.Millisecond || all < 900*time.Millisecond {
		t.Errorf("first chunk after %v (want < 300 ms), whole body after %v (the handler sleeps 1 s)", firstAt, all)
	}

	resp, err = http.Get(fnURL + "/disconnect")
	if err != nil {
		t.Fatal(err)
	}
	if first, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || first != "first\n" {
		t.Fatalf("first chunk %q, %v", first, err)
	}
	resp.Body.Close() // unread: the connection closes
	gone := time.Now()
	for closes() != before+1 {
		if time.Since(gone) > 10*time.Second {
			t.Fatalf("the handler did not see the client go within 10 s (closes %v, was %v)", closes(), before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the handler counted the close within %v", time.Since(gone))
	if code, body := get("/x"); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("after the disconnect: %d %s", code, body)
	}
}
