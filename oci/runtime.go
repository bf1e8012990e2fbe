package oci

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/sless-dev/sless/layers"
)

// RuntimeSource is a runtime image to build: a language base image plus one layer holding the
// runtime's server.
type RuntimeSource struct {
	// Base is the language base image (python:3.11-slim, node:20-alpine, or one built by hack/).
	Base string
	// Name is the runtime's name, recorded as dev.sless.runtime.
	Name string
	// Files are placed under Dir ("/app").
	Files fs.FS
	Dir   string
	// Cmd starts the server; Env is added to the base's environment.
	Cmd []string
	Env []string
}

// BuildRuntime makes a runtime image with the same machinery as function images: the base's layers
// are never downloaded, an index base gives an index.
func (b *Builder) BuildRuntime(ctx context.Context, rs RuntimeSource) (*Result, error) {
	if rs.Files == nil || rs.Dir == "" || len(rs.Cmd) == 0 || rs.Name == "" {
		return nil, fmt.Errorf("%w: a runtime needs a name, files, a directory and a command", ErrInvalidSource)
	}
	bs, err := b.resolve(ctx, rs.Base)
	if err != nil {
		return nil, err
	}
	layerMT := bs.layerMediaType()
	l, err := layers.FromFS(rs.Files, append([]layers.Option{layers.WithPrefix(rs.Dir), layers.WithModTime(b.o.modTime),
		layers.WithMediaType(layerMT)}, b.o.layerOpts...)...)
	if err != nil {
		return nil, err
	}
	diffID, _ := l.DiffID()
	labels := func(baseDigest v1.Hash) map[string]string {
		return map[string]string{
			LabelBaseName:   rs.Base,
			LabelBaseDigest: baseDigest.String(),
			LabelCreated:    b.o.modTime.Format(time.RFC3339),
			LabelRevision:   diffID.String(),
			LabelRuntime:    rs.Name,
		}
	}
	edit := func(cf *v1.ConfigFile, baseDigest v1.Hash) map[string]string {
		cf.Created = v1.Time{Time: b.o.modTime}
		cf.Config.Cmd = rs.Cmd
		cf.Config.Entrypoint = nil
		for _, kv := range rs.Env {
			k, v, _ := strings.Cut(kv, "=")
			cf.Config.Env = setEnv(cf.Config.Env, k, v)
		}
		cf.Config.WorkingDir = FunctionDir
		cf.Config.User = FunctionUser
		lb := labels(baseDigest)
		setLabels(cf, lb)
		return lb
	}
	hist := v1.History{Created: v1.Time{Time: b.o.modTime}, CreatedBy: "sless: runtime " + rs.Name}
	res := &Result{Base: bs.ref, Revision: diffID.String(), Code: l}
	lmt, _ := l.MediaType()
	res.Image, res.Index, err = appendToAll(bs.img, bs.idx, []mutate.Addendum{{Layer: l, MediaType: lmt, History: hist}}, edit, labels)
	if err != nil {
		l.Close()
		return nil, err
	}
	return res, nil
}
