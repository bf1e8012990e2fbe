// Package kubetest starts a real kube-apiserver and etcd (controller-runtime's envtest) for the
// operator's tests, from the assets hack/build-envtest.sh builds (envtest's downloads are not
// reachable here).
package kubetest
