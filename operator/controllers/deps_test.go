package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
)

// A dependency cache miss starts a deps Job (its spec is checked here), the build waits for it
// and then uses the layer the Job pushed; the same requirements again start no Job; a failed
// install fails the function with the installer's own words. envtest has no kubelet: the test
// does what the Job's pod would (pushes the layer with the code `sless deps push` runs) and marks
// the Job finished.
func TestDependenciesJob(t *testing.T) {
	e := newFnEnv(t, "sless-00000000000000de")
	ctx := context.Background()
	const index = "http://10.88.0.1:3141/simple"
	store, err := deps.NewRegistryStore(e.reg + "/sless/deps")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := e.start(func(c *startConfig) {
		c.deps = &controllers.DepsConfig{Store: store, Repo: e.reg + "/sless/deps", OperatorImage: e.runtime, Insecure: true,
			Pins:           &controllers.ConfigMapPins{Client: e.c, Reader: e.c, Namespace: e.ns},
			PushCredential: func(key string) []byte { return []byte(`{"auths":{"push-for":"` + key + `"}}`) },
			Proxy:          "http://sless-index-proxy.sless-system.svc:3128"}
		c.pipeline = append(c.pipeline, build.WithIndex("python", index))
	})
	requirements := "six==1.16.0\n"
	key, err := deps.Key(deps.Spec{Runtime: "python3.11", RuntimeImage: e.runtime, Namespace: e.ns, IndexURL: index,
		Files: map[string][]byte{"requirements.txt": []byte(requirements)}})
	if err != nil {
		t.Fatal(err)
	}
	depsJobs := func(fn string) []batchv1.Job {
		var l batchv1.JobList
		e.c.List(ctx, &l, client.InNamespace(e.ns), client.MatchingLabels{"sless.dev/function": fn, "sless.dev/role": "deps"})
		return l.Items
	}

	e.create("app", e.upload("app", map[string]string{"handler.py": "import six\ndef handle(e):\n    return six.PY3\n", "requirements.txt": requirements}))
	var job batchv1.Job
	t.Run("a cache miss starts a deps Job and the build waits", func(t *testing.T) {
		eventually(t, "the deps Job", func() bool { return len(depsJobs("app")) == 1 })
		job = depsJobs("app")[0]
		if job.Name != "app-deps-"+key[:12] {
			t.Errorf("job name %s, key %s", job.Name, key)
		}
		eventually(t, "Building with the Job's name", func() bool {
			f := e.fn("app")
			return f.Status.Phase == apiv1.PhaseBuilding && strings.Contains(f.Status.Message, job.Name)
		})
		if c := meta.FindStatusCondition(e.fn("app").Status.Conditions, slessv1.FunctionBuilt); c == nil || c.Reason != "InstallingDependencies" {
			t.Errorf("Built condition %+v", c)
		}
		if err := lifecycletest.Wrote(lifecycletest.BuildPending, e.fn("app").Status.Lifecycle()); err != nil {
			t.Error(err)
		}
		if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].Kind != "Function" || job.OwnerReferences[0].Name != "app" {
			t.Errorf("owner %+v", job.OwnerReferences)
		}
		pod := job.Spec.Template.Spec
		install, push := pod.InitContainers[0], pod.Containers[0]
		if install.Image != e.runtime || !slices.Contains(install.Command, "pip") || !slices.Contains(install.Command, index) ||
			!slices.Contains(install.Command, "/in/requirements.txt") || install.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("install container %+v", install)
		}
		wantPush := []string{"sless", "deps", "push", "--dir", "/out", "--to", deps.LayerRef(e.reg+"/sless/deps", key), "--prefix", "/app/deps", "--insecure"}
		if !slices.Equal(push.Command, wantPush) || push.Image != e.runtime {
			t.Errorf("push container %s %v, want %v", push.Image, push.Command, wantPush)
		}
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("deps pod not restricted: %+v", pod.SecurityContext)
		}
		// The one credential of the pod pushes this key only, and only the push container, which
		// starts after the installer exited, mounts it.
		var secretName string
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				if secretName != "" {
					t.Errorf("two secret volumes: %s, %s", secretName, v.Secret.SecretName)
				}
				secretName = v.Secret.SecretName
			}
		}
		var sec corev1.Secret
		eventually(t, "the push credential Secret", func() bool {
			return e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: secretName}, &sec) == nil
		})
		if string(sec.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"push-for":"`+key+`"}}` ||
			len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Kind != "Job" || sec.OwnerReferences[0].UID != job.UID {
			t.Errorf("push secret %s: %s, owners %+v", secretName, sec.Data, sec.OwnerReferences)
		}
		for _, m := range install.VolumeMounts {
			if m.Name == "registry-auth" {
				t.Error("the installer mounts the push credential")
			}
		}
		if len(install.EnvFrom) != 0 {
			t.Errorf("the installer gets env from %+v", install.EnvFrom)
		}
		// The installer reaches the indexes through the index proxy only.
		proxyEnv := map[string]string{}
		for _, e := range install.Env {
			proxyEnv[e.Name] = e.Value
		}
		if proxyEnv["HTTP_PROXY"] != "http://sless-index-proxy.sless-system.svc:3128" || proxyEnv["HTTPS_PROXY"] != proxyEnv["HTTP_PROXY"] ||
			proxyEnv["npm_config_proxy"] != proxyEnv["HTTP_PROXY"] {
			t.Errorf("installer env %v", proxyEnv)
		}
		var cm corev1.ConfigMap
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: job.Name}, &cm); err != nil || cm.Data["requirements.txt"] != requirements {
			t.Errorf("manifests configmap %v %v", cm.Data, err)
		}
		if e.deployment("app") != nil {
			t.Error("deployed before its dependencies were installed")
		}
	})
	var depsDigest string
	t.Run("the Job done, the build uses its layer", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "six-1.16.0.dist-info"), 0o755)
		os.WriteFile(filepath.Join(dir, "six.py"), []byte("PY3 = True\n"), 0o644)
		l, err := deps.LayerFromDir(dir, "/app/deps")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(ctx, key, l); err != nil {
			t.Fatal(err)
		}
		d, _ := l.Digest()
		depsDigest = d.String()
		e.finishJob(&job, false, "push", 0, "")
		eventually(t, "the deployment", func() bool { return e.deployment("app") != nil })
		f := e.fn("app")
		if f.Status.Build == nil || f.Status.Build.DepsKey != key || f.Status.Build.DepsCached {
			t.Errorf("build status %+v", f.Status.Build)
		}
		if !imageHasLayer(t, f.Status.Image, depsDigest) {
			t.Errorf("image %s lacks the deps layer %s", f.Status.Image, depsDigest)
		}
		eventually(t, "the finished Job and its manifests removed", func() bool {
			err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: job.Name}, &corev1.ConfigMap{})
			return len(depsJobs("app")) == 0 && apierrors.IsNotFound(err)
		})
	})
	t.Run("the same requirements again: no Job, the cached layer", func(t *testing.T) {
		e.create("app2", e.upload("app2", map[string]string{"handler.py": "def handle(e):\n    return 2\n", "requirements.txt": requirements}))
		eventually(t, "the deployment", func() bool { return e.deployment("app2") != nil })
		f := e.fn("app2")
		if f.Status.Build == nil || f.Status.Build.DepsKey != key || !f.Status.Build.DepsCached || !imageHasLayer(t, f.Status.Image, depsDigest) {
			t.Errorf("build status %+v image %s", f.Status.Build, f.Status.Image)
		}
		if j := depsJobs("app2"); len(j) != 0 {
			t.Errorf("a Job ran for a cached key: %v", j[0].Name)
		}
	})
	t.Run("a failed install fails the function with the installer's output", func(t *testing.T) {
		e.create("bad", e.upload("bad", map[string]string{"handler.py": "def handle(e):\n    return 0\n", "requirements.txt": "nosuchpkg==9.9\n"}))
		eventually(t, "the deps Job", func() bool { return len(depsJobs("bad")) == 1 })
		j := depsJobs("bad")[0]
		e.finishJob(&j, true, "install", 1, "ERROR: No matching distribution found for nosuchpkg==9.9")
		// Failed, and marked failed for this build.
		eventually(t, "Failed", func() bool {
			f := e.fn("bad")
			return f.Status.Phase == apiv1.PhaseFailed && f.Status.FailedBuildKey != ""
		})
		f := e.fn("bad")
		if c := meta.FindStatusCondition(f.Status.Conditions, slessv1.FunctionReady); c == nil || c.Reason != apiv1.ReasonFailed ||
			!strings.Contains(f.Status.Message, "No matching distribution found for nosuchpkg") {
			t.Errorf("status %q %+v", f.Status.Message, c)
		}
		if err := lifecycletest.Wrote(lifecycletest.BuildFailedUser, f.Status.Lifecycle()); err != nil {
			t.Error(err)
		}
		// Reconciling it again (as any event would) neither builds nor writes: the failure latched.
		rv, builds := e.fn("bad").ResourceVersion, e.builds.Load()
		waitCached(t, r, e.fn("bad"))
		for range 3 {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: e.ns, Name: "bad"}}); err != nil {
				t.Fatal(err)
			}
		}
		if got := e.fn("bad").ResourceVersion; got != rv || e.builds.Load() != builds {
			t.Errorf("the failed function is retried: resourceVersion %s → %s, builds %d → %d", rv, got, builds, e.builds.Load())
		}
		if jobs := depsJobs("bad"); len(jobs) != 1 || jobs[0].UID != j.UID {
			t.Errorf("the failed Job must stay (its logs say why), and no other start: %d jobs", len(jobs))
		}
		// A new upload (same requirements) is a retry: the failed Job is replaced by a new one.
		f = e.fn("bad")
		f.Spec.CodeSHA256 = e.upload("bad", map[string]string{"handler.py": "def handle(e):\n    return 1\n", "requirements.txt": "nosuchpkg==9.9\n"})
		if err := e.c.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a new deps Job for the retry", func() bool {
			jobs := depsJobs("bad")
			return len(jobs) == 1 && jobs[0].UID != j.UID && e.fn("bad").Status.Phase == apiv1.PhaseBuilding
		})
		retry := depsJobs("bad")[0]
		// Fixed requirements: a new key, and the old key's Job (still running) goes.
		f = e.fn("bad")
		f.Spec.CodeSHA256 = e.upload("bad", map[string]string{"handler.py": "def handle(e):\n    return 2\n", "requirements.txt": "six==1.16.0\n"})
		if err := e.c.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the old key's Job removed", func() bool {
			for _, j := range depsJobs("bad") {
				if j.UID == retry.UID {
					return false
				}
			}
			return true
		})
	})
	t.Run("a failed push is the platform's failure: retried, not blamed on the dependencies", func(t *testing.T) {
		e.create("pushfail", e.upload("pushfail", map[string]string{"handler.py": "x = 1\n", "requirements.txt": "other==1.0\n"}))
		eventually(t, "the deps Job", func() bool { return len(depsJobs("pushfail")) == 1 })
		j := depsJobs("pushfail")[0]
		e.finishJob(&j, false, "push", 1, "UNAUTHORIZED: authentication required")
		eventually(t, "a new Job (retry)", func() bool {
			jobs := depsJobs("pushfail")
			return len(jobs) == 1 && jobs[0].UID != j.UID
		})
		var evs corev1.EventList
		e.c.List(ctx, &evs, client.InNamespace(e.ns))
		found := false
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == "pushfail" && ev.Reason == "DependenciesFailed" {
				t.Errorf("blamed on the dependencies: %s", ev.Message)
			}
			if ev.InvolvedObject.Name == "pushfail" && ev.Reason == "BuildFailed" && strings.Contains(ev.Message, "UNAUTHORIZED") {
				found = true
			}
		}
		if !found {
			eventually(t, "a BuildFailed event naming the push error", func() bool {
				e.c.List(ctx, &evs, client.InNamespace(e.ns))
				for _, ev := range evs.Items {
					if ev.InvolvedObject.Name == "pushfail" && ev.Reason == "BuildFailed" && strings.Contains(ev.Message, "UNAUTHORIZED") {
						return true
					}
				}
				return false
			})
		}
		if f := e.fn("pushfail"); f.Status.FailedBuildKey != "" {
			t.Errorf("a platform failure marked the build failed for good: %+v", f.Status)
		}
	})
	t.Run("a dependency layer replaced in the registry is refused", func(t *testing.T) {
		var pins corev1.ConfigMap
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "sless-deps-pins"}, &pins); err != nil || pins.Data[key] != depsDigest {
			t.Fatalf("the pin of %s: %v %v, want %s", key[:12], pins.Data, err, depsDigest)
		}
		// Someone who can push to the registry moves the tag to a layer that replaces the runtime.
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "six.py"), []byte("PY3 = 'pwned'\n"), 0o644)
		evil, err := deps.LayerFromDir(dir, "/app/deps")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(ctx, key, evil); err != nil {
			t.Fatal(err)
		}
		e.create("app3", e.upload("app3", map[string]string{"handler.py": "import six\ndef handle(e):\n    return six.PY3\n", "requirements.txt": requirements}))
		// Not the function's fault: retried within the budget (Building), the message says why.
		var msg string
		eventually(t, "the replaced layer refused", func() bool {
			f := e.fn("app3")
			msg = f.Status.Message
			return f.Status.Phase == apiv1.PhaseBuilding && strings.Contains(msg, "retrying in")
		})
		if err := lifecycletest.Wrote(lifecycletest.BuildRetrying, e.fn("app3").Status.Lifecycle()); err != nil {
			t.Error(err)
		}
		if !strings.Contains(msg, "replaced in the store") || e.deployment("app3") != nil {
			t.Errorf("message %q (deployment %v)", msg, e.deployment("app3") != nil)
		}
	})
	t.Run("dependencies on an operator without a deps cache: a clear error", func(t *testing.T) {
		e2 := newFnEnv(t, "sless-00000000000000df")
		e2.start(nil)
		e2.create("app", e2.upload("app", map[string]string{"handler.py": "x = 1\n", "requirements.txt": requirements}))
		// The platform's error: retried with backoff, Building within the retry budget, and the
		// status says why.
		var msg string
		eventually(t, "the error in the status", func() bool {
			f := e2.fn("app")
			msg = f.Status.Message
			return f.Status.Phase == apiv1.PhaseBuilding && strings.Contains(msg, "retrying in")
		})
		if !strings.Contains(msg, "no dependency installs configured") || !strings.Contains(msg, "--operator-image") {
			t.Errorf("message %q", msg)
		}
	})
}

func imageHasLayer(t *testing.T, image, digest string) bool {
	t.Helper()
	ref, err := name.NewDigest(image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	for _, l := range ls {
		if d, _ := l.Digest(); d.String() == digest {
			return true
		}
	}
	return false
}
