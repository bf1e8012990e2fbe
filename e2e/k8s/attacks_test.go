package k8s_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/internal/testenv"
)

// Tenant containment on the real cluster, registry part: a handler in tenant B tries tenant A's
// repositories anonymously, and B's own pull secret is tried against A's image and for pushes.
func TestTenantCannotUseTheRegistry(t *testing.T) {
	t.Parallel()
	victim, attacker := tenant(t, subject("victim")), tenant(t, subject("attacker"))
	before := deploy(t, victim, "app", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'victim'\n"})
	deploy(t, attacker, "probe", "python3.11", map[string]string{"handler.py": testenv.RegistryAttack})

	code, body := get(cluster.Endpoint + "/fn/" + attacker.Namespace() + "/probe?reg=" + cluster.Registry + "&victim=" + victim.Namespace() + "/app")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	testenv.CheckRegistryAttack(t, body)

	// The attacker's namespace's own pull secret (what its pods are pulled with).
	var sec corev1.Secret
	if err := cluster.Kube.Get(context.Background(), client.ObjectKey{Namespace: attacker.Namespace(), Name: "sless-registry"}, &sec); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password string }
	}
	if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		t.Fatal(err)
	}
	cred := cfg.Auths[cluster.Registry]
	pullB := remote.WithAuth(&authn.Basic{Username: cred.Username, Password: cred.Password})
	victimRef, _ := name.ParseReference(before.Status.Image, name.Insecure)
	if _, err := remote.Image(victimRef, pullB); err == nil {
		t.Error("tenant B's pull secret pulls tenant A's image")
	}
	img, _ := random.Image(64, 1)
	for _, to := range []string{victim.Namespace() + "/app:latest", attacker.Namespace() + "/probe:evil", "sless/deps/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef:latest"} {
		ref, _ := name.ParseReference(cluster.Registry+"/"+to, name.Insecure)
		if err := remote.Write(ref, img, pullB); err == nil {
			t.Errorf("tenant B's pull secret pushed %s", to)
		}
		if err := remote.Write(ref, img); err == nil {
			t.Errorf("an anonymous push of %s succeeded", to)
		}
	}
	after, err := victim.GetFunction(context.Background(), "app")
	if err != nil || after.Status.Image != before.Status.Image {
		t.Errorf("the victim's image changed: %s → %v (%v)", before.Status.Image, after, err)
	}
	if code, body := get(after.Status.URL); code != 200 || body != "victim" {
		t.Errorf("the victim answers %d %s", code, body)
	}
}
