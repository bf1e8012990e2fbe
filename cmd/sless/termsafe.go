package main

import (
	"strings"
	"unicode/utf8"
)

// termSafe is s without what a terminal would act on rather than show: ECMA-48 escape and control
// sequences (CSI such as "\x1b[2J", OSC such as "\x1b]0;title\x07", DCS, SOS, PM and APC strings,
// in their 7-bit "ESC x" and 8-bit C1 forms, removed whole), every other C0 and C1 control but
// "\n" and "\t", and DEL. Bytes that are not UTF-8 become U+FFFD, so that no lone byte 0x80–0x9f
// reaches a terminal that reads it as C1. Log lines and events carry what tenant code wrote:
// printed raw, they could retitle the operator's terminal, clear it, move the cursor to overwrite
// earlier lines, or make it answer (and so type) on its own.
func termSafe(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\n' && c != '\t' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s // the common case: printable ASCII
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
			i++
		case r == 0x1b: // ESC
			i = skipEscape(s, i+1)
		case r == 0x9b: // CSI
			i = skipCSI(s, i+n)
		case r == 0x9d || r == 0x90 || r == 0x98 || r == 0x9e || r == 0x9f: // OSC, DCS, SOS, PM, APC
			i = skipString(s, i+n)
		case r < 0x20 && r != '\n' && r != '\t', r >= 0x7f && r <= 0x9f:
			i += n
		default:
			b.WriteString(s[i : i+n])
			i += n
		}
	}
	return b.String()
}

// skipEscape returns the end of the escape sequence whose ESC ended before i.
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[':
		return skipCSI(s, i+1)
	case ']', 'P', 'X', '^', '_':
		return skipString(s, i+1)
	}
	// ESC, intermediate bytes (0x20–0x2f), a final byte (0x30–0x7e): "\x1b(B", "\x1bc", "\x1b7".
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
		i++
	}
	if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
		i++
	}
	return i
}

// skipCSI returns the end of a control sequence whose introducer ended before i: parameter bytes
// (0x30–0x3f), intermediate bytes (0x20–0x2f), then the final byte (0x40–0x7e). A sequence cut
// short by any other byte ends before it.
func skipCSI(s string, i int) int {
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x3f {
		i++
	}
	if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
		i++
	}
	return i
}

// skipString returns the end of a command string (OSC, DCS, SOS, PM, APC) whose introducer ended
// before i: up to and including its terminator, ST ("\x1b\\" or C1 0x9c) or, as xterm accepts for
// OSC, BEL. An unterminated one runs to the end of s, as a terminal would swallow it.
func skipString(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == 0x07:
			return i + 1
		case s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\':
			return i + 2
		case s[i] == 0x1b:
			return i // an ESC that is not ST aborts the string and starts a sequence of its own
		case strings.HasPrefix(s[i:], "\u009c"):
			return i + len("\u009c")
		}
		i++
	}
	return i
}
