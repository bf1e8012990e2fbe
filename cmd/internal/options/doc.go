// Package options holds the flag groups both servers register, `sless up` (the single host) and
// `sless-operator` (Kubernetes), in the spirit of ko's pkg/commands/options: one struct per group
// (API, Auth, Autoscale, Indexes, Metrics, TenantQuota), each with AddFlags, which declares its flags on a
// pflag.FlagSet with the one help text and default both binaries show, and methods that turn the
// parsed values into what the libraries take (api.New's options, the JWT verifier, the decider's
// options). A knob both servers have is declared here once; a flag only one binary has stays in
// that binary's package. Like every package under cmd/, it may read the environment (Indexes does,
// after parsing, so that credentials never show in a usage message).
package options
