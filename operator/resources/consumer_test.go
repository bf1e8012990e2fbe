package resources_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

func mqTrigger(name, urlSecret string, enabled *bool) slessv1.Trigger {
	return slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: slessv1.TriggerSpec{Type: "rabbitmq", FunctionRef: "f", Enabled: enabled,
		RabbitMQ: &slessv1.RabbitMQTrigger{URLSecret: urlSecret, Queue: name}}}
}

// Only enabled rabbitmq triggers are consumed; the Deployment projects each secret once, with
// exactly the keys its triggers name, as <secret>/<key>, optional, sorted (a stable template).
func TestConsumerDeploymentSecrets(t *testing.T) {
	no := false
	ts := []slessv1.Trigger{
		mqTrigger("b", "mq/url", nil), mqTrigger("a", "mq/backup", nil), mqTrigger("c", "mq/url", nil),
		mqTrigger("off", "off/url", &no), mqTrigger("z", "other/url", nil),
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: slessv1.TriggerSpec{Type: "http", FunctionRef: "f"}},
	}
	consumed := resources.ConsumedTriggers(ts)
	var names []string
	for _, t := range consumed {
		names = append(names, t.Name)
	}
	if want := []string{"a", "b", "c", "z"}; !slices.Equal(names, want) {
		t.Errorf("consumed %v, want %v", names, want)
	}
	d := resources.MakeConsumerDeployment("ns", consumed, resources.ConsumerConfig{Image: "op", APIURL: "http://api"})
	type item struct{ secret, key, path string }
	var got []item
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.Secret.Optional == nil || !*s.Secret.Optional {
				t.Errorf("%s is not optional: a missing secret would keep the pod from starting", s.Secret.Name)
			}
			for _, it := range s.Secret.Items {
				got = append(got, item{s.Secret.Name, it.Key, it.Path})
			}
		}
	}
	want := []item{{"sless-secret-mq", "backup", "mq/backup"}, {"sless-secret-mq", "url", "mq/url"}, {"sless-secret-other", "url", "other/url"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(item{})); diff != "" {
		t.Errorf("projected secrets (-want +got):\n%s", diff)
	}
	// The same set in another order is the same template.
	again := resources.MakeConsumerDeployment("ns", []slessv1.Trigger{consumed[3], consumed[1], consumed[0], consumed[2]}, resources.ConsumerConfig{Image: "op", APIURL: "http://api"})
	if diff := cmp.Diff(d.Spec.Template, again.Spec.Template); diff != "" {
		t.Errorf("the template depends on the triggers' order:\n%s", diff)
	}
}

// The consumer's NetworkPolicy adds the API's pods on their port and each Kubernetes API endpoint
// as a single address, IPv6 included.
func TestConsumerNetworkPolicy(t *testing.T) {
	np := resources.MakeConsumerNetworkPolicy("ns", resources.ConsumerConfig{OperatorNamespace: "sless-system", APIPort: 8080,
		KubeAPI: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:6443"), netip.MustParseAddrPort("[fd00::1]:443")}})
	var got []string
	for _, r := range np.Spec.Egress {
		for _, p := range r.To {
			peer := "pods"
			if p.IPBlock != nil {
				peer = p.IPBlock.CIDR
			}
			got = append(got, peer+":"+r.Ports[0].Port.String())
		}
	}
	if want := []string{"pods:8080", "10.0.0.1/32:6443", "fd00::1/128:443"}; !slices.Equal(got, want) {
		t.Errorf("egress %v, want %v", got, want)
	}
	if np.Spec.PodSelector.MatchLabels["sless.dev/role"] != "consumer" {
		t.Errorf("selects %v", np.Spec.PodSelector)
	}
}
