// Command bench is `make bench`: it measures sless's in-process builder against the tools it
// replaces, side by side in one run, against one CNCF Distribution registry on 127.0.0.1:
//
//   - sless code-only rebuilds (10 KB and 10 MB of code) in-process with a long-lived Builder, and
//     through the `sless build` CLI;
//   - the protocol floor: gzip+sha256 of the code plus the five requests a new layer, a config and a
//     manifest need (POST+PUT per blob, PUT manifest) over one kept-alive connection;
//   - kaniko (Dockerfile FROM base + COPY, under podman) and buildah bud + push, cold and warm;
//   - a 10 MB base against the large one, and the peak RSS of `sless build` for 200 MB of code.
//
// It prints a table of medians and ratios; BENCHMARKS.md records a run.
package main
