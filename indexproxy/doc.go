// Package indexproxy is the only way out for dependency installs, which run a tenant's package
// code (setup.py, npm scripts): an HTTP forward proxy (absolute-form requests and CONNECT
// tunnels) that reaches only the package-index hosts the platform is configured with, and adds
// their credentials to plain-HTTP requests upstream, so installers are given index URLs without
// credentials and hold none.
package indexproxy
