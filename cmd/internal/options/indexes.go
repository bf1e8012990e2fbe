package options

import (
	"os"

	"github.com/spf13/pflag"
)

// Environment variables the package indexes default to: their URLs may carry credentials, which
// belong in the environment (a Secret), not in argv, where ps and a usage message would show them.
const (
	EnvPipIndexURL = "PIP_INDEX_URL"
	EnvNPMRegistry = "NPM_REGISTRY"
)

// Indexes are the package indexes dependency installs use, which the index proxy forwards to
// (adding their credentials upstream, so that installers, which run tenant code, hold none).
type Indexes struct {
	PipIndexURL string
	NPMRegistry string
	// Hosts are further hosts (host[:port]) installs may reach through the index proxy.
	Hosts []string
}

// AddFlags declares the index flags on fs. Their defaults are not the environment's values (a
// usage message would print those): ReadEnvironment fills them in after parsing.
func (o *Indexes) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PipIndexURL, "pip-index-url", "", "package index pip installs of requirements.txt use (default: $"+EnvPipIndexURL+", else pip's own); put credentials in the environment, not here: installers get the URL without them and the index proxy adds them upstream")
	fs.StringVar(&o.NPMRegistry, "npm-registry", "", "registry npm installs of package.json use (default: $"+EnvNPMRegistry+", else npm's own); put credentials in the environment, not here: installers get the URL without them and the index proxy adds them upstream")
	fs.StringArrayVar(&o.Hosts, "index-host", nil, "a host (host[:port]) dependency installs may reach through the index proxy besides the indexes' own, e.g. files.pythonhosted.org (repeatable)")
}

// ReadEnvironment sets the indexes the flags left empty from $PIP_INDEX_URL and $NPM_REGISTRY.
func (o *Indexes) ReadEnvironment() {
	if o.PipIndexURL == "" {
		o.PipIndexURL = os.Getenv(EnvPipIndexURL)
	}
	if o.NPMRegistry == "" {
		o.NPMRegistry = os.Getenv(EnvNPMRegistry)
	}
}
