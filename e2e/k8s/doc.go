// Package k8s holds the end-to-end tests on a real single-node Kubernetes (hack/k8s/): the
// operator installed from its own manifests with an image sless built, functions deployed through
// the REST API and the real Terraform CLI, running in pods and answering through /fn/. `make
// e2e-k8s` runs them alone; `make test` runs them with everything else. The tests bring the
// cluster up themselves and tear it down after (unless it was already up).
package k8s
