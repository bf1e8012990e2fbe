package autoscale

import (
	"fmt"
	"testing"
	"time"
)

// Memory per function is bounded by the stable window, however often the proxies report and
// however many instances come and go; Forget gives it all back.
func TestMemoryIsBounded(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	d, err := New(WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 * 60 * 100 { // 10 minutes at 100 reports a second
		d.Record("ns/fn", Sample{InFlight: i % 50})
		if i%100 == 0 {
			d.Decide("ns/fn", Input{Ready: []Instance{{ID: fmt.Sprint("pod-", i/100)}}})
		}
		now = now.Add(10 * time.Millisecond)
	}
	f := d.fns["ns/fn"]
	if len(f.buckets) != 60 {
		t.Errorf("%d buckets, want 60", len(f.buckets))
	}
	if len(f.firstSeen) != 1 {
		t.Errorf("%d instances remembered, want the 1 ready now", len(f.firstSeen))
	}

	for i := range 1000 {
		key := fmt.Sprint("ns/fn", i)
		d.Record(key, Sample{InFlight: 1})
		d.Decide(key, Input{Ready: []Instance{{ID: "a"}}})
	}
	for i := range 1000 {
		d.Forget(fmt.Sprint("ns/fn", i))
	}
	d.Forget("ns/fn")
	if len(d.fns) != 0 {
		t.Errorf("%d functions left after Forget", len(d.fns))
	}
}
