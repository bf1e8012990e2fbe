package main

import (
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
