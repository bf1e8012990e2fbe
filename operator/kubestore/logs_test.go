package kubestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/objects"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

func TestReadPodLog(t *testing.T) {
	long := strings.Repeat("x", apiv1.MaxLogLine+100000)
	in := "2026-12-01T20:00:00.123456789Z hello world\n" +
		"2026-12-01T20:00:01Z \n" +
		"2026-12-01T20:00:02Z " + long + "\n" +
		"not a timestamp\n" +
		"2026-12-01T20:00:03Z last, no newline"
	var got []apiv1.LogLine
	if err := kubestore.ReadPodLog(strings.NewReader(in), "pod-1", func(l apiv1.LogLine) error {
		got = append(got, l)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d lines: %+v", len(got), got)
	}
	want0 := apiv1.LogLine{Time: time.Date(2026, 12, 1, 20, 0, 0, 123456789, time.UTC), Instance: "pod-1", Stream: apiv1.StreamOutput, Line: "hello world"}
	if got[0] != want0 {
		t.Errorf("line 0: %+v", got[0])
	}
	if got[1].Line != "" || got[1].Time.Second() != 1 {
		t.Errorf("an empty line: %+v", got[1])
	}
	if len(got[2].Line) > apiv1.MaxLogLine+len("…") || !strings.HasSuffix(got[2].Line, "…") {
		t.Errorf("a long line kept %d bytes", len(got[2].Line))
	}
	if got[3].Line != "not a timestamp" || time.Since(got[3].Time) > time.Minute {
		t.Errorf("a line without a timestamp: %+v", got[3])
	}
	if got[4].Line != "last, no newline" {
		t.Errorf("the last line: %+v", got[4])
	}
	stop := errors.New("stop")
	if err := kubestore.ReadPodLog(strings.NewReader(in), "p", func(apiv1.LogLine) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("emit's error: %v", err)
	}
}

// The container ReadLog reads is the one MakeDeployment makes.
func TestFunctionContainerName(t *testing.T) {
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "n"}}
	d := resources.MakeDeployment(fn, "img@sha256:0", 1)
	if c := d.Spec.Template.Spec.Containers[0].Name; c != kubestore.FunctionContainer {
		t.Errorf("the function container is %q", c)
	}
}

// Instances on a real API server: the function's pods (not its deps pods, not another
// function's) and its stopped pods' kept logs (not those past fnlog.KeepStopped, not a pod that
// still runs). Pods do not run here (no kubelet): their logs are read in e2e/k8s.
func TestLogInstances(t *testing.T) {
	env := shared.Get(t)
	ctx := context.Background()
	ns := "logs-instances"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, fn string, r runspec.Role) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: resources.Labels(fn, r)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: kubestore.FunctionContainer, Image: "img"}}}}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pod("hello-a", "hello", runspec.RoleFunction)
	pod("hello-b", "hello", runspec.RoleFunction)
	pod("hello-deps", "hello", runspec.RoleDeps)
	pod("other-a", "other", runspec.RoleFunction)

	dir := t.TempDir()
	code, _ := codestore.NewDir(dir)
	line := []apiv1.LogLine{{Time: time.Now().UTC(), Instance: "x", Stream: apiv1.StreamOutput, Line: "kept"}}
	for _, id := range []string{"hello-old", "hello-b", "hello-gone", "hello-expired"} {
		if err := fnlog.Save(ctx, code, fnlog.StoppedKey(ns, "hello", id), line); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-fnlog.KeepStopped - time.Minute)
	if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(fnlog.StoppedKey(ns, "hello", "hello-expired"))), old, old); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	logs := &kubestore.Logs{Pods: cs, Code: code, Poll: 20 * time.Millisecond}
	got, err := logs.LogInstances(ctx, ns, "hello")
	if err != nil {
		t.Fatal(err)
	}
	want := []objects.LogInstance{{ID: "hello-a"}, {ID: "hello-b"}, {ID: "hello-gone", Stopped: true}, {ID: "hello-old", Stopped: true}}
	if len(got) != len(want) {
		t.Fatalf("instances %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("instances %+v, want %+v", got, want)
		}
	}

	read := func(inst objects.LogInstance, q objects.LogQuery) []apiv1.LogLine {
		t.Helper()
		var out []apiv1.LogLine
		if err := logs.ReadLog(ctx, ns, "hello", inst, q, func(l apiv1.LogLine) error { out = append(out, l); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if l := read(objects.LogInstance{ID: "hello-old", Stopped: true}, objects.LogQuery{Tail: -1}); len(l) != 1 || l[0].Line != "kept" {
		t.Errorf("a stopped pod's kept log: %+v", l)
	}
	if l := read(objects.LogInstance{ID: "hello-old", Stopped: true}, objects.LogQuery{Tail: 10, Since: time.Now().Add(time.Minute)}); len(l) != 0 {
		t.Errorf("since after every kept line: %+v", l)
	}
	// A pod that has not started: nothing, at once.
	if l := read(objects.LogInstance{ID: "hello-a"}, objects.LogQuery{Tail: 10}); len(l) != 0 {
		t.Errorf("a pod not started: %+v", l)
	}
	// Followed, it is waited for until the reader goes.
	fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := logs.ReadLog(fctx, ns, "hello", objects.LogInstance{ID: "hello-a"}, objects.LogQuery{Tail: 10, Follow: true}, func(apiv1.LogLine) error { return nil }); err != nil {
		t.Errorf("following a pod not started: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("following a pod not started returned after %v, before the reader went", d)
	}
	// Listed live, gone when read: what was kept of it.
	if l := read(objects.LogInstance{ID: "hello-gone"}, objects.LogQuery{Tail: 10}); len(l) != 1 || l[0].Line != "kept" {
		t.Errorf("a pod gone between listing and reading: %+v", l)
	}
	// Not one of the function's serving pods: nothing.
	for _, id := range []string{"hello-deps", "other-a"} {
		if l := read(objects.LogInstance{ID: id}, objects.LogQuery{Tail: 10}); len(l) != 0 {
			t.Errorf("%s read as a pod of hello: %+v", id, l)
		}
	}
}
