package controllers

// The controller's ClusterRole names it to the admission policies (operator/config/rbac/
// admission.yaml): they ask the API server's authorizer whether the requester may "assume" the
// identity sless-controller, so they restrict whichever account the install binds to this role,
// in whatever namespace, and no fixed user name. The verb and resource exist only for that
// question; nothing serves them.
// +kubebuilder:rbac:groups=sless.dev,resources=identities,resourceNames=sless-controller,verbs=assume
