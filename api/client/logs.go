package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// LogsOptions selects what Logs reads.
type LogsOptions struct {
	// Follow keeps the stream open and emits new lines as they come, until ctx ends.
	Follow bool
	// Since is an RFC 3339 time or a duration back from now ("5m"); empty: every line kept.
	Since string
	// Tail is how many of the last lines to send first (0 to apiv1.MaxLogTail); nil: the
	// server's default, apiv1.DefaultLogTail.
	Tail *int
	// Source is apiv1.LogSourceInstances (empty: the default) or apiv1.LogSourceBuild.
	Source string
}

// maxStreamLine bounds one NDJSON line: a LogLine's text is at most apiv1.MaxLogLine bytes, and
// JSON may write a byte as a six-byte \u escape; the rest is the object's other fields.
const maxStreamLine = 6*apiv1.MaxLogLine + 4<<10

// Logs reads a function's log, oldest line first, calling emit for each line as it arrives; an
// error from emit ends the stream with that error. With o.Follow it returns only when ctx ends
// (nil then) or the stream breaks.
func (c *Client) Logs(ctx context.Context, name string, o LogsOptions, emit func(apiv1.LogLine) error) error {
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.Since != "" {
		q.Set("since", o.Since)
	}
	if o.Tail != nil {
		q.Set("tail", strconv.Itoa(*o.Tail))
	}
	if o.Source != "" {
		q.Set("source", o.Source)
	}
	return streamNDJSON(ctx, c, c.nsPath("/functions/%s/logs", name), q, o.Follow, emit)
}

// Events reads a function's lifecycle events, oldest first (since: as LogsOptions.Since), calling
// emit for each; with follow it then emits new ones until ctx ends (nil then).
func (c *Client) Events(ctx context.Context, name string, follow bool, since string, emit func(apiv1.Event) error) error {
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	if since != "" {
		q.Set("since", since)
	}
	return streamNDJSON(ctx, c, c.nsPath("/functions/%s/events", name), q, follow, emit)
}

// ListEvents is the function's events kept now, oldest first.
func (c *Client) ListEvents(ctx context.Context, name string) ([]apiv1.Event, error) {
	var evs []apiv1.Event
	err := c.Events(ctx, name, false, "", func(e apiv1.Event) error {
		evs = append(evs, e)
		return nil
	})
	return evs, err
}

// streamNDJSON GETs path and calls emit with each line decoded as T, as it arrives.
func streamNDJSON[T any](ctx context.Context, c *Client, path string, q url.Values, follow bool, emit func(T) error) error {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawPath = ""
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/x-ndjson, application/json")
	req.Header.Set("User-Agent", c.userAgent)
	hc := c.hc
	if follow && hc.Timeout != 0 {
		// A followed stream lasts as long as ctx: the client's overall timeout would cut it.
		cp := *hc
		cp.Timeout = 0
		hc = &cp
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && follow {
			return nil
		}
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return parseError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	for sc.Scan() {
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("GET %s: decoding a line: %w", path, err)
		}
		if err := emit(v); err != nil {
			return err
		}
	}
	err = sc.Err()
	switch {
	case err == nil:
		return nil
	case follow && ctx.Err() != nil:
		return nil // the caller left: the end of a followed stream
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("GET %s: a line is longer than %d bytes", path, maxStreamLine)
	}
	return fmt.Errorf("GET %s: reading the stream: %w", path, err)
}

// EventWatch reports a function's new events, polled: what a deploy prints as its progress.
type EventWatch struct {
	c    *Client
	name string
	last time.Time
	seen []apiv1.Event // the events at last (told apart when several share a time)
}

// WatchEvents starts watching: Next reports only events after those kept now. Times are the
// server's, so the client's clock does not matter. A function that does not exist yet has no
// events: all its events will be new.
func (c *Client) WatchEvents(ctx context.Context, name string) (*EventWatch, error) {
	w := &EventWatch{c: c, name: name}
	if _, err := w.Next(ctx); err != nil && !IsNotFound(err) {
		return nil, err
	}
	return w, nil
}

// Next is the events added since the last call, oldest first.
func (w *EventWatch) Next(ctx context.Context) ([]apiv1.Event, error) {
	evs, err := w.c.ListEvents(ctx, w.name)
	if err != nil {
		return nil, err
	}
	var out []apiv1.Event
	for _, e := range evs {
		if e.Time.Before(w.last) || (e.Time.Equal(w.last) && containsEvent(w.seen, e)) {
			continue
		}
		if e.Time.After(w.last) {
			w.last, w.seen = e.Time, nil
		}
		w.seen = append(w.seen, e)
		out = append(out, e)
	}
	return out, nil
}

func containsEvent(evs []apiv1.Event, e apiv1.Event) bool {
	for _, x := range evs {
		if x.Time.Equal(e.Time) && x.Reason == e.Reason && x.Message == e.Message && x.CodeSHA256 == e.CodeSHA256 {
			return true
		}
	}
	return false
}

// FailureLogLines is how many log lines a Failure carries.
const FailureLogLines = 20

// Failure explains a deploy that ended Failed: the stage that failed, why, and the end of the
// log that shows it.
type Failure struct {
	// Stage is the last stage before the last Failed event (an apiv1.Reason* such as Building or
	// Starting): the step that failed, or for Stored and Built the one that finished before the
	// failing step began. Empty when the events do not say.
	Stage   string
	Message string
	// Source is the log Lines come from: apiv1.LogSourceBuild, or apiv1.LogSourceInstances
	// when the function failed to start.
	Source string
	Lines  []apiv1.LogLine
	// LogErr is why the log could not be read, if it could not (the failure is still reported).
	LogErr error
}

// startStages are the stages a failure after which the instances' log explains: the image was
// built, so what failed is its start.
var startStages = map[string]bool{apiv1.ReasonBuilt: true, apiv1.ReasonStarting: true, apiv1.ReasonReady: true}

// doneStages are the events that say a step finished (the others say one began): a failure that
// follows one happened in the next step, which the events do not name (Stored is followed by the
// dependency install or the image build).
var doneStages = map[string]bool{apiv1.ReasonStored: true, apiv1.ReasonBuilt: true, apiv1.ReasonReady: true}

// ExplainFailure reads why function f failed: its events name the stage, and the last
// FailureLogLines of the build log (of the instances' log when it failed to start) show it.
func (c *Client) ExplainFailure(ctx context.Context, f *apiv1.Function) *Failure {
	fl := &Failure{Message: f.Status.Message, Source: apiv1.LogSourceBuild}
	if evs, err := c.ListEvents(ctx, f.Name); err == nil {
		fl.Stage, fl.Message = failedStage(evs, fl.Message)
	}
	read := func(source string) {
		fl.Source, fl.Lines, fl.LogErr = source, nil, nil
		fl.LogErr = c.Logs(ctx, f.Name, LogsOptions{Tail: new(FailureLogLines), Source: source}, func(l apiv1.LogLine) error {
			fl.Lines = append(fl.Lines, l)
			return nil
		})
	}
	switch {
	case startStages[fl.Stage]:
		read(apiv1.LogSourceInstances)
	case fl.Stage != "":
		read(apiv1.LogSourceBuild)
	default:
		// No events say where it failed: the build's log, else the instances'.
		if read(apiv1.LogSourceBuild); len(fl.Lines) == 0 {
			read(apiv1.LogSourceInstances)
		}
	}
	return fl
}

// failedStage finds the last Failed event and the stage it ended: the reason of the event before
// it. msg is kept when the event has none.
func failedStage(evs []apiv1.Event, msg string) (stage, message string) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Reason != apiv1.ReasonFailed {
			continue
		}
		if evs[i].Message != "" {
			msg = evs[i].Message
		}
		for j := i - 1; j >= 0; j-- {
			if evs[j].Type == apiv1.EventWarning && evs[j].Reason != apiv1.ReasonFailed {
				continue // a warning (a deprecated runtime) is no stage
			}
			if r := evs[j].Reason; r != apiv1.ReasonFailed && r != apiv1.ReasonReady {
				return r, msg
			}
		}
		return "", msg
	}
	return "", msg
}

// String is the failure as a Terraform diagnostic shows it: Summary, then LogText.
func (f *Failure) String() string { return f.Summary() + "\n" + f.LogText() }

// Summary is "failed at stage <stage>: <message>", "failed after stage <stage>: …" when the stage is
// one that finished (Stored, Built), "failed: <message>" when the stage is unknown.
func (f *Failure) Summary() string {
	switch {
	case f.Stage == "":
		return "failed: " + f.Message
	case doneStages[f.Stage]:
		return fmt.Sprintf("failed after stage %s: %s", f.Stage, f.Message)
	}
	return fmt.Sprintf("failed at stage %s: %s", f.Stage, f.Message)
}

// LogText is the log's last lines under a heading naming the log, indented; or why there are none.
func (f *Failure) LogText() string {
	what := "build log"
	if f.Source == apiv1.LogSourceInstances {
		what = "instance log"
	}
	switch {
	case f.LogErr != nil:
		return fmt.Sprintf("(the %s could not be read: %v)", what, f.LogErr)
	case len(f.Lines) == 0:
		return fmt.Sprintf("(the %s is empty)", what)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "last %d lines of the %s:", len(f.Lines), what)
	for _, l := range f.Lines {
		b.WriteString("\n  ")
		if f.Source == apiv1.LogSourceInstances && l.Instance != "" {
			b.WriteString(l.Instance + " ")
		}
		b.WriteString(l.Line)
	}
	return b.String()
}

// Settled reports whether function f has settled on code sha: Failed, or Ready with its Ready
// condition, where the platform reports one, True (a Ready phase can still be the previous
// version's while the new one starts).
func Settled(f *apiv1.Function, sha string) bool {
	if f.Status.CodeSHA256 != sha {
		return false
	}
	switch f.Status.Phase {
	case apiv1.PhaseFailed:
		return true
	case apiv1.PhaseReady:
		c := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
		return c == nil || c.Status == "True"
	}
	return false
}
