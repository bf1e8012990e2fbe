package invoke

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sless-dev/sless/activator"
)

// confineResponse keeps a function's response to its own part of the origin it shares with every
// other function (prefix "/fn/{ns}/{name}") and with the API, and to its own host (prefix ""):
//   - Service-Worker-Allowed would let /fn/A/sw.js control /fn/B/ (or the whole origin) in a
//     visitor's browser; Clear-Site-Data would wipe every tenant's storage: both are dropped.
//   - Set-Cookie loses Domain= (cookies stay host-only: never sent to the parent domain or sibling
//     functions' hosts), and under /fn/ its Path is placed under the prefix ("/" becomes the
//     prefix, "/x" prefix+"/x"; a path already under it is kept), so a browser sends it only to
//     this function. A cookie that does not parse is dropped.
func confineResponse(h http.Header, prefix string) {
	h.Del("Service-Worker-Allowed")
	h.Del("Clear-Site-Data")
	cookies := h.Values("Set-Cookie")
	if len(cookies) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range cookies {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			continue
		}
		c.Domain = ""
		if prefix != "" && c.Path != prefix && !strings.HasPrefix(c.Path, prefix+"/") {
			// An absent Path defaults to the request's directory: for /fn/ns/name that is /fn/ns,
			// every function of the namespace.
			c.Path = prefix + strings.TrimSuffix("/"+strings.TrimPrefix(c.Path, "/"), "/")
		}
		if v := c.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
}

// PlatformTimingPrefix names the Server-Timing entries /fn/ adds to a response whose request was
// held; a function's own entries with this prefix are dropped, so they cannot be forged.
const PlatformTimingPrefix = "sless-"

// serverTiming is the Server-Timing value of a held request (W3C Server Timing): every duration
// is in milliseconds from the moment the request began to wait —
//
//	sless-hold       until it got its slot and was forwarded
//	sless-decision   until the backend decided to start the instance it went to (cold only; left
//	                 out when the backend does not say)
//	sless-start      until that instance was first listed with an address (cold only)
//	sless-ready      until it passed its health check (cold only)
//
// An instance already asked for, listed or ready before the request arrived shows 0 there. A
// request held only because every ready instance was at its concurrency has sless-hold alone.
func serverTiming(t activator.Timing, cold bool) string {
	b := make([]byte, 0, 96)
	add := func(name string, at time.Time) {
		if at.IsZero() {
			return
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, PlatformTimingPrefix...)
		b = append(b, name...)
		b = append(b, ";dur="...)
		b = strconv.AppendFloat(b, max(float64(at.Sub(t.HeldAt).Microseconds())/1000, 0), 'f', 1, 64)
	}
	add("hold", t.Granted)
	if cold {
		add("decision", t.Requested)
		add("start", t.Listed)
		add("ready", t.Ready)
	}
	return string(b)
}

// dropPlatformTimings removes a function's Server-Timing entries named with the platform's prefix
// and keeps its others.
func dropPlatformTimings(h http.Header) {
	var kept []string
	for _, v := range h["Server-Timing"] {
		for _, e := range splitHeaderList(v) {
			name, _, _ := strings.Cut(e, ";")
			name = strings.TrimSpace(name)
			if len(name) >= len(PlatformTimingPrefix) && strings.EqualFold(name[:len(PlatformTimingPrefix)], PlatformTimingPrefix) {
				continue
			}
			if e = strings.TrimSpace(e); e != "" {
				kept = append(kept, e)
			}
		}
	}
	delete(h, "Server-Timing")
	if len(kept) > 0 {
		h["Server-Timing"] = []string{strings.Join(kept, ", ")}
	}
}

// splitHeaderList splits a comma-separated header value, leaving commas inside quoted strings
// (with their backslash escapes) alone.
func splitHeaderList(v string) []string {
	var out []string
	quoted, escaped, from := false, false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, v[from:i])
			from = i + 1
		}
	}
	return append(out, v[from:])
}
