// Command sless is the sless command line: `sless build` builds a function image in-process,
// `sless runtime build` a runtime image, `sless registry` serves the embedded registry.
// `sless up` runs the single-host platform; `sless deps push` layers installed dependencies. Only this package reads flags and
// the environment; the libraries it calls are configured through options.
package main
