package regauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File names in a keys directory (also the keys of the Kubernetes Secret that holds them).
const (
	SigningKeyFile = "signing-key.pem"
	SecretFile     = "secret"
)

// Keys sign tokens and derive passwords. Every process that issues tokens or hands out
// credentials for one registry holds the same Keys.
type Keys struct {
	signing *ecdsa.PrivateKey
	secret  []byte
	kid     string
}

// Generate makes new random keys.
func Generate() (*Keys, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return newKeys(priv, secret)
}

func newKeys(priv *ecdsa.PrivateKey, secret []byte) (*Keys, error) {
	if len(secret) < 32 {
		return nil, errors.New("regauth: the secret must be at least 32 bytes")
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &Keys{signing: priv, secret: secret, kid: hex.EncodeToString(sum[:16])}, nil
}

// Load reads keys from dir (SigningKeyFile, a PKCS#8 EC key in PEM; SecretFile, hex).
func Load(dir string) (*Keys, error) {
	pemBytes, err := os.ReadFile(filepath.Join(dir, SigningKeyFile))
	if err != nil {
		return nil, fmt.Errorf("regauth: %w", err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, fmt.Errorf("regauth: %s holds no PEM block", SigningKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("regauth: %s: %w", SigningKeyFile, err)
	}
	priv, ok := k.(*ecdsa.PrivateKey)
	if !ok || priv.Curve != elliptic.P256() {
		return nil, fmt.Errorf("regauth: %s is not a P-256 EC key", SigningKeyFile)
	}
	hexSecret, err := os.ReadFile(filepath.Join(dir, SecretFile))
	if err != nil {
		return nil, fmt.Errorf("regauth: %w", err)
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(hexSecret)))
	if err != nil {
		return nil, fmt.Errorf("regauth: %s: %w", SecretFile, err)
	}
	return newKeys(priv, secret)
}

// LoadOrCreate loads the keys in dir, or generates and saves them (0600) when dir has none.
func LoadOrCreate(dir string) (*Keys, error) {
	if _, err := os.Stat(filepath.Join(dir, SigningKeyFile)); errors.Is(err, os.ErrNotExist) {
		k, err := Generate()
		if err != nil {
			return nil, err
		}
		return k, k.Save(dir)
	}
	return Load(dir)
}

// Save writes the keys into dir, readable by the owner only.
func (k *Keys) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k.signing)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, SecretFile), []byte(hex.EncodeToString(k.secret)+"\n")); err != nil {
		return err
	}
	// The signing key last: LoadOrCreate takes its presence to mean "saved".
	return writeFile(filepath.Join(dir, SigningKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// JWKS is the public half as a JSON Web Key Set, what Distribution's `auth.token.jwks` reads.
func (k *Keys) JWKS() []byte {
	pub, err := k.signing.PublicKey.ECDH()
	if err != nil {
		panic(err) // a P-256 key checked by newKeys always converts
	}
	pt := pub.Bytes() // 0x04 || X || Y
	coord := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": k.kid,
		"x": coord(pt[1:33]), "y": coord(pt[33:]),
	}}})
	return b
}

// password is the one password of user.
func (k *Keys) password(user string) string {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte("sless registry password\x00" + user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check reports whether password is user's, in constant time.
func (k *Keys) check(user, password string) bool {
	return hmac.Equal([]byte(k.password(user)), []byte(password))
}
