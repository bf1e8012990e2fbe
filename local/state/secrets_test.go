package state_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
)

// Values are sealed in the state file: the file holds no value in clear, opens with the key file
// only, a sealed value copied into another secret's record does not open, and the key file is
// made 0600 and refused when others may read it or it has the wrong size.
func TestSecretsSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	var changes []string
	db, err := state.Open(filepath.Join(dir, "state.db"), func(k state.Kind, ns, name string) { changes = append(changes, string(k)+" "+ns+"/"+name) })
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "secrets.key")
	key, err := state.LoadSecretKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 || info.Size() != state.SecretKeySize {
		t.Fatalf("key file: %v %v", info, err)
	}
	s, err := db.OpenSecrets(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "ns1", "db", map[string]string{"url": "x"}); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("a secret in a namespace that does not exist: %v", err)
	}
	db.Namespaces.Ensure(ctx, "ns1")
	const canary = "CANARY-at-rest-91c2"
	m, created, err := s.Put(ctx, "ns1", "db", map[string]string{"url": canary, "user": canary + "-user"})
	if err != nil || !created || m.Version != 1 {
		t.Fatalf("put: %+v %v %v", m, created, err)
	}
	if _, _, err := s.Put(ctx, "ns1", "other", map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(changes, ";") != "secret ns1/db;secret ns1/other" {
		t.Errorf("notifications: %q", changes)
	}
	data, m, ok, err := s.Values("ns1", "db")
	if err != nil || !ok || data["url"] != canary || m.Version != 1 {
		t.Fatalf("values: %v %+v %v %v", data, m, ok, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(canary)) || bytes.Contains(raw, []byte("CANARY")) {
		t.Fatal("the state file holds a secret's value in clear")
	}

	// Another key does not open it; the error names the secret, not a value.
	db, err = state.Open(filepath.Join(dir, "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wrong, _ := state.LoadSecretKey(filepath.Join(t.TempDir(), "other.key"))
	ws, _ := db.OpenSecrets(wrong)
	if _, _, _, err := ws.Values("ns1", "db"); err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "ns1/db") {
		t.Fatalf("opened with another key: %v", err)
	}
	// Deleting the namespace deletes its secrets.
	s, _ = db.OpenSecrets(key)
	if err := db.Namespaces.Delete(ctx, "ns1"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := s.Values("ns1", "db"); ok || err != nil {
		t.Fatalf("a deleted namespace's secret: %v %v", ok, err)
	}

	// Key files others may read, or of the wrong size, are refused.
	loose := filepath.Join(t.TempDir(), "loose.key")
	os.WriteFile(loose, bytes.Repeat([]byte{1}, state.SecretKeySize), 0o644)
	if _, err := state.LoadSecretKey(loose); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Errorf("a key file others may read: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short.key")
	os.WriteFile(short, []byte("short"), 0o600)
	if _, err := state.LoadSecretKey(short); err == nil {
		t.Error("a key file of the wrong size was taken")
	}
	link := filepath.Join(t.TempDir(), "link.key")
	os.Symlink(keyFile, link)
	if _, err := state.LoadSecretKey(link); err == nil {
		t.Error("a key file that is a symlink was taken")
	}
}

// A sealed value moved to another secret's record (as someone with write access to the state
// file could) does not open: the namespace, name and version are bound into the seal.
func TestSecretsBoundToRecord(t *testing.T) {
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key, _ := state.LoadSecretKey(filepath.Join(dir, "secrets.key"))
	s, _ := db.OpenSecrets(key)
	ctx := context.Background()
	db.Namespaces.Ensure(ctx, "a")
	db.Namespaces.Ensure(ctx, "b")
	s.Put(ctx, "a", "db", map[string]string{"url": "tenant-a"})
	s.Put(ctx, "b", "db", map[string]string{"url": "tenant-b"})
	if err := state.SwapSealedForTest(db, "a/db", "b/db"); err != nil {
		t.Fatal(err)
	}
	if data, _, _, err := s.Values("b", "db"); err == nil {
		t.Fatalf("tenant a's sealed value opened as tenant b's: %v", data)
	}
}
