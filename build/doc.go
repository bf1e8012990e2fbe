// Package build is the function build pipeline both backends run: the identity of a build (Key),
// the steps from an uploaded archive to a pushed image (fetch and re-hash the code, read its
// dependency manifests, obtain the dependency layer, build on the runtime image, push by digest),
// which failures are the function's own (IsUserError: the same inputs fail the same way, so a
// backend does not retry them), and image deletion. A backend plugs in only how a dependency layer
// is obtained (Deps): the single host installs it in place through the deps cache; Kubernetes runs
// a Job and answers with a *PendingError until the layer is there. Each finished build is
// reported to WithObserver; Metrics turns that into /metrics series (sless_builds_total,
// sless_build_duration_seconds, sless_dependency_*) on whichever registry the command gives it.
// No Kubernetes, no HTTP.
//
// Each image is pushed as <registry>/<ns>/<fn>:v-<key> (VersionTag) and then tagged :latest:
// Distribution cannot list untagged manifests, so the version tag keeps every image findable.
// Collection deletes manifests online, by digest: CollectImages the versions of a function its
// backend no longer runs, CollectDeps the dependency layers no function uses, dropping their pins
// in the same step. The registry reclaims their blobs when it sweeps (internal/registry, at start).
package build
