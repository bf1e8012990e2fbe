package kubestore

// The API's ClusterRole names it to the admission policies (operator/config/rbac/admission.yaml):
// they ask the API server's authorizer whether the requester may "assume" the identity sless-api,
// so they restrict whichever account the install binds to this role, and no fixed user name. The
// verb and resource exist only for that question; nothing serves them.
// +kubebuilder:rbac:groups=sless.dev,resources=identities,resourceNames=sless-api,verbs=assume

// Tenants' own Secrets (the API writes them whole, never reads one): the admission policies let
// this account create or replace only Secrets labelled runspec.LabelTenantSecret in namespaces
// sless manages.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update
