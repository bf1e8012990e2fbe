package options

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/sless-dev/sless/api/auth"
)

// Auth configures how the API verifies bearer tokens (package api/auth): the keys, and the
// claims a token must carry.
type Auth struct {
	JWKSURL       string
	PublicKeyFile string
	Issuer        string
	Audience      string
	AnyAudience   bool
}

// AddFlags declares the token verification flags on fs.
func (o *Auth) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.JWKSURL, "jwks-url", "", "verify tokens with the keys this JWKS URL serves (needs --jwt-audience or --allow-any-audience)")
	fs.StringVar(&o.PublicKeyFile, "jwt-public-key", "", "verify tokens with the PEM public key in this file")
	fs.StringVar(&o.Issuer, "jwt-issuer", "", "required iss claim")
	fs.StringVar(&o.Audience, "jwt-audience", "", "required aud claim (required with --jwks-url unless --allow-any-audience)")
	fs.BoolVar(&o.AnyAudience, "allow-any-audience", false, "with --jwks-url and no --jwt-audience, accept tokens the identity provider issued to any application")
}

// Validate reports flags that exclude each other.
func (o *Auth) Validate() error {
	if o.JWKSURL != "" && o.PublicKeyFile != "" {
		return errors.New("give at most one of --jwks-url and --jwt-public-key")
	}
	return nil
}

// Key is the key source the flags name (--jwks-url or --jwt-public-key, whose file it reads), or
// nil when they name none: the binary then picks its own (sless up a development secret,
// sless-operator --hs256-secret-file).
func (o *Auth) Key() (auth.Option, error) {
	switch {
	case o.JWKSURL != "":
		return auth.WithJWKS(o.JWKSURL), nil
	case o.PublicKeyFile != "":
		pem, err := os.ReadFile(o.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--jwt-public-key: %w", err)
		}
		return auth.WithPublicKeyPEM(pem), nil
	}
	return nil, nil
}

// Verifier verifies tokens with key (from Key, or the binary's own) and requires the claims the
// flags name. ctx bounds a JWKS's background refreshes.
func (o *Auth) Verifier(ctx context.Context, logger *slog.Logger, key auth.Option) (*auth.Verifier, error) {
	// Empty issuer and audience check nothing.
	return auth.New(key, auth.WithContext(ctx), auth.WithLogger(logger), auth.WithIssuer(o.Issuer), auth.WithAudience(o.Audience),
		auth.WithAnyAudience(o.AnyAudience))
}
