// Command bench is `make bench`: it measures sless beside what it replaces, side by side in one
// run, and prints Markdown tables of medians (or percentiles), ratios and verdicts against the
// issues' targets; BENCHMARKS.md records a run. -sections picks what runs (all by default):
//
//   - builder: sless code-only rebuilds (10 KB and 10 MB of code) in-process with a long-lived
//     Builder and through the `sless build` CLI; the protocol floor (gzip+sha256 of the code plus
//     the requests a new layer, a config and a manifest need); kaniko (FROM base + COPY, under
//     podman) and buildah bud + push, cold and warm; a 10 MB base against the large one; the peak
//     RSS of `sless build` for 200 MB of code — against one CNCF Distribution registry on
//     127.0.0.1, on tmpfs and on disk (-storage);
//   - runtimes: each runtime image's size, cold start under podman and request latency;
//   - proxy: /fn/ (the REST server on memstore) against calling the function directly;
//   - history: what recording every /fn/ call into PostgreSQL (api/pgstore) costs /fn/, and the
//     rows per second one store's writer sustains;
//   - up, deps, terraform: on `sless up`, a one-line change until the new code answers (through
//     the API, and through `terraform apply`), and dependency layers cold, cached and code-only,
//     beside buildah with its layer cache warm;
//   - k8s: the same change on the real single-node cluster (internal/k1n), beside the seed's way
//     (a kaniko Job, then a rollout);
//   - coldstart, coldstart-up: cold starts from zero instances through /fn/ (split by the
//     Scaler's scaled-at annotation, /fn/'s Server-Timing and a pod watch), beside the Kubernetes
//     readiness path (a plain Deployment scaled 0 → 1), and a ramp from zero to 40 clients; on the
//     cluster and on `sless up`.
package main
