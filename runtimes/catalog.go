package runtimes

import (
	"embed"
	"io/fs"
	"sort"

	"github.com/sless-dev/sless/api/apiv1"
)

//go:embed python3.11/server.py nodejs20/server.js
var servers embed.FS

// Runtime describes one runtime.
type Runtime struct {
	// Name is what users write in `runtime`, e.g. "python3.11".
	Name string
	// ServerPath is where the server file lives in the image.
	ServerPath string
	// Cmd starts the server.
	Cmd []string
	// Env is added to the runtime image's environment: where dependencies and code are found.
	Env []string
	// DepsDir is where the dependency layer is placed in the image.
	DepsDir string
	// DepsManifests are the files whose presence means the function has dependencies; the first is
	// required, the others refine the install (a lockfile).
	DepsManifests []string
	// DefaultBase is the production base image; DefaultHandler the handler when none is given.
	DefaultBase    string
	DefaultHandler string
	// Language says which example handler shape applies: "python" or "node".
	Language string
}

var catalog = map[string]Runtime{
	apiv1.RuntimePython311: {
		Name:           apiv1.RuntimePython311,
		ServerPath:     "/app/server.py",
		Cmd:            []string{"python3", "/app/server.py"},
		Env:            []string{"PYTHONPATH=/app/deps:/app/function", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"},
		DepsDir:        "/app/deps",
		DepsManifests:  []string{"requirements.txt"},
		DefaultBase:    "python:3.11-slim",
		DefaultHandler: apiv1.DefaultEntrypoint,
		Language:       "python",
	},
	apiv1.RuntimeNodejs20: {
		Name:           apiv1.RuntimeNodejs20,
		ServerPath:     "/app/server.js",
		Cmd:            []string{"node", "/app/server.js"},
		Env:            []string{"NODE_PATH=/app/node_modules", "NODE_ENV=production"},
		DepsDir:        "/app/node_modules",
		DepsManifests:  []string{"package.json", "package-lock.json"},
		DefaultBase:    "node:20-alpine",
		DefaultHandler: apiv1.DefaultEntrypoint,
		Language:       "node",
	},
}

// Lookup returns the runtime called name.
func Lookup(name string) (Runtime, bool) {
	r, ok := catalog[name]
	return r, ok
}

// Names lists the runtimes, sorted.
func Names() []string {
	var out []string
	for n := range catalog {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Files is the runtime's server layer content, to be placed under /app.
func (r Runtime) Files() fs.FS {
	sub, err := fs.Sub(servers, r.Name)
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}
