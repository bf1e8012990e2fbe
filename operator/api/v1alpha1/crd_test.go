package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/lifecycle"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// The generated CRDs on a real kube-apiserver: defaults apply, invalid specs are refused by the
// schema (before any controller sees them), immutable fields stay put.
func TestCRDSchemas(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-0123456789abcdef"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns.Name} }

	f := &slessv1.Function{ObjectMeta: meta("hello"), Spec: slessv1.FunctionSpec{Runtime: "python3.11"}}
	if err := c.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	if f.Spec.Entrypoint != "handler.handle" || f.Spec.MemoryMB != 128 || f.Spec.TimeoutSec != 30 {
		t.Errorf("defaults not applied: %+v", f.Spec)
	}
	f.Apply(lifecycle.BuildStarted{Key: "k", CodeSHA256: "c0de"}, time.Now())
	if err := c.Status().Update(ctx, f); err != nil {
		t.Fatalf("status subresource: %v", err)
	}

	// The schema's enum is the catalog: a function on any runtime the API takes is stored.
	for _, rt := range apiv1.Runtimes() {
		f := &slessv1.Function{ObjectMeta: meta("on-" + strings.ReplaceAll(rt, ".", "-")), Spec: slessv1.FunctionSpec{Runtime: rt}}
		if err := c.Create(ctx, f); err != nil {
			t.Errorf("a %s function: %v", rt, err)
		}
	}

	for _, tc := range []struct {
		name string
		obj  client.Object
		want string
	}{
		{"unknown runtime", &slessv1.Function{ObjectMeta: meta("a"), Spec: slessv1.FunctionSpec{Runtime: "ruby3"}}, "Unsupported value"},
		{"memory too small", &slessv1.Function{ObjectMeta: meta("b"), Spec: slessv1.FunctionSpec{Runtime: "nodejs20", MemoryMB: 16}}, "memoryMB"},
		{"timeout too long", &slessv1.Function{ObjectMeta: meta("c"), Spec: slessv1.FunctionSpec{Runtime: "nodejs20", TimeoutSec: 10000}}, "timeoutSec"},
		{"bad entrypoint", &slessv1.Function{ObjectMeta: meta("d"), Spec: slessv1.FunctionSpec{Runtime: "nodejs20", Entrypoint: "no dots"}}, "entrypoint"},
		{"bad code hash", &slessv1.Function{ObjectMeta: meta("e"), Spec: slessv1.FunctionSpec{Runtime: "nodejs20", CodeSHA256: "xyz"}}, "codeSHA256"},
		{"bad name", &slessv1.Function{ObjectMeta: meta("Bad_Name"), Spec: slessv1.FunctionSpec{Runtime: "nodejs20"}}, "Invalid value"},
		{"cron without schedule", &slessv1.Trigger{ObjectMeta: meta("t1"), Spec: slessv1.TriggerSpec{Type: "cron", FunctionRef: "hello"}}, "needs a schedule"},
		{"http with schedule", &slessv1.Trigger{ObjectMeta: meta("t2"), Spec: slessv1.TriggerSpec{Type: "http", FunctionRef: "hello", Schedule: "* * * * *"}}, "no schedule"},
		{"bad cron", &slessv1.Trigger{ObjectMeta: meta("t3"), Spec: slessv1.TriggerSpec{Type: "cron", FunctionRef: "hello", Schedule: "every day"}}, "schedule"},
		{"bad trigger type", &slessv1.Trigger{ObjectMeta: meta("t4"), Spec: slessv1.TriggerSpec{Type: "kafka", FunctionRef: "hello"}}, "Unsupported value"},
		{"negative runID", &slessv1.FunctionJob{ObjectMeta: meta("j1"), Spec: slessv1.FunctionJobSpec{FunctionRef: "hello", RunID: -1}}, "runID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, tc.obj)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}

	tr := &slessv1.Trigger{ObjectMeta: meta("web"), Spec: slessv1.TriggerSpec{Type: "http", FunctionRef: "hello"}}
	if err := c.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if tr.Spec.Enabled == nil || !*tr.Spec.Enabled {
		t.Errorf("enabled default: %v", tr.Spec.Enabled)
	}
	no := false
	tr.Spec.Enabled = &no
	if err := c.Update(ctx, tr); err != nil {
		t.Errorf("enabled must change in place: %v", err)
	}
	tr.Spec.FunctionRef = "other"
	if err := c.Update(ctx, tr); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("functionRef change: %v", err)
	}
}
