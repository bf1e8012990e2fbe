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
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // the only driver we use
	"github.com/sirupsen/logrus"
)

// Config says where the registry keeps its data and where it listens.
type Config struct {
	// RootDir holds the blobs and repositories. Required.
	RootDir string
	// Addr is the listen address; "127.0.0.1:0" picks a free port. The default is "127.0.0.1:0".
	Addr string
	// Log receives the registry's own log lines (warnings and errors). The default discards them.
	Log io.Writer
}

// Server is a running registry.
type Server struct {
	app *handlers.App
	srv *http.Server
	ln  net.Listener
	err chan error
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
	cfg.Log.Level = "warn"
	cfg.Log.AccessLog.Disabled = true
	cfg.HTTP.Secret = hex.EncodeToString(secret)
	cfg.HTTP.RelativeURLs = true

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("registry: listening on %s: %w", c.Addr, err)
	}
	app := handlers.NewApp(context.Background(), cfg)
	s := &Server{
		app: app,
		ln:  ln,
		err: make(chan error, 1),
		srv: &http.Server{Handler: app, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute},
	}
	go func() { s.err <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is host:port of the listener, e.g. "127.0.0.1:41234".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, waits briefly for in-flight requests and shuts the app down.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	s.app.Shutdown()
	if serr := <-s.err; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
