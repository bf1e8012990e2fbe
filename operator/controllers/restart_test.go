package controllers_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/oci"
)

// stallManifests lets a push upload its blobs and then hangs the manifest PUT until the request
// is cancelled: a build caught in its last step.
type stallManifests struct {
	once    sync.Once
	reached chan struct{}
}

func (s *stallManifests) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/manifests/") {
		s.once.Do(func() { close(s.reached) })
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// An operator stopped in the middle of a build (blobs pushed, manifest not yet) leaves the
// Function Building; the next operator process builds it again and converges to the same state
// an uninterrupted build reaches.
func TestOperatorRestartedMidBuildConverges(t *testing.T) {
	e := newFnEnv(t, "sless-00000000000000ab")
	stall := &stallManifests{reached: make(chan struct{})}
	_, stop := e.start(func(c *startConfig) { c.builder = append(c.builder, oci.WithTransport(stall)) })
	sum := e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 'again'\n"})
	e.create("hello", sum)
	<-stall.reached
	if f := e.fn("hello"); f.Status.Phase != apiv1.PhaseBuilding || f.Status.Image != "" {
		t.Fatalf("mid-build status %+v", f.Status)
	}
	stop()
	if f := e.fn("hello"); f.Status.Phase != apiv1.PhaseBuilding || e.deployment("hello") != nil {
		t.Fatalf("after the stop: status %+v", f.Status)
	}

	e.start(nil)
	eventually(t, "the deployment from the new operator", func() bool { return e.deployment("hello") != nil })
	f := e.fn("hello")
	if f.Status.BuiltCodeSHA256 != sum || f.Status.Image != e.deployment("hello").Spec.Template.Spec.Containers[0].Image {
		t.Fatalf("status %+v", f.Status)
	}
	ref, err := name.NewDigest(f.Status.Image)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(ref); err != nil {
		t.Errorf("the image the status names is not in the registry: %v", err)
	}
}
