package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

func TestFormatLogLineAndEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 2, 3, 456e6, time.FixedZone("X", 3600))
	for _, tc := range []struct {
		l    apiv1.LogLine
		want string
	}{
		{apiv1.LogLine{Time: at, Instance: "sless-sless-0123456789abcdef-hello-32517697c8e9-4aaf43", Stream: apiv1.StreamStdout, Line: "hi"},
			"2026-12-01T20:02:03.456Z 32517697c8e9-4aaf43 hi\n"},
		{apiv1.LogLine{Time: at, Instance: "hello-5d8f7c9b4-x2x7z", Stream: apiv1.StreamStderr, Line: "oops"},
			"2026-12-01T20:02:03.456Z 5d8f7c9b4-x2x7z stderr oops\n"},
		{apiv1.LogLine{Time: at, Instance: "other", Stream: apiv1.StreamOutput, Line: "x"}, "2026-12-01T20:02:03.456Z other x\n"},
		{apiv1.LogLine{Time: at, Instance: "hello-", Stream: apiv1.StreamOutput, Line: "x"}, "2026-12-01T20:02:03.456Z hello- x\n"},
		{apiv1.LogLine{Time: at, Instance: "build", Stream: apiv1.StreamBuild, Line: "building: …"}, "2026-12-01T20:02:03.456Z building: …\n"},
	} {
		if got := formatLogLine("hello", tc.l); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.l, got, tc.want)
		}
	}
	e := apiv1.Event{Time: at, Type: apiv1.EventWarning, Reason: apiv1.ReasonFailed, Message: "build failed: x", CodeSHA256: "0123456789abcdef"}
	if got, want := formatEvent(e), "2026-12-01T20:02:03.456Z Failed                 build failed: x (code 0123456789ab)\n"; got != want {
		t.Errorf("event %q, want %q", got, want)
	}
}

// What a function writes reaches `sless logs` (and an install's output `sless fn events`) without
// anything a terminal would act on: titles, clears, cursor moves, carriage returns, 8-bit
// introducers, device queries; the visible text stays.
func TestHostileOutputIsNotTerminalControl(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 2, 3, 456e6, time.UTC)
	for _, tc := range []struct{ line, want string }{
		{"\x1b]0;pwned\x07title", "title"},                       // OSC, BEL-terminated
		{"\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\", "link"}, // OSC 8 hyperlink, ST-terminated
		{"\x1b[2J\x1b[Hcleared", "cleared"},                      // erase display, cursor home
		{"done\rfake line", "donefake line"},                     // carriage return overwrites
		{"a\x1b[1A\x1b[2Kb", "ab"},                               // cursor up, erase line
		{"\u009b31mred\u009b0m", "red"},                          // 8-bit CSI as UTF-8
		{"\u009d0;t\u009cx", "x"},                                // 8-bit OSC … ST
		{"\x9b31mraw", "\ufffd31mraw"},                           // a lone 0x9b byte is not UTF-8
		{"\x1bP+q544e\x1b\\q", "q"},                              // DCS (XTGETTCAP)
		{"\x1b[6n\x1b[c\x1bZ", ""},                               // cursor position and device attribute queries
		{"\x1b(0lqk\x1b(B", "lqk"},                               // charset designation
		{"bell\x07 bs\x08 nul\x00 del\x7f vt\x0b ff\x0c", "bell bs nul del vt ff"},
		{"\x1b]0;never terminated", ""},
		{"tab\tkept", "tab\tkept"},
		{"multi\nline", "multi\nline"},
		{"ünïcödé ✓ 日本", "ünïcödé ✓ 日本"},
	} {
		got := formatLogLine("hello", apiv1.LogLine{Time: at, Instance: "hello-x", Stream: apiv1.StreamStdout, Line: tc.line})
		if want := "2026-12-01T20:02:03.456Z x " + tc.want + "\n"; got != want {
			t.Errorf("line %q: %q, want %q", tc.line, got, want)
		}
	}
	if got := formatLogLine("hello", apiv1.LogLine{Time: at, Instance: "hello-\x1b[2Jx", Line: "l"}); got != "2026-12-01T20:02:03.456Z x l\n" {
		t.Errorf("instance with a control sequence: %q", got)
	}
	e := apiv1.Event{Time: at, Type: apiv1.EventWarning, Reason: apiv1.ReasonFailed, Message: "pip: \x1b]0;pwned\x07\x1b[31merror\x1b[0m\r"}
	if got, want := formatEvent(e), "2026-12-01T20:02:03.456Z Failed                 pip: error\n"; got != want {
		t.Errorf("event %q, want %q", got, want)
	}
}

// -o json keeps what the function wrote, as JSON escapes only: no raw DEL or C1 control (which
// encoding/json leaves raw) reaches the terminal, and the line decodes to what was written.
func TestJSONLinesEscapeControls(t *testing.T) {
	l := apiv1.LogLine{Line: "a\x1b[2J\u009b31m\u009d0;t\u009c\x7fé✓"}
	var b strings.Builder
	if err := printJSONLine(&b, l); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x7f\u009b\u009c\u009d") || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("-o json line %q carries raw controls", out)
	}
	var back apiv1.LogLine
	if err := json.Unmarshal([]byte(out), &back); err != nil || back.Line != l.Line {
		t.Errorf("-o json line %q decodes to %q %v, want %q", out, back.Line, err, l.Line)
	}
}

// A status message carries what a build or a run printed (a job's last line, pip's error): `fn
// get`, the Message column of `fn ls` and a deploy's progress show it without terminal controls.
func TestStatusMessagesAreNotTerminalControl(t *testing.T) {
	hostile := "failed: \x1b]0;pwned\x07\x1b[2J\rerror\u009b31m!"
	var b bytes.Buffer
	f := &apiv1.Function{Name: "hello", Runtime: "python3.11", Status: apiv1.FunctionStatus{Phase: apiv1.PhaseFailed, Message: hostile}}
	if err := describeFunction(&b, f); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{b.String(), oneLine(hostile, 60)} {
		if strings.ContainsAny(out, "\x1b\x07\r\u009b") || !strings.Contains(out, "failed: error!") {
			t.Errorf("shown as %q", out)
		}
	}
}

// A rabbitmq trigger's state in `sless triggers ls`: its counts when connected, else its last error
// (the broker's or the platform's text) without terminal controls.
func TestRabbitMQStateIsNotTerminalControl(t *testing.T) {
	got := rabbitMQState(apiv1.TriggerStatus{LastError: "connecting: \x1b]0;pwned\x07\x1b[2J\rrefused\u009b31m"})
	if strings.ContainsAny(got, "\x1b\x07\r\u009b") || !strings.HasPrefix(got, "not connected: connecting: refused") {
		t.Errorf("shown as %q", got)
	}
	if got := rabbitMQState(apiv1.TriggerStatus{Connected: true, DeliveredTotal: 7, DeadLetteredTotal: 1, InFlight: 2}); got != "connected, 7 delivered, 1 dead-lettered, 2 in flight" {
		t.Errorf("connected: %q", got)
	}
}
