// Package runtimeimages installs the runtime images a single host builds functions on: it pushes
// each language base from its OCI layout (made by hack/build-bases.sh) into the embedded registry
// and appends the runtime's server layer with the same builder functions are built with. The
// result is deterministic: the same bases and servers give the same digests on every start, so an
// unchanged platform rebuilds no function. Making a missing base is the command's job, not this
// package's.
package runtimeimages
