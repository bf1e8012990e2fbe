package apiv1

import (
	"fmt"
	"slices"
	"time"
)

// Runtime lifecycle statuses (GET /v1/runtimes), as Kyma and Lambda have them: a deprecated
// runtime still takes new functions, with a warning naming its replacement; a blocked one takes
// none, while functions already on it keep running and may still be updated in place.
const (
	RuntimeSupported  = "supported"
	RuntimeDeprecated = "deprecated"
	RuntimeBlocked    = "blocked"
)

// Runtime is one runtime as GET /v1/runtimes describes it.
type Runtime struct {
	Name string `json:"name"`
	// Language is "python", "node", or "custom" (provided: the upload's own executable).
	Language string `json:"language"`
	// Version is the language's major (and minor) version, or the Debian release of provided.
	Version string `json:"version"`
	// Status is supported, deprecated or blocked.
	Status string `json:"status"`
	// DeprecatedSince and BlockedSince are dates (YYYY-MM-DD); BlockedSince is empty for a runtime
	// blocked by the install (--block-runtime) rather than by the catalog.
	DeprecatedSince string `json:"deprecated_since,omitempty"`
	BlockedSince    string `json:"blocked_since,omitempty"`
	// Replacement is the runtime to move to.
	Replacement string `json:"replacement,omitempty"`
	// Image is the runtime image, by digest, functions of this runtime are built on here.
	Image string `json:"image,omitempty"`
}

// RuntimeList is GET /v1/runtimes.
type RuntimeList struct {
	Items []Runtime `json:"items"`
}

// runtimeTable is the catalog's lifecycle: which runtimes exist, and when each is deprecated (its
// language's end of life) and blocked. Dates are UTC days.
var runtimeTable = []Runtime{
	{Name: RuntimeNodejs20, Language: "node", Version: "20", DeprecatedSince: "2026-04-30", Replacement: RuntimeNodejs22},
	{Name: RuntimeNodejs22, Language: "node", Version: "22"},
	{Name: RuntimeNodejs24, Language: "node", Version: "24"},
	{Name: RuntimeProvided, Language: "custom", Version: "debian13"},
	{Name: RuntimePython311, Language: "python", Version: "3.11"},
	{Name: RuntimePython313, Language: "python", Version: "3.13"},
}

// RuntimeLanguage is the language of runtime name ("python", "node", "custom"), "" for no runtime:
// the one mapping the servers, the installers and the catalog go by.
func RuntimeLanguage(name string) string {
	i := slices.IndexFunc(runtimeTable, func(r Runtime) bool { return r.Name == name })
	if i < 0 {
		return ""
	}
	return runtimeTable[i].Language
}

// RuntimePolicy is an install's view of the catalog: the runtimes it blocks beyond the catalog's
// dates (--block-runtime), and its clock.
type RuntimePolicy struct {
	// Blocked are runtimes the install blocks.
	Blocked []string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (p RuntimePolicy) today() string {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	return now().UTC().Format(time.DateOnly)
}

// Validate checks that every blocked name is a runtime.
func (p RuntimePolicy) Validate() error {
	for _, b := range p.Blocked {
		if err := ValidRuntime(b); err != nil {
			return err
		}
	}
	return nil
}

// Lookup describes runtime name under p (without Image), and whether it exists.
func (p RuntimePolicy) Lookup(name string) (Runtime, bool) {
	i := slices.IndexFunc(runtimeTable, func(r Runtime) bool { return r.Name == name })
	if i < 0 {
		return Runtime{}, false
	}
	r, today := runtimeTable[i], p.today()
	switch {
	case r.BlockedSince != "" && r.BlockedSince <= today, slices.Contains(p.Blocked, name):
		r.Status = RuntimeBlocked
	case r.DeprecatedSince != "" && r.DeprecatedSince <= today:
		r.Status = RuntimeDeprecated
	default:
		r.Status = RuntimeSupported
	}
	return r, true
}

// List describes every runtime under p, sorted by name.
func (p RuntimePolicy) List() []Runtime {
	out := make([]Runtime, 0, len(runtimeTable))
	for _, n := range Runtimes() {
		r, _ := p.Lookup(n)
		out = append(out, r)
	}
	return out
}

// Admit decides a create (previous == "") or update of a function to runtime rt: a blocked
// runtime is refused unless the function is on it already (it keeps running and may be updated
// in place); a deprecated one (or a blocked one kept) is admitted with a warning naming the
// replacement, as the Kubernetes API's `Warning: 299` header carries it.
func (p RuntimePolicy) Admit(rt, previous string) (warning string, err error) {
	if err := ValidRuntime(rt); err != nil {
		return "", err
	}
	r, _ := p.Lookup(rt)
	switch r.Status {
	case RuntimeBlocked:
		if previous != rt {
			return "", invalid("runtime %s is blocked%s; use %s", rt, r.since(), r.replacementOr("a supported runtime"))
		}
		return fmt.Sprintf("runtime %s is blocked%s: functions on it keep running, but no new function may use it; move to %s", rt, r.since(), r.replacementOr("a supported runtime")), nil
	case RuntimeDeprecated:
		return fmt.Sprintf("runtime %s is deprecated since %s and will be blocked; move to %s", rt, r.DeprecatedSince, r.replacementOr("a supported runtime")), nil
	}
	return "", nil
}

func (r Runtime) since() string {
	if r.BlockedSince != "" {
		return " since " + r.BlockedSince
	}
	return " on this install"
}

func (r Runtime) replacementOr(def string) string {
	if r.Replacement != "" {
		return r.Replacement
	}
	return def
}
