package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiclient "github.com/sless-dev/sless/api/client"
)

type rampResult struct {
	concurrency, max, need int
	enough                 time.Duration
	peak                   int32
	ok, failed             int64
	first                  time.Duration
	lat                    []time.Duration
	firstErr               string
}

// rampFunction is the function the ramp loads.
const rampFunction = "ramp"

// ramp: from zero instances, 40 clients send requests back to back for 20 s. atZero waits until
// the function has no instance; ready counts its ready instances (pods, containers) now.
func ramp(ctx context.Context, cl *apiclient.Client, atZero func() error, ready func() int32) (*rampResult, error) {
	const fn, clients, conc, maxR = rampFunction, 40, 10, 10
	if _, err := createColdFunction(ctx, cl, fn, conc, "import time\n\ndef handle(event):\n    time.sleep(0.1)\n    return 'ok'\n"); err != nil {
		return nil, err
	}
	if err := atZero(); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	rr := &rampResult{concurrency: conc, max: maxR, need: min(int(math.Ceil(float64(clients)/conc)), maxR)}
	url := cl.FunctionURL(fn)
	var mu sync.Mutex
	var firstNano atomic.Int64
	start := time.Now()
	end := start.Add(20 * time.Second)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1}}
			var lat []time.Duration
			for time.Now().Before(end) {
				s := time.Now()
				resp, err := c.Get(url)
				var body []byte
				code := 0
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				d := time.Since(s)
				if code == 200 && strings.TrimSpace(string(body)) == "ok" {
					atomic.AddInt64(&rr.ok, 1)
					firstNano.CompareAndSwap(0, int64(time.Since(start)))
					lat = append(lat, d)
					continue
				}
				atomic.AddInt64(&rr.failed, 1)
				mu.Lock()
				if rr.firstErr == "" {
					rr.firstErr = fmt.Sprintf("%d %v %.200s", code, err, body)
				}
				mu.Unlock()
			}
			mu.Lock()
			rr.lat = append(rr.lat, lat...)
			mu.Unlock()
		}()
	}
	for time.Now().Before(end) {
		n := ready()
		if n > rr.peak {
			rr.peak = n
		}
		if rr.enough == 0 && int(n) >= rr.need {
			rr.enough = time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	rr.first = time.Duration(firstNano.Load())
	if len(rr.lat) == 0 {
		rr.lat = []time.Duration{0}
	}
	logf("  ramp: %d instances after %s, peak %d, %d answered, %d failed", rr.need, secsOrNA(rr.enough), rr.peak, rr.ok, rr.failed)
	return rr, nil
}

// print writes the ramp's table.
func (rp *rampResult) print(where, instances, readyBy string) {
	fmt.Printf("\n### Ramp %s: zero %s → 40 concurrent clients for 20 s\n\n", where, instances)
	fmt.Printf("Function: python3.11, `time.sleep(0.1)` per request, concurrency %d, max_replicas %d, min_replicas 0 (so %d %s are enough).\n\n", rp.concurrency, rp.max, rp.need, instances)
	fmt.Println("| measure | value |\n|---|---|")
	fmt.Printf("| seconds until %d %s | %s |\n", rp.need, readyBy, secsOrNA(rp.enough))
	fmt.Printf("| peak ready %s | %d |\n", instances, rp.peak)
	fmt.Printf("| requests answered / failed | %d / **%d** |\n", rp.ok, rp.failed)
	fmt.Printf("| first response (cold) | %s ms |\n", ms(rp.first))
	fmt.Printf("| request latency p50 / p95 / max over the 20 s | %s / %s / %s ms |\n", ms(pct(rp.lat, 50)), ms(pct(rp.lat, 95)), ms(slices.Max(rp.lat)))
	if rp.firstErr != "" {
		fmt.Printf("\nfirst failure: %s\n", rp.firstErr)
	}
}

func secsOrNA(d time.Duration) string {
	if d == 0 {
		return "never (within the 20 s)"
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}
