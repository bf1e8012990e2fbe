package runspec

import (
	"strings"
	"unicode/utf8"
)

// ClipMessage bounds a run's message (its result, else the last line it printed, or its error
// output) to MaxResultBytes, the size of a Kubernetes termination message. Like the kubelet, which
// reads the end of the termination-message file, it keeps the end: what a run printed last says
// how it ended. A clipped message starts with "…"; the result is valid UTF-8.
func ClipMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxResultBytes {
		return s
	}
	const mark = "…"
	cut := len(s) - (MaxResultBytes - len(mark))
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return mark + s[cut:]
}
