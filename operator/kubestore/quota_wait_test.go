package kubestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/kubestore"
)

// A namespace ensured a moment ago has a quota kube-controller-manager has not counted yet; the
// API server refuses creates with "status unknown for quota" until it has (seen on the real
// cluster: every create right after an ensure failed with 500). envtest runs no quota controller
// and its admission does not refuse so, so the first refusals are the real cluster's, replayed;
// the create that goes through is the real API server's.
func TestCreateWaitsForTheQuotaStatus(t *testing.T) {
	ctx := context.Background()
	ns := "sless-00000000000000e1"
	refusals := 3
	provisioned(t)
	env := shared.Get(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(wc, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetNamespace() == ns && obj.GetName() == "f" && refusals > 0 {
				refusals--
				return apierrors.NewForbidden(schema.GroupResource{Group: "sless.dev", Resource: "functions"}, "f",
					errors.New("status unknown for quota: sless-quota, resources: count/functions.sless.dev"))
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	store, err := kubestore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Namespaces.Ensure(ctx, ns); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := store.Functions.Create(ctx, ns, objects.FunctionSpec{Name: "f", Runtime: "python3.11"}); err != nil {
		t.Fatalf("create while the quota was being counted: %v", err)
	}
	if refusals != 0 {
		t.Fatalf("%d refusals left", refusals)
	}
	t.Logf("created %v after three refusals", time.Since(start).Round(10*time.Millisecond))
	if _, err := store.Functions.Get(ctx, ns, "f"); err != nil {
		t.Fatal(err)
	}
}
