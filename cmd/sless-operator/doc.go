// Command sless-operator runs the Kubernetes backend in one binary, as the seed did: the
// controllers (Function, Trigger, FunctionJob) and the REST API with the /fn/ proxy, which reaches
// functions at the ready pods behind their Services. Only this package reads flags and the environment.
package main
