package api

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of WithUploadRate.
const (
	DefaultUploadsPerMinute = 30
	DefaultUploadBurst      = 20
	// UploadsInFlight is how many uploads of one namespace may be received at once: each holds a
	// spooled file and a connection for up to the upload timeout.
	UploadsInFlight = 2
	// inFlightRetry is the Retry-After while UploadsInFlight are being received: an upload may
	// take minutes, so asking again every second would only add load.
	inFlightRetry = 5 * time.Second
)

// tenantLimits admits a namespace's uploads: a token bucket per namespace (so one tenant cannot
// queue builds faster than the platform makes them for everyone) and at most UploadsInFlight
// received at once.
type tenantLimits struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*tenantLimit
}

type tenantLimit struct {
	bucket   *rate.Limiter
	inFlight int
}

func newTenantLimits(perMinute float64, burst int) *tenantLimits {
	r := rate.Limit(perMinute / 60)
	if perMinute <= 0 {
		r = rate.Inf
	}
	return &tenantLimits{rate: r, burst: max(burst, 1), m: map[string]*tenantLimit{}}
}

// limit is ns's state, made on first use (t.mu held).
func (t *tenantLimits) limit(ns string, now time.Time) *tenantLimit {
	l := t.m[ns]
	if l == nil {
		if len(t.m) >= 4096 {
			t.prune(now)
		}
		l = &tenantLimit{bucket: rate.NewLimiter(t.rate, t.burst)}
		t.m[ns] = l
	}
	return l
}

// takeToken takes one token of l's bucket, or says how long until one would be there (t.mu held).
func takeToken(l *tenantLimit, now time.Time) time.Duration {
	res := l.bucket.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// admit takes one upload of ns, or says how long until one would be admitted. release must be
// called when the upload is done.
func (t *tenantLimits) admit(ns string) (release func(), retryAfter time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	l := t.limit(ns, now)
	if l.inFlight >= UploadsInFlight {
		return nil, inFlightRetry
	}
	if d := takeToken(l, now); d > 0 {
		return nil, d
	}
	l.inFlight++
	return func() {
		t.mu.Lock()
		l.inFlight--
		t.mu.Unlock()
	}, 0
}

// rebuild takes one token of ns's bucket for a change that rebuilds code already stored (a new
// entrypoint or runtime), or says how long until one would be there. It holds no in-flight slot:
// nothing is received.
func (t *tenantLimits) rebuild(ns string) (retryAfter time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	return takeToken(t.limit(ns, now), now)
}

// prune forgets namespaces with nothing in flight and a full bucket: they are as a new one.
func (t *tenantLimits) prune(now time.Time) {
	for ns, l := range t.m {
		if l.inFlight == 0 && l.bucket.TokensAt(now) >= float64(t.burst) {
			delete(t.m, ns)
		}
	}
}

// retryAfterSeconds is a Retry-After value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }
