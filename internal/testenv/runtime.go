package testenv

import (
	"testing"
	"testing/fstest"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sless-dev/sless/layers"
)

// RuntimeImage pushes a minimal python3.11 runtime image (one layer with /app/server.py) to
// registry reg as sless/runtime-python3.11 and returns it by digest: enough for the build
// pipeline to build functions on, not to run them.
func RuntimeImage(t testing.TB, reg string) string {
	t.Helper()
	l, err := layers.FromFS(fstest.MapFS{"server.py": {Data: []byte("print('server')\n")}}, layers.WithPrefix("/app"))
	if err != nil {
		t.Fatal(err)
	}
	img, _ := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	ref, _ := name.ParseReference(reg + "/sless/runtime-python3.11:latest")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return ref.Context().Digest(d.String()).String()
}
