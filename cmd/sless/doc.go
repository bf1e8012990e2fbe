// Command sless is the sless command line, one cobra command tree (pflag flags, --help on every
// command, completion scripts from cobra itself): the author commands (login, fn, invoke, logs,
// jobs, triggers, secret) talk to a sless API through api/client; the platform commands run or build
// parts of sless — `sless up` the single-host platform (its API, auth, autoscale, index and quota
// flags are the option groups it shares with sless-operator, cmd/internal/options), `sless down`,
// `sless build` a function image in-process, `sless runtime build` a runtime image, `sless deps
// push` a dependency layer, `sless registry` the embedded registry, `sless policy-wait` a pod's
// NetworkPolicy gate. Only this package (and cmd/internal/options) reads flags and the environment;
// the libraries it calls are configured through options.
package main
