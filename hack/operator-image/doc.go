// Command operator-image builds the operator's own image the way sless builds function images: no
// Dockerfile, no daemon. It compiles sless-operator and sless (the deps Jobs' `sless deps push`)
// as static binaries, lays them out with a passwd entry for the non-root user and the host's CA
// bundle, appends that one layer onto an empty base with the layers package and pushes it. It
// prints the image by digest.
package main
