package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
)

// timing is the platform's Server-Timing of a held request: offsets from the hold's start.
type timing struct {
	hold, decision, start, ready time.Duration
	has                          map[string]bool
}

func parseServerTiming(h http.Header) timing {
	t := timing{has: map[string]bool{}}
	for _, v := range h.Values("Server-Timing") {
		for _, e := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(e), ";")
			dur, ok := strings.CutPrefix(strings.TrimSpace(params), "dur=")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(dur, 64)
			if err != nil {
				continue
			}
			d := time.Duration(f * float64(time.Millisecond))
			switch name {
			case "sless-hold":
				t.hold = d
			case "sless-decision":
				t.decision = d
			case "sless-start":
				t.start = d
			case "sless-ready":
				t.ready = d
			default:
				continue
			}
			t.has[name] = true
		}
	}
	return t
}

// coldResult is one cold request as the client saw it.
type coldResult struct {
	sent      time.Time
	firstByte time.Duration // sent → the response's first byte
	st        timing
	body      string
	code      int
}

// coldRequest sends one request on a new connection and times its first byte.
func coldRequest(ctx context.Context, url string) (coldResult, error) {
	var r coldResult
	var first time.Time
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { first = time.Now() },
	}), http.MethodGet, url, nil)
	if err != nil {
		return r, err
	}
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	r.sent = time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r.firstByte, r.st, r.body, r.code = first.Sub(r.sent), parseServerTiming(resp.Header), strings.TrimSpace(string(b)), resp.StatusCode
	return r, nil
}

// pct is the nearest-rank percentile p (0–100) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	d := slices.Clone(ds)
	slices.Sort(d)
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// parts are named series of one measurement, printed as p50/p95 rows.
type parts struct {
	names []string
	ds    map[string][]time.Duration
}

func (p *parts) add(name string, d time.Duration) {
	if p.ds == nil {
		p.ds = map[string][]time.Duration{}
	}
	if _, ok := p.ds[name]; !ok {
		p.names = append(p.names, name)
	}
	p.ds[name] = append(p.ds[name], d)
}

func (p *parts) p50(name string) time.Duration { return pct(p.ds[name], 50) }

func (p *parts) table(n int) {
	fmt.Println("| part | p50 ms | p95 ms | min–max ms | n |")
	fmt.Println("|---|---|---|---|---|")
	for _, name := range p.names {
		ds := p.ds[name]
		na := ""
		if len(ds) < n {
			na = fmt.Sprintf(" (known in %d of %d)", len(ds), n)
		}
		fmt.Printf("| %s | %s | %s | %s–%s | %d%s |\n", name, ms(pct(ds, 50)), ms(pct(ds, 95)), ms(slices.Min(ds)), ms(slices.Max(ds)), len(ds), na)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func msSince(from, to time.Time) string {
	if to.IsZero() {
		return "n/a"
	}
	return ms(to.Sub(from))
}

// createColdFunction deploys a python function at min_replicas 0 with a short idle timeout.
func createColdFunction(ctx context.Context, cl *apiclient.Client, name string, concurrency int, handler string) (*apiv1.Function, error) {
	if _, err := cl.CreateFunction(ctx, apiv1.Function{Name: name, Runtime: "python3.11", MinReplicas: 0, MaxReplicas: 10,
		Concurrency: concurrency, IdleTimeoutSec: 5}); err != nil {
		return nil, err
	}
	z := zipOf(map[string]string{"handler.py": handler})
	if _, err := cl.Upload(ctx, name, strings.NewReader(string(z)), int64(len(z))); err != nil {
		return nil, err
	}
	return waitReady(ctx, cl, name)
}
