// Package consumer runs one tenant namespace's rabbitmq triggers on Kubernetes, inside that
// namespace's consumer pod (`sless-operator --role=consumer`, made by the ConsumerReconciler of
// operator/controllers): it watches the namespace's Triggers and keeps one rabbitmq.Consumer per
// enabled rabbitmq trigger, reads each broker URL from the secret file the kubelet mounts before
// every connection (a rotated or later-created secret is picked up; a missing one is that
// trigger's status, never the others'), invokes /fn/ through the API's Service with the
// namespace's event token (apiv1.EventToken), and writes each trigger's consumer status.
package consumer
