// Package k1n brings up the single-node Kubernetes of hack/k8s/ with sless installed into it (the
// operator image built by sless, operator/config applied with kubectl), plus what the platform
// needs beside the cluster on the bridge address (S3, PostgreSQL for the invocation history, an
// npm mirror), for the real-cluster e2e tests and benchmarks. It leaves the machine as it found
// it: a cluster it started is torn down.
package k1n
