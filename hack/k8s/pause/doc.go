// Command pause is the pod sandbox's init process for hack/k8s (the node's containerd runs it as
// every pod's infra container). Kubernetes' own pause is C built with a static libc; this one is
// pure Go so a CGO_ENABLED=0 build needs no C toolchain. Same contract: sleep forever, exit 0 on
// SIGINT/SIGTERM, and reap any child that ends up parented to it (it is PID 1 of pods that share
// their process namespace).
package main
