package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	_ "github.com/distribution/distribution/v3/registry/auth/token" // Distribution's token auth, sless the issuer
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // the only driver we use
	"github.com/sirupsen/logrus"

	"github.com/sless-dev/sless/internal/regauth"
)

// Config says where the registry keeps its data and where it listens.
type Config struct {
	// RootDir holds the blobs and repositories. Required.
	RootDir string
	// Addr is the listen address; "127.0.0.1:0" picks a free port. The default is "127.0.0.1:0".
	Addr string
	// Log receives the registry's own log lines (warnings and errors). The default discards them.
	Log io.Writer
	// Auth, when set, turns on Distribution's token authentication with these keys: every request
	// needs a token, which the registry's own TokenPath issues for valid credentials (see regauth).
	// Nil serves anonymously — only for tests of code that pushes, never for what sless runs.
	Auth *regauth.Keys
	// Realm is the token endpoint's URL as clients reach it. The default is
	// http://<listen address>/token, right when the registry listens on a specific address.
	Realm string
	// SweepAtStart runs Sweep on RootDir before listening, when no upload can be in progress:
	// the blobs of manifests deleted since are reclaimed. The default is false.
	SweepAtStart bool
}

// TokenPath is where the registry serves its token endpoint.
const TokenPath = "/token"

// Server is a running registry.
type Server struct {
	app   *handlers.App
	jwks  string // temp dir with the JWKS the access controller reads
	srv   *http.Server
	ln    net.Listener
	err   chan error
	swept SweepStats
}

// Start serves a registry until Close. ctx bounds only the start-up.
func Start(ctx context.Context, c Config) (*Server, error) {
	if c.RootDir == "" {
		return nil, errors.New("registry: RootDir is required")
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	logrus.SetOutput(io.Discard)
	if c.Log != nil {
		logrus.SetOutput(c.Log)
	}
	logrus.SetLevel(logrus.WarnLevel)
	var swept SweepStats
	if c.SweepAtStart {
		var err error
		if swept, err = Sweep(ctx, c.RootDir); err != nil {
			// A manifest it cannot read (a blob truncated by a crash) stops the sweep, not the
			// registry: serving what is intact matters more than reclaiming space.
			swept = SweepStats{Err: err}
			if c.Log != nil {
				fmt.Fprintf(c.Log, "registry: sweep at start failed: %v\n", err)
			}
		}
	}

	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	cfg := &configuration.Configuration{
		Version: "0.1",
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": c.RootDir},
			"delete":     configuration.Parameters{"enabled": true},
		},
	}
	cfg.Catalog.MaxEntries = 1000 // the parser's default; a Configuration built in code has 0
	cfg.Log.Level = "warn"
	cfg.Log.AccessLog.Disabled = true
	cfg.HTTP.Secret = hex.EncodeToString(secret)
	cfg.HTTP.RelativeURLs = true

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("registry: listening on %s: %w", c.Addr, err)
	}
	var handler http.Handler
	s := &Server{ln: ln, err: make(chan error, 1), swept: swept}
	if c.Auth != nil {
		if c.Realm == "" {
			c.Realm = "http://" + ln.Addr().String() + TokenPath
		}
		if s.jwks, err = os.MkdirTemp("", "sless-registry-jwks-"); err != nil {
			ln.Close()
			return nil, err
		}
		jwksFile := filepath.Join(s.jwks, "jwks.json")
		if err := os.WriteFile(jwksFile, c.Auth.JWKS(), 0o600); err != nil {
			s.cleanup()
			return nil, err
		}
		cfg.Auth = configuration.Auth{"token": configuration.Parameters{
			"realm": c.Realm, "service": regauth.Service, "issuer": regauth.Issuer, "jwks": jwksFile,
			// Only what the issuer signs with: no algorithm confusion (HS256 with the public key).
			"signingalgorithms": []any{"ES256"},
		}}
	}
	// NewApp panics on a bad configuration; ours is built here, so that is a bug, not input.
	s.app = handlers.NewApp(context.Background(), cfg)
	handler = s.app
	if c.Auth != nil {
		mux := http.NewServeMux()
		mux.Handle(TokenPath, c.Auth.TokenHandler())
		mux.Handle("/", s.app)
		handler = mux
	}
	s.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute}
	go func() { s.err <- s.srv.Serve(ln) }()
	return s, nil
}

// Swept is what Config.SweepAtStart removed (zero without it).
func (s *Server) Swept() SweepStats { return s.swept }

// Addr is host:port of the listener, e.g. "127.0.0.1:41234".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, waits briefly for in-flight requests and shuts the app down.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// A connection a client dialled and never used stays "new" to the server, and Shutdown
		// waits for it as for a request in flight: what is left after the grace is cut.
		err = s.srv.Close()
	}
	s.app.Shutdown()
	s.cleanup()
	if serr := <-s.err; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

func (s *Server) cleanup() {
	if s.jwks != "" {
		os.RemoveAll(s.jwks)
	}
}
