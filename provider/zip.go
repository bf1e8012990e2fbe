package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/sless-dev/sless/api/client"
)

// zipDir zips a source_dir (client.ZipDir: `sless fn deploy` zips the same way).
func zipDir(dir string) ([]byte, string, error) {
	b, sum, err := client.ZipDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("source_dir: %w", err)
	}
	return b, sum, nil
}

// fileSHA256 reads a code_path archive.
func fileSHA256(path string) ([]byte, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("reading code_path: %w", err)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

func jsonValid(s string) bool { return json.Valid([]byte(s)) }
