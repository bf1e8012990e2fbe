package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/sless-dev/sless/api/apiv1"
)

// MaxTokenBytes bounds the tokens parsed at all; longer ones are refused unread.
const MaxTokenBytes = 16 << 10

// ErrUnauthenticated wraps every verification failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// Caller is who a verified token says is calling.
type Caller struct {
	Subject   string
	Namespace string
}

// Verifier checks tokens. Make one with New; it is safe for concurrent use.
type Verifier struct {
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
}

// Option configures New.
type Option func(*options) error

type options struct {
	keyfunc  jwt.Keyfunc
	methods  []string
	kinds    int
	issuer   string
	audience string
	leeway   time.Duration
	logger   *slog.Logger
	ctx      context.Context
	jwksURL  string
	anyAud   bool
}

// ErrNoAudience: a JWKS URL names a shared identity provider, whose tokens for every other
// application would be accepted without an audience to tell them apart.
var ErrNoAudience = errors.New("auth: a JWKS URL needs an audience (--jwt-audience): without one, tokens the identity provider issued to any other application are accepted; --allow-any-audience accepts that knowingly")

// WithAnyAudience(true) accepts a JWKS-verified token whatever its audience (see ErrNoAudience).
func WithAnyAudience(ok bool) Option { return func(o *options) error { o.anyAud = ok; return nil } }

// WithHS256Secret verifies HS256 tokens with a shared secret (the single-host dev mode).
func WithHS256Secret(secret []byte) Option {
	return func(o *options) error {
		if len(secret) < 32 {
			return errors.New("auth: an HS256 secret needs at least 32 bytes")
		}
		o.kinds++
		o.methods = []string{"HS256"}
		o.keyfunc = func(*jwt.Token) (any, error) { return secret, nil }
		return nil
	}
}

// WithPublicKeyPEM verifies tokens signed by the private half of a PEM public key (RSA, ECDSA or
// Ed25519); only that key type's algorithms are accepted.
func WithPublicKeyPEM(pemBytes []byte) Option {
	return func(o *options) error {
		block, _ := pem.Decode(pemBytes)
		if block == nil {
			return errors.New("auth: the public key is not PEM")
		}
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			if k, err2 := x509.ParsePKCS1PublicKey(block.Bytes); err2 == nil {
				key = k
			} else {
				return fmt.Errorf("auth: parsing public key: %w", err)
			}
		}
		switch key.(type) {
		case *rsa.PublicKey:
			o.methods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
		case *ecdsa.PublicKey:
			o.methods = []string{"ES256", "ES384", "ES512"}
		case ed25519.PublicKey:
			o.methods = []string{"EdDSA"}
		default:
			return fmt.Errorf("auth: unsupported public key type %T", key)
		}
		o.kinds++
		o.keyfunc = func(*jwt.Token) (any, error) { return key, nil }
		return nil
	}
}

// WithJWKS verifies tokens with keys fetched from a JWKS URL, refreshed every 10 minutes and, for
// an unknown kid, at most every 30 seconds with a 2-second wait. Asymmetric algorithms only.
func WithJWKS(url string) Option {
	return func(o *options) error {
		o.kinds++
		o.jwksURL = url
		o.methods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
		return nil
	}
}

func jwksKeyfunc(o *options) (jwt.Keyfunc, error) {
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	logger := o.logger
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{o.jwksURL}, keyfunc.Override{
		HTTPTimeout:       5 * time.Second,
		RefreshInterval:   10 * time.Minute,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(30*time.Second), 1),
		RateLimitWaitMax:  2 * time.Second,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				if logger != nil {
					logger.ErrorContext(ctx, "refreshing JWKS", "url", u, "error", err)
				}
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS %s: %w", o.jwksURL, err)
	}
	return kf.Keyfunc, nil
}

// WithIssuer requires the iss claim to equal iss. The default (and "") is not to check it.
func WithIssuer(iss string) Option { return func(o *options) error { o.issuer = iss; return nil } }

// WithAudience requires aud to contain aud. The default (and "") is not to check it.
func WithAudience(aud string) Option { return func(o *options) error { o.audience = aud; return nil } }

// WithLeeway allows clock skew on exp, nbf and iat, at most 60 s. The default is 30 s.
func WithLeeway(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > time.Minute {
			return errors.New("auth: leeway must be between 0 and 60 s")
		}
		o.leeway = d
		return nil
	}
}

// WithLogger receives JWKS refresh errors. The default discards them.
func WithLogger(l *slog.Logger) Option { return func(o *options) error { o.logger = l; return nil } }

// WithContext bounds the JWKS refresh goroutine. The default is context.Background.
func WithContext(ctx context.Context) Option {
	return func(o *options) error { o.ctx = ctx; return nil }
}

// New makes a Verifier from exactly one key source.
func New(opts ...Option) (*Verifier, error) {
	o := &options{leeway: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.kinds != 1 {
		return nil, errors.New("auth: give exactly one key source: WithJWKS, WithPublicKeyPEM or WithHS256Secret")
	}
	if o.jwksURL != "" && o.audience == "" && !o.anyAud {
		return nil, ErrNoAudience
	}
	if o.jwksURL != "" {
		kf, err := jwksKeyfunc(o)
		if err != nil {
			return nil, err
		}
		o.keyfunc = kf
	}
	popts := []jwt.ParserOption{jwt.WithValidMethods(o.methods), jwt.WithExpirationRequired(), jwt.WithLeeway(o.leeway)}
	if o.issuer != "" {
		popts = append(popts, jwt.WithIssuer(o.issuer))
	}
	if o.audience != "" {
		popts = append(popts, jwt.WithAudience(o.audience))
	}
	return &Verifier{parser: jwt.NewParser(popts...), keyfunc: o.keyfunc}, nil
}

// Verify checks a token and says who it belongs to.
func (v *Verifier) Verify(token string) (Caller, error) {
	if len(token) > MaxTokenBytes {
		return Caller{}, fmt.Errorf("%w: token longer than %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	var claims jwt.RegisteredClaims
	if _, err := v.parser.ParseWithClaims(token, &claims, v.keyfunc); err != nil {
		return Caller{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if claims.Subject == "" {
		return Caller{}, fmt.Errorf("%w: token has no sub claim", ErrUnauthenticated)
	}
	return Caller{Subject: claims.Subject, Namespace: apiv1.NamespaceFor(claims.Subject)}, nil
}

// IssueHS256 makes a dev-mode token for sub, valid for ttl.
func IssueHS256(secret []byte, sub string, ttl time.Duration) (string, error) {
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   sub,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}).SignedString(secret)
}
