package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
)

// ErrInvalidSpec marks a manifest the platform refuses (index options in requirements.txt, a
// package.json that is not JSON, …). The message says what to change.
var ErrInvalidSpec = errors.New("invalid dependencies")

// InstallError is an installer that ran and failed (unknown package, bad version, index refused):
// the dependencies, not the platform, need fixing. Output holds the installer's last lines.
type InstallError struct{ Output string }

func (e *InstallError) Error() string { return "installing dependencies failed:\n" + e.Output }

// Manifest file names.
const (
	Requirements = "requirements.txt"
	PackageJSON  = "package.json"
	PackageLock  = "package-lock.json"
)

// Spec is everything that decides what an install produces.
type Spec struct {
	// Runtime is a python* or nodejs* runtime (the key tells python3.11 from python3.13).
	Runtime string
	// RuntimeImage is the runtime image, by digest, the installer runs in (its pip/npm and libc).
	RuntimeImage string
	// Files are the manifest files by name (requirements.txt, or package.json and
	// package-lock.json).
	Files map[string][]byte
	// Namespace is the tenant. Installs that may run package code (setup.py, npm scripts) are cached
	// per tenant; fully pinned, script-free installs are shared (DESIGN.md §4).
	Namespace string
	// IndexURL is the package index the platform uses (pip index URL / npm registry); empty means
	// the installer's default.
	IndexURL string
	// Log, when set, receives the installer's output (the build log); not part of the key.
	Log io.Writer `json:"-"`
	// Installing, when set, is called once an install is certain (the layer is not cached), before
	// it starts: the build reports the stage while it runs. Not part of the key.
	Installing func() `json:"-"`
}

// Detect returns the manifests of runtime found in files (name → content), or nil if there are
// none. files may hold any other files of the function; they are ignored.
func Detect(runtime string, files map[string][]byte) map[string][]byte {
	var names []string
	switch language(runtime) {
	case "python":
		names = []string{Requirements}
	case "node":
		names = []string{PackageJSON, PackageLock}
	}
	out := map[string][]byte{}
	for _, n := range names {
		if b, ok := files[n]; ok {
			out[n] = b
		}
	}
	if len(out) == 0 || (language(runtime) == "node" && out[PackageJSON] == nil) {
		return nil
	}
	return out
}

// language is the package ecosystem of runtime: "python" (pip), "node" (npm), or none (provided).
func language(runtime string) string { return apiv1.RuntimeLanguage(runtime) }

// Installer is the command that installs a Spec's dependencies into /out, with the manifests in
// /in (read-only) and a writable working directory /work.
type Installer struct {
	Argv []string
	Env  []string
	// Warning is set when the install is not reproducible (npm without a lockfile).
	Warning string
}

// OutDir is where the installer writes; its content becomes the layer at the runtime's deps dir.
const OutDir = "/out"

// Installer returns the install command for s, after checking the manifests.
func (s Spec) Installer() (Installer, error) {
	switch language(s.Runtime) {
	case "python":
		if err := checkRequirements(s.Files[Requirements]); err != nil {
			return Installer{}, err
		}
		argv := []string{"python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-input",
			"--no-compile", "--target", OutDir, "-r", "/in/" + Requirements}
		if s.IndexURL != "" {
			argv = append(argv, "--index-url", s.IndexURL)
			if u, err := url.Parse(s.IndexURL); err == nil && u.Scheme == "http" {
				argv = append(argv, "--trusted-host", u.Hostname())
			}
		}
		if s.shareable() {
			argv = append(argv, "--only-binary=:all:", "--require-hashes")
		}
		// No .pyc files: they embed source mtimes and would make the layer differ between installs.
		return Installer{Argv: argv, Env: []string{"PYTHONDONTWRITEBYTECODE=1", "PIP_NO_CACHE_DIR=1", "HOME=/work"}}, nil
	case "node":
		if !json.Valid(s.Files[PackageJSON]) {
			return Installer{}, fmt.Errorf("%w: package.json is not valid JSON", ErrInvalidSpec)
		}
		in := Installer{Env: []string{"HOME=/work", "npm_config_cache=/work/.npm", "npm_config_update_notifier=false",
			"npm_config_fund=false", "npm_config_audit=false"}}
		cmd := "npm ci --omit=dev"
		if s.Files[PackageLock] == nil {
			cmd = "npm install --omit=dev --no-package-lock"
			in.Warning = "no package-lock.json: dependencies were resolved with npm install, so a later build may get other versions; commit a lockfile for reproducible builds"
		} else if !json.Valid(s.Files[PackageLock]) {
			return Installer{}, fmt.Errorf("%w: package-lock.json is not valid JSON", ErrInvalidSpec)
		}
		if s.shareable() {
			cmd += " --ignore-scripts"
		}
		if s.IndexURL != "" {
			in.Env = append(in.Env, "npm_config_registry="+s.IndexURL)
		}
		// npm installs into the working directory; the result moves to /out. cp -R, not -a: a
		// non-root installer cannot set the times of a /out it does not own (a Kubernetes emptyDir).
		in.Argv = []string{"sh", "-c", "set -e; cp /in/* /work/; cd /work; " + cmd + "; if [ -d node_modules ]; then cp -R node_modules/. " + OutDir + "/; fi"}
		return in, nil
	}
	return Installer{}, fmt.Errorf("%w: runtime %q has no dependency installer", ErrInvalidSpec, s.Runtime)
}

// indexOptions change where pip looks for packages; the platform decides that. nestedOptions name
// other files, which are not uploaded with the manifest.
var (
	indexOptions  = []string{"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host", "--no-index"}
	nestedOptions = []string{"-r", "--requirement", "-c", "--constraint"}
)

// logicalLines splits requirements.txt as pip does: a line ending in a backslash continues on the
// next, joined without a space; comments (whole-line or after whitespace) are dropped. Numbers are
// the first physical line of each logical one.
func logicalLines(b []byte) (lines []string, numbers []int) {
	var cur strings.Builder
	start := 0
	for n, raw := range strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n") {
		if cur.Len() == 0 {
			start = n + 1
		}
		if strings.HasSuffix(raw, "\\") && !strings.HasPrefix(strings.TrimSpace(raw), "#") {
			cur.WriteString(strings.TrimSuffix(raw, "\\"))
			continue
		}
		cur.WriteString(raw)
		line := cur.String()
		cur.Reset()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if k := strings.Index(line, " #"); k >= 0 {
			line = line[:k]
		}
		if k := strings.Index(line, "\t#"); k >= 0 {
			line = line[:k]
		}
		if line = strings.TrimSpace(line); line != "" {
			lines, numbers = append(lines, line), append(numbers, start)
		}
	}
	return lines, numbers
}

// optionIn reports the first of opts given in fields: alone, as --opt=value, or (short options)
// with the value attached (-ihttp://…).
func optionIn(fields, opts []string) string {
	for _, f := range fields {
		for _, opt := range opts {
			if f == opt || strings.HasPrefix(f, opt+"=") || (len(opt) == 2 && strings.HasPrefix(f, opt) && !strings.HasPrefix(f, "--")) {
				return opt
			}
		}
	}
	return ""
}

func checkRequirements(b []byte) error {
	if b == nil {
		return fmt.Errorf("%w: requirements.txt is missing", ErrInvalidSpec)
	}
	lines, numbers := logicalLines(b)
	for i, line := range lines {
		fields := strings.Fields(line)
		if opt := optionIn(fields, indexOptions); opt != "" {
			return fmt.Errorf("%w: requirements.txt line %d: %q sets the package index; remove it (the platform chooses the index)", ErrInvalidSpec, numbers[i], opt)
		}
		if opt := optionIn(fields, nestedOptions); opt != "" {
			return fmt.Errorf("%w: requirements.txt line %d: %q names another file, which is not uploaded with the manifest; list the packages here", ErrInvalidSpec, numbers[i], opt)
		}
	}
	return nil
}

// publicNPMRegistry is where npm resolves packages when no registry is configured.
const publicNPMRegistry = "registry.npmjs.org"

// shareable reports whether the install cannot run tenant-controlled code and is fully pinned, so
// its layer may be shared across tenants: pip with a hash on every requirement (installed with
// --only-binary=:all: --require-hashes), npm with an integrity on every lockfile package (installed
// with --ignore-scripts). Anything that could bring code from elsewhere or build it makes the
// install the tenant's own: an option on a requirement line other than its hashes (a
// --no-binary would let pip build an sdist, running setup.py), a direct reference
// (pkg @ https://…), or an npm package resolved from a host that is neither the configured
// registry nor the public one.
func (s Spec) shareable() bool {
	switch language(s.Runtime) {
	case "python":
		lines, _ := logicalLines(s.Files[Requirements])
		for _, l := range lines {
			if !pinnedRequirement(l) {
				return false
			}
		}
		return len(lines) > 0
	case "node":
		var lock struct {
			Packages map[string]struct {
				Integrity string `json:"integrity"`
				Resolved  string `json:"resolved"`
				Link      bool   `json:"link"`
			} `json:"packages"`
		}
		if json.Unmarshal(s.Files[PackageLock], &lock) != nil || len(lock.Packages) == 0 {
			return false
		}
		hosts := map[string]bool{publicNPMRegistry: true}
		if u, err := url.Parse(s.IndexURL); err == nil && u.Host != "" {
			hosts[u.Host] = true
		}
		for path, p := range lock.Packages {
			if path == "" || p.Link {
				continue
			}
			if p.Integrity == "" {
				return false
			}
			if p.Resolved != "" {
				u, err := url.Parse(p.Resolved)
				if err != nil || (u.Scheme != "https" && u.Scheme != "http") || !hosts[u.Host] {
					return false
				}
			}
		}
		return true
	}
	return false
}

// pinnedRequirement: "name==version" (extras and environment markers allowed) followed by nothing
// but its --hash=sha256:… options, at least one.
func pinnedRequirement(line string) bool {
	req, marker, _ := strings.Cut(line, ";")
	fields := strings.Fields(req)
	if len(fields) == 0 || !strings.Contains(fields[0], "==") || strings.HasPrefix(fields[0], "-") {
		return false
	}
	// The options may follow the marker: split them off wherever they start.
	opts := fields[1:]
	if marker != "" {
		mf := strings.Fields(marker)
		for i, f := range mf {
			if strings.HasPrefix(f, "-") {
				opts = append(opts, mf[i:]...)
				break
			}
		}
	}
	if strings.Contains(req, "@") || strings.Contains(req, "://") {
		return false // a direct reference: the file comes from wherever it says
	}
	hashes := 0
	for i := 0; i < len(opts); i++ {
		switch o := opts[i]; {
		case strings.HasPrefix(o, "--hash=sha256:"):
			hashes++
		case o == "--hash" && i+1 < len(opts) && strings.HasPrefix(opts[i+1], "sha256:"):
			hashes++
			i++
		case strings.HasPrefix(o, "-"):
			return false // --no-binary, --global-option, --config-settings, …: not a pinned binary install
		default:
			return false // something between the requirement and its options
		}
	}
	return hashes > 0
}

// Key is the content address of a Spec's layer: sha256 over the runtime image digest, the manifest
// files, the installer command line and the tenant (or "shared" when the install is shareable).
// Golden tests pin it: a change that moves keys invalidates every cached layer.
func Key(s Spec) (string, error) {
	in, err := s.Installer()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	field := func(name string, b []byte) {
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
		h.Write([]byte("\n"))
	}
	field("runtime", []byte(s.Runtime))
	field("image", []byte(s.RuntimeImage))
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		field("file "+n, s.Files[n])
	}
	field("argv", []byte(strings.Join(in.Argv, "\x00")))
	field("env", []byte(strings.Join(in.Env, "\x00")))
	scope := "shared"
	if !s.shareable() {
		scope = "tenant " + s.Namespace
	}
	field("scope", []byte(scope))
	return hex.EncodeToString(h.Sum(nil)), nil
}
