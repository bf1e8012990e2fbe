package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/operator/resources"
)

// registryCreds are the registry credentials the operator pushes with and hands out.
type registryCreds struct {
	keychain authn.Keychain
	// tenantPull is a tenant namespace's pull secret (.dockerconfigjson).
	tenantPull func(ns string) []byte
	// depsPush is a deps Job's push credential for one key.
	depsPush func(key string) []byte
}

// registryCredentials decides the registry credentials: derived from sless's registry keys, or
// (a registry of your own) the operator's DOCKER_CONFIG and one pull secret for everyone.
func (c *config) registryCredentials() (*registryCreds, error) {
	if c.registryAuthDir != "" {
		keys, err := regauth.Load(c.registryAuthDir)
		if err != nil {
			return nil, err
		}
		host := registryHost(c.registry)
		return &registryCreds{
			keychain:   keys.Platform().Keychain(host),
			tenantPull: func(ns string) []byte { return keys.TenantPull(ns).DockerConfigJSON(host) },
			// Long enough for a pod to be scheduled and its Job's 15-minute deadline.
			depsPush: func(key string) []byte { return keys.DepsPush(key, time.Now().Add(time.Hour)).DockerConfigJSON(host) },
		}, nil
	}
	shared := []byte(`{"auths":{}}`)
	if c.pullSecret != "" {
		var err error
		if shared, err = os.ReadFile(c.pullSecret); err != nil {
			return nil, err
		}
	}
	return &registryCreds{keychain: authn.DefaultKeychain, tenantPull: func(string) []byte { return shared }, depsPush: func(string) []byte { return shared }}, nil
}

// registryHost is the host[:port] of --registry (which may carry a path).
func registryHost(registry string) string {
	host, _, _ := strings.Cut(registry, "/")
	return host
}

// proxyURL is where installers reach the index proxy: its Service in the operator's namespace.
func (c *config) proxyURL() string {
	if c.indexProxy == "" {
		return ""
	}
	return fmt.Sprintf("http://%s.%s.svc:%d", resources.IndexProxyService, c.operatorNS, c.proxyPort())
}

// proxyPort is the index proxy's port (0 when it is off).
func (c *config) proxyPort() int32 {
	if c.indexProxy == "" {
		return 0
	}
	_, port, _ := net.SplitHostPort(c.indexProxy)
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// codeStore is --code-dir or the S3 bucket.
func (c *config) codeStore(ctx context.Context, logger *slog.Logger) (codestore.Store, error) {
	switch {
	case c.codeDir != "":
		return codestore.NewDir(c.codeDir)
	case c.s3Bucket != "":
		s3, err := codestore.NewS3(ctx, codestore.S3Config{Bucket: c.s3Bucket, Endpoint: c.s3Endpoint, Region: c.s3Region})
		if err != nil {
			return nil, err
		}
		// A fresh install has no bucket yet; uploads would fail with NoSuchBucket. The controller
		// makes it, retrying in the background: a pod that starts while S3 is away must still
		// serve (the API, /fn/ and the functions that run need no S3).
		if c.runsControllers() {
			go func() {
				for ctx.Err() == nil {
					err := s3.EnsureBucket(ctx)
					if err == nil {
						return
					}
					logger.Warn("creating the code store's bucket; retrying in 5 s", "error", err)
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
					}
				}
			}()
		}
		return s3, nil
	}
	return nil, errors.New("give --code-dir or --s3-bucket")
}
