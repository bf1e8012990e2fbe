package controllers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

// The controller learns of a function's secrets from the records the API keeps on the namespace
// (it reads no Secret): a missing secret or key fails the start naming it and rolls nothing out; a
// present one is rendered as key references and a read-only Secret volume of the tenant's own
// Secrets; a new version changes the pod template (a rollout), and nothing else does.
func TestFunctionSecrets(t *testing.T) {
	ns := "sless-0123456789abc5ec"
	e := newFnEnv(t, ns)
	e.start(nil)
	ctx := context.Background()
	c := e.c
	record := func(recs map[string]resources.SecretRecord) {
		t.Helper()
		var obj corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
			t.Fatal(err)
		}
		obj.Annotations = map[string]string{}
		for name, r := range recs {
			b, _ := json.Marshal(r)
			obj.Annotations[resources.SecretAnnotationPrefix+name] = string(b)
		}
		if err := c.Update(ctx, &obj); err != nil {
			t.Fatal(err)
		}
	}
	sum := e.upload("sec", map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
	if err := c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "sec", Namespace: ns}, Spec: slessv1.FunctionSpec{
		Runtime: "python3.11", CodeSHA256: sum,
		SecretEnv:   []slessv1.SecretEnvVar{{Name: "DB_URL", Secret: "db", Key: "url"}},
		SecretFiles: []slessv1.SecretFiles{{Path: "/var/run/secrets/tls", Secret: "tls"}}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start to fail on the missing secret", func() bool {
		f := e.fn("sec")
		return f.Status.Phase == apiv1.PhaseFailed && strings.Contains(f.Status.Message, `secret "db" does not exist`)
	})
	if d := e.deployment("sec"); d != nil {
		t.Fatalf("a Deployment was made without its secret: %+v", d.Spec.Template.Spec.Containers[0].Env)
	}

	now := time.Now().UTC().Truncate(time.Second)
	record(map[string]resources.SecretRecord{"db": {Version: 1, Keys: []string{"url"}, UpdatedAt: now}, "tls": {Version: 1, Keys: []string{"cert"}, UpdatedAt: now}})
	eventually(t, "the Deployment", func() bool { return e.deployment("sec") != nil })
	d := e.deployment("sec")
	pod := d.Spec.Template.Spec
	var ref *corev1.SecretKeySelector
	for _, v := range pod.Containers[0].Env {
		if v.Name == "DB_URL" && v.ValueFrom != nil {
			ref = v.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil || ref.Name != "sless-secret-db" || ref.Key != "url" {
		t.Errorf("DB_URL is %+v", ref)
	}
	mounted := false
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "sless-secret-tls" {
			for _, m := range pod.Containers[0].VolumeMounts {
				mounted = mounted || m.Name == v.Name && m.MountPath == "/var/run/secrets/tls" && m.ReadOnly
			}
		}
	}
	if !mounted {
		t.Errorf("no read-only mount of sless-secret-tls at /var/run/secrets/tls: %+v %+v", pod.Volumes, pod.Containers[0].VolumeMounts)
	}
	if got := d.Spec.Template.Annotations[resources.AnnotationSecretVersions]; got != "db=1,tls=1" {
		t.Errorf("secret versions %q", got)
	}

	// A new value: the template changes, so the Deployment rolls.
	record(map[string]resources.SecretRecord{"db": {Version: 2, Keys: []string{"url"}, UpdatedAt: now}, "tls": {Version: 1, Keys: []string{"cert"}, UpdatedAt: now}})
	eventually(t, "the new version in the template", func() bool {
		return e.deployment("sec").Spec.Template.Annotations[resources.AnnotationSecretVersions] == "db=2,tls=1"
	})

	// The key gone: the start fails naming it; what runs is left alone.
	record(map[string]resources.SecretRecord{"db": {Version: 3, Keys: []string{"other"}, UpdatedAt: now}, "tls": {Version: 1, Keys: []string{"cert"}, UpdatedAt: now}})
	eventually(t, "the start to fail on the missing key", func() bool {
		f := e.fn("sec")
		return f.Status.Phase == apiv1.PhaseFailed && strings.Contains(f.Status.Message, `secret "db" has no key "url"`)
	})
	if got := e.deployment("sec").Spec.Template.Annotations[resources.AnnotationSecretVersions]; got != "db=2,tls=1" {
		t.Errorf("a template with a missing key was rolled out: %q", got)
	}
}
