package runtimes

import (
	"embed"
	"io"
	"io/fs"
	"sort"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

//go:embed python/server.py node/server.js
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
	// Language says which server and example handler shape apply: "python", "node", or "custom"
	// (provided: no server, the upload's own executable serves).
	Language string
	// Executable is the file the code must hold at its root, executable (provided: bootstrap);
	// builds and uploads without it fail naming it.
	Executable string
}

// python and node are the runtimes of one language: the same server on another interpreter.
func python(name, base string) Runtime {
	return Runtime{
		Name:           name,
		ServerPath:     "/app/server.py",
		Cmd:            []string{"python3", "/app/server.py"},
		Env:            []string{"PYTHONPATH=/app/deps:/app/function", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"},
		DepsDir:        "/app/deps",
		DepsManifests:  []string{"requirements.txt"},
		DefaultBase:    base,
		DefaultHandler: apiv1.DefaultEntrypoint,
		Language:       apiv1.RuntimeLanguage(name),
	}
}

func node(name, base string) Runtime {
	return Runtime{
		Name:           name,
		ServerPath:     "/app/server.js",
		Cmd:            []string{"node", "/app/server.js"},
		Env:            []string{"NODE_PATH=/app/node_modules", "NODE_ENV=production"},
		DepsDir:        "/app/node_modules",
		DepsManifests:  []string{"package.json", "package-lock.json"},
		DefaultBase:    base,
		DefaultHandler: apiv1.DefaultEntrypoint,
		Language:       apiv1.RuntimeLanguage(name),
	}
}

// ProvidedLauncher is the provided runtime's command (run by /bin/sh -c): load SLESS_ENV_SH when
// the runner gives one (the single host; Kubernetes sets every variable in the pod spec), then
// exec the bootstrap. A file that cannot be read stops the start with sh's message.
const ProvidedLauncher = `if [ -n "${SLESS_ENV_SH:-}" ]; then . "$SLESS_ENV_SH" || exit 1; fi; exec /app/function/` + apiv1.ProvidedBootstrap

var catalog = map[string]Runtime{
	apiv1.RuntimePython311: python(apiv1.RuntimePython311, "python:3.11-slim"),
	apiv1.RuntimePython313: python(apiv1.RuntimePython313, "python:3.13-slim"),
	apiv1.RuntimeNodejs20:  node(apiv1.RuntimeNodejs20, "node:20-alpine"),
	apiv1.RuntimeNodejs22:  node(apiv1.RuntimeNodejs22, "node:22-alpine"),
	apiv1.RuntimeNodejs24:  node(apiv1.RuntimeNodejs24, "node:24-alpine"),
	// provided: the upload's bootstrap is the process; it serves $PORT and GET /health as the
	// language servers do. No dependency layer (the upload brings what it needs). The base's
	// /bin/sh first loads the variables the single host hands over in a file (SLESS_ENV_SH: the
	// user's env vars, secrets, a job's event), then becomes the bootstrap (exec: it is PID 1
	// and gets SIGTERM itself).
	apiv1.RuntimeProvided: {
		Name:           apiv1.RuntimeProvided,
		Cmd:            []string{"/bin/sh", "-c", ProvidedLauncher},
		Executable:     apiv1.ProvidedBootstrap,
		DefaultBase:    "debian:trixie-slim",
		DefaultHandler: apiv1.DefaultEntrypoint,
		Language:       apiv1.RuntimeLanguage(apiv1.RuntimeProvided),
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

// Files is the runtime's server layer content, to be placed under /app: empty for provided.
func (r Runtime) Files() fs.FS {
	if r.ServerPath == "" {
		return emptyFS{}
	}
	sub, err := fs.Sub(servers, r.Language)
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}

// emptyFS is a server layer with nothing in it.
type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	if name == "." {
		return emptyDir{}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

type emptyDir struct{}

func (emptyDir) Stat() (fs.FileInfo, error)         { return emptyInfo{}, nil }
func (emptyDir) Read([]byte) (int, error)           { return 0, io.EOF }
func (emptyDir) Close() error                       { return nil }
func (emptyDir) ReadDir(int) ([]fs.DirEntry, error) { return nil, nil }

type emptyInfo struct{}

func (emptyInfo) Name() string       { return "." }
func (emptyInfo) Size() int64        { return 0 }
func (emptyInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (emptyInfo) ModTime() time.Time { return time.Time{} }
func (emptyInfo) IsDir() bool        { return true }
func (emptyInfo) Sys() any           { return nil }
