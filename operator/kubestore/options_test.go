package kubestore_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/kubestore"
)

type fixedResolver struct{}

func (fixedResolver) Resolve(context.Context, string, string) (*url.URL, error) {
	return &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, nil
}

type pokes struct{}

func (pokes) Poke(string, string) {}

// New assembles the whole backend: its defaults (an EndpointResolver that also lists instances,
// an in-memory history, no logs, no serving view) and what each option replaces. It calls nothing
// on the cluster.
func TestNewOptions(t *testing.T) {
	code, err := codestore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := kubestore.New(nil, kubestore.WithCodeStore(code))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("the default backend: %v", err)
	}
	if _, ok := b.Resolver.(*kubestore.EndpointResolver); !ok || b.Instances == nil || b.Serving != nil || b.Logs != nil || b.Scaler != nil {
		t.Errorf("defaults: resolver %T, instances %v, serving %v, logs %v, scaler %v", b.Resolver, b.Instances, b.Serving, b.Logs, b.Scaler)
	}
	if _, ok := b.Invocations.(*objects.InvocationRing); !ok {
		t.Errorf("default history %T", b.Invocations)
	}

	ring := objects.NewInvocationRing(1)
	b, err = kubestore.New(nil, kubestore.WithCodeStore(code), kubestore.WithResolver(fixedResolver{}), kubestore.WithScaler(pokes{}),
		kubestore.WithInvocations(ring), kubestore.WithPodLogs(&rest.Config{Host: "https://127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Resolver.(fixedResolver); !ok || b.Instances != nil || b.Scaler == nil || b.Invocations != ring {
		t.Errorf("options: resolver %T, instances %v, scaler %v, history %T", b.Resolver, b.Instances, b.Scaler, b.Invocations)
	}
	if l, ok := b.Logs.(*kubestore.Logs); !ok || l.Code != code {
		t.Errorf("WithPodLogs: logs %#v", b.Logs)
	}

	for _, tc := range []struct {
		opts []kubestore.Option
		want string
	}{
		{[]kubestore.Option{kubestore.WithPodLogs(&rest.Config{})}, "WithCodeStore"},
		{[]kubestore.Option{kubestore.WithCodeStore(code), kubestore.WithPodLogs(&rest.Config{}), kubestore.WithLogs(&kubestore.Logs{})}, "exclude"},
		{[]kubestore.Option{kubestore.WithInvocations(nil)}, "WithInvocations"},
	} {
		if _, err := kubestore.New(nil, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %s, got %v", tc.want, err)
		}
	}
}
