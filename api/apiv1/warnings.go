package apiv1

import (
	"strings"
)

// WarningCode is the warn-code of the API's warnings: 299, "miscellaneous persistent warning", as
// the Kubernetes API sends its deprecation warnings.
const WarningCode = "299"

// WarningHeader is the value of a `Warning` response header carrying text (RFC 7234 §5.5): the
// code 299, no agent ("-") and text as a quoted string, backslash-escaping `"` and `\`. Characters a
// header value cannot carry (controls, and anything beyond ASCII, which some clients mangle) become
// "?".
func WarningHeader(text string) string {
	var b strings.Builder
	b.WriteString(WarningCode + ` - "`)
	for _, r := range text {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t' || (r >= ' ' && r < 0x7f):
			b.WriteRune(r)
		default:
			b.WriteByte('?')
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ParseWarnings returns the texts of the 299 warnings in a response's `Warning` header values
// (each value may hold several, separated by commas); warnings of other codes and malformed ones
// are left out.
func ParseWarnings(values []string) []string {
	var out []string
	for _, v := range values {
		for s := strings.TrimLeft(v, " \t,"); s != ""; s = strings.TrimLeft(s, " \t,") {
			code, rest, ok := strings.Cut(s, " ")
			if !ok {
				break
			}
			_, rest, ok = strings.Cut(strings.TrimLeft(rest, " "), " ") // the agent
			if !ok {
				break
			}
			text, rest, ok := quoted(strings.TrimLeft(rest, " "))
			if !ok {
				break
			}
			// An optional warn-date (a quoted string) follows before the next warning.
			if r := strings.TrimLeft(rest, " \t"); strings.HasPrefix(r, `"`) {
				if _, after, ok := quoted(r); ok {
					rest = after
				}
			}
			if code == WarningCode {
				out = append(out, text)
			}
			s = rest
		}
	}
	return out
}

// quoted reads an RFC 7230 quoted-string at the start of s: its unescaped content and what follows.
func quoted(s string) (text, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(c)
		}
	}
	return "", s, false
}
