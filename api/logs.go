package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/objects"
)

// logPoll is how often a followed log looks for new instances and for a new build log.
const logPoll = time.Second

// logWriteWindow is how long one write of a followed log may take before the stream ends (a
// client that stopped reading).
const logWriteWindow = 30 * time.Second

// logsQuery is GET …/logs's parameters.
type logsQuery struct {
	objects.LogQuery
	source string
}

// streamParams reads since and follow, which …/logs and …/events share.
func streamParams(r *http.Request) (since time.Time, follow bool, err error) {
	v := r.URL.Query()
	if s := v.Get("since"); s != "" {
		if since, err = apiv1.ParseSince(s, time.Now()); err != nil {
			return since, false, invalid("%v", err)
		}
	}
	if f := v.Get("follow"); f != "" {
		if follow, err = strconv.ParseBool(f); err != nil {
			return since, false, invalid("follow %q must be true or false", f)
		}
	}
	return since, follow, nil
}

func parseLogsQuery(r *http.Request) (logsQuery, error) {
	v := r.URL.Query()
	q := logsQuery{source: v.Get("source")}
	var err error
	if q.Tail, err = apiv1.ParseTail(v.Get("tail")); err != nil {
		return q, invalid("%v", err)
	}
	if q.Since, q.Follow, err = streamParams(r); err != nil {
		return q, err
	}
	switch q.source {
	case "":
		q.source = apiv1.LogSourceInstances
	case apiv1.LogSourceInstances, apiv1.LogSourceBuild:
	default:
		return q, invalid("source %q must be %q or %q", q.source, apiv1.LogSourceInstances, apiv1.LogSourceBuild)
	}
	return q, nil
}

// ndjsonWriter writes one object per line and flushes each, under a rolling write deadline.
type ndjsonWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     *json.Encoder
	started bool
}

func newNDJSON(w http.ResponseWriter) *ndjsonWriter {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &ndjsonWriter{w: w, rc: http.NewResponseController(w), enc: enc}
}

// start sends the headers (a followed stream shows it is open before its first line).
func (n *ndjsonWriter) start() {
	if !n.started {
		n.started = true
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.Header().Set("X-Content-Type-Options", "nosniff")
		n.w.WriteHeader(http.StatusOK)
	}
}

func (n *ndjsonWriter) write(v any) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start()
	n.rc.SetWriteDeadline(time.Now().Add(logWriteWindow))
	if err := n.enc.Encode(v); err != nil {
		return err
	}
	return n.rc.Flush()
}

func (n *ndjsonWriter) line(l apiv1.LogLine) error { return n.write(l) }

func (n *ndjsonWriter) flush() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start()
	n.rc.Flush()
}

// logs serves GET /v1/namespaces/{ns}/functions/{name}/logs: the instances' output merged (or the
// last build's log with source=build) as NDJSON, followed with follow=true until the client goes.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("function", name); err != nil {
		writeError(w, r, err)
		return
	}
	q, err := parseLogsQuery(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	ctx, cancel, ok := s.openStream(w, r, ns, name)
	if !ok {
		return
	}
	defer cancel()
	release, ok := s.logSlot(w, r, ns, q.Follow)
	if !ok {
		return
	}
	defer release()
	if q.source == apiv1.LogSourceBuild {
		s.buildLog(ctx, w, r, ns, name, q)
		return
	}
	if s.b.Logs == nil {
		writeError(w, r, apiv1.Errorf(apiv1.CodeNotReady, "this platform keeps no instance logs"))
		return
	}
	// With follow and tail=0, "new" lines are those written from now on, not from whenever each
	// instance's reader first looks (a line printed in between would be lost): every line since
	// this moment.
	if q.Follow && q.Tail == 0 {
		q.Since, q.Tail = later(q.Since, time.Now()), -1
	}
	insts, err := s.b.Logs.LogInstances(ctx, ns, name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !q.Follow {
		// The last Tail lines of all instances together: each instance's last Tail, merged by
		// time, trimmed after each instance to Tail lines and maxLogAnswer bytes.
		var all []apiv1.LogLine
		var errs []error
		for _, in := range insts {
			var mine []apiv1.LogLine
			if err := s.b.Logs.ReadLog(ctx, ns, name, in, q.LogQuery, func(l apiv1.LogLine) error {
				mine = append(mine, l)
				return nil
			}); err != nil {
				errs = append(errs, err)
			}
			all = mergeTail(all, mine, q.Tail)
		}
		if len(insts) > 0 && len(errs) == len(insts) {
			// Every read failed (the kubelet, the store): not an empty log.
			s.o.logger.Warn("reading instance logs", "namespace", ns, "function", name, "error", errs[0])
			writeError(w, r, apiv1.Errorf(apiv1.CodeUpstreamError, "the instances' logs could not be read now; try again"))
			return
		}
		out := newNDJSON(w)
		for _, l := range all {
			if out.write(l) != nil {
				return
			}
		}
		out.flush()
		return
	}
	s.followLogs(ctx, newNDJSON(w), ns, name, insts, q.LogQuery)
}

// maxLogAnswer bounds the lines one GET …/logs holds in memory (and answers) without follow.
const maxLogAnswer = 16 << 20

// mergeTail merges more into lines by time and keeps the last tail (≥ 0; < 0: all) of them, at
// most maxLogAnswer bytes.
func mergeTail(lines, more []apiv1.LogLine, tail int) []apiv1.LogLine {
	lines = append(lines, more...)
	slices.SortStableFunc(lines, func(a, b apiv1.LogLine) int { return a.Time.Compare(b.Time) })
	lines = fnlog.Select(lines, time.Time{}, tail)
	size, i := 0, len(lines)
	for i > 0 && size+len(lines[i-1].Line) <= maxLogAnswer {
		size += len(lines[i-1].Line)
		i--
	}
	return lines[i:]
}

// maxFollowers bounds the followed streams (logs and events) one namespace has open on one API
// replica: each costs a look for instances every second.
const maxFollowers = 16

// maxLogReads bounds the GET …/logs without follow one namespace has in flight on one API
// replica: each holds up to maxLogAnswer bytes of lines (and, on Kubernetes, a kubelet stream per
// pod) until its client has read the answer, which a client that does not read stretches to
// logWriteWindow per write.
const maxLogReads = 4

// logReadRetry is the Retry-After beyond maxLogReads: most reads end within a second.
const logReadRetry = time.Second

// followSlot takes one of ns's followed streams, or answers false when all are taken.
func (s *Server) followSlot(ns string) (release func(), ok bool) {
	return s.slot(s.followers, ns, maxFollowers)
}

// slot takes one of the limit slots of ns counted in counts, or answers false when all are taken.
func (s *Server) slot(counts map[string]int, ns string, limit int) (release func(), ok bool) {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	if counts[ns] >= limit {
		return nil, false
	}
	counts[ns]++
	return func() {
		s.followMu.Lock()
		defer s.followMu.Unlock()
		if counts[ns]--; counts[ns] <= 0 {
			delete(counts, ns)
		}
	}, true
}

// logSlot takes a followed stream's slot (follow) or a read's, or answers 429 throttled with
// Retry-After and false when ns has all of them in use.
func (s *Server) logSlot(w http.ResponseWriter, r *http.Request, ns string, follow bool) (release func(), ok bool) {
	if follow {
		if release, ok = s.followSlot(ns); !ok {
			w.Header().Set("Retry-After", "10")
			writeError(w, r, apiv1.Errorf(apiv1.CodeThrottled, "this namespace follows %d logs or event streams already; close one", maxFollowers))
		}
		return release, ok
	}
	if release, ok = s.slot(s.logReads, ns, maxLogReads); !ok {
		writeError(w, r, &apiv1.Error{Status: http.StatusTooManyRequests, Code: apiv1.CodeThrottled, RetryAfter: logReadRetry,
			Message: fmt.Sprintf("this namespace reads %d logs at once already (without follow); retry when one has been answered", maxLogReads)})
	}
	return release, ok
}

// followLogs streams every instance's lines as they come (the last Tail of each first), and those
// of instances that start meanwhile from their first line, until ctx ends.
func (s *Server) followLogs(ctx context.Context, out *ndjsonWriter, ns, name string, insts []objects.LogInstance, q objects.LogQuery) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	// seen: instances followed or read; a follow that failed is forgotten, to be tried again.
	var mu sync.Mutex
	seen := map[string]bool{}
	follow := func(in objects.LogInstance, q objects.LogQuery) {
		mu.Lock()
		seen[in.ID] = true
		mu.Unlock()
		if in.Stopped {
			// Stopped before the stream began, or between two looks (a crash): its lines once.
			if q.Tail != 0 {
				s.b.Logs.ReadLog(ctx, ns, name, in, objects.LogQuery{Since: q.Since, Tail: q.Tail}, out.line)
			}
			return
		}
		wg.Go(func() {
			err := s.b.Logs.ReadLog(ctx, ns, name, in, q, out.line)
			if err != nil && ctx.Err() == nil {
				var we interface{ Timeout() bool }
				if errors.As(err, &we) || errors.Is(err, http.ErrHandlerTimeout) {
					cancel() // the client stopped reading
					return
				}
				mu.Lock()
				delete(seen, in.ID)
				mu.Unlock()
			}
		})
	}
	for _, in := range insts {
		follow(in, q)
	}
	out.flush()
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := s.b.Logs.LogInstances(ctx, ns, name)
		if err != nil {
			continue
		}
		for _, in := range now {
			mu.Lock()
			known := seen[in.ID]
			mu.Unlock()
			if !known {
				follow(in, objects.LogQuery{Since: q.Since, Tail: -1, Follow: true})
			}
		}
	}
}

// buildLog serves source=build: the last build's lines; followed, the lines a build adds and
// every line of a build that replaces it.
func (s *Server) buildLog(ctx context.Context, w http.ResponseWriter, r *http.Request, ns, name string, q logsQuery) {
	lines, err := fnlog.Load[apiv1.LogLine](ctx, s.b.Code, fnlog.BuildKey(ns, name))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := newNDJSON(w)
	sent := fnlog.Select(lines, q.Since, q.Tail)
	for _, l := range sent {
		if out.write(l) != nil {
			return
		}
	}
	out.flush()
	if !q.Follow {
		return
	}
	last := lines // what the client has seen of the stored log (all of it, or what Select skipped)
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := fnlog.Load[apiv1.LogLine](ctx, s.b.Code, fnlog.BuildKey(ns, name))
		if err != nil {
			continue
		}
		next := now
		// The same build (its first line unchanged) grew: only the new lines. Another build: all.
		if len(last) > 0 && len(now) >= len(last) && now[0] == last[0] {
			next = now[len(last):]
		}
		for _, l := range fnlog.Select(next, q.Since, -1) {
			if out.write(l) != nil {
				return
			}
		}
		last = now
	}
}

// events serves GET /v1/namespaces/{ns}/functions/{name}/events: the function's lifecycle as
// NDJSON, oldest first, followed with follow=true.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("function", name); err != nil {
		writeError(w, r, err)
		return
	}
	since, follow, err := streamParams(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	ctx, cancel, ok := s.openStream(w, r, ns, name)
	if !ok {
		return
	}
	defer cancel()
	evs, err := fnlog.LoadEvents(ctx, s.b.Code, ns, name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	// The same slots as …/logs: a followed stream's, or one of the reads without follow.
	release, ok := s.logSlot(w, r, ns, follow)
	if !ok {
		return
	}
	defer release()
	out := newNDJSON(w)
	// last is the last event sent: the next look sends what follows it in the log (found by
	// value, the log being trimmed at its front), or all of it when it is gone.
	var last *apiv1.Event
	send := func(evs []apiv1.Event) bool {
		from := 0
		if last != nil {
			for i := len(evs) - 1; i >= 0; i-- {
				if evs[i] == *last {
					from = i + 1
					break
				}
			}
		}
		for i := from; i < len(evs); i++ {
			e := evs[i]
			last = &e
			if e.Time.Before(since) {
				continue
			}
			if out.write(e) != nil {
				return false
			}
		}
		return true
	}
	if !send(evs) {
		return
	}
	out.flush()
	if !follow {
		return
	}
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if evs, err := fnlog.LoadEvents(ctx, s.b.Code, ns, name); err == nil && !send(evs) {
			return
		}
	}
}

// openStream checks that the function exists (404 otherwise, answered) and returns the stream's
// context (streamContext).
func (s *Server) openStream(w http.ResponseWriter, r *http.Request, ns, name string) (context.Context, context.CancelFunc, bool) {
	if _, err := s.b.Functions.Get(r.Context(), ns, name); err != nil {
		writeError(w, r, notFound("function", name, err))
		return nil, nil, false
	}
	ctx, cancel := s.streamContext(r.Context())
	return ctx, cancel, true
}

// streamContext ends with the request or when the server starts draining: a followed stream must
// not hold a replica's shutdown for the drain timeout.
func (s *Server) streamContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-ctx.Done():
		case <-s.drained:
			cancel()
		}
	}()
	return ctx, cancel
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
