package lease

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func writeFile(t *testing.T, path, contents string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
}

// verifies reports whether k verifies a token signed with secret.
func verifies(t *testing.T, k *Keyring, secret []byte) bool {
	t.Helper()
	_, err := k.Verify(mustSign(t, mustKeyring(t, secret), chainLease(t)), t0)
	return err == nil
}

// signsWith reports whether k's tokens verify with secret alone.
func signsWith(t *testing.T, k *Keyring, secret []byte) bool {
	t.Helper()
	_, err := mustKeyring(t, secret).Verify(mustSign(t, k, chainLease(t)), t0)
	return err == nil
}

func TestFromSettings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	writeFile(t, file, "\n  "+string(keyB)+"\r\n\n"+string(keyA)+"\n")
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "\n \n")
	short := filepath.Join(dir, "short")
	writeFile(t, short, "short\n")

	for _, tc := range []struct {
		name      string
		key       string
		previous  []string
		file      string
		signs     []byte
		verifies  [][]byte
		generated bool
		err       string
	}{
		{name: "nothing set generates a key", generated: true},
		{name: "key", key: string(keyA), signs: keyA, verifies: [][]byte{keyA}},
		{name: "key with surrounding space", key: " " + string(keyA) + "\n", signs: keyA},
		{name: "key and previous keys", key: string(keyB), previous: []string{string(keyA), " ", string(keyC) + " "}, signs: keyB, verifies: [][]byte{keyA, keyB, keyC}},
		{name: "file", file: file, signs: keyB, verifies: [][]byte{keyA, keyB}},
		{name: "key and file", key: string(keyA), file: file, err: "LEASE_SIGNING_KEY and LEASE_SIGNING_KEY_FILE are both set"},
		{name: "previous and file", previous: []string{string(keyA)}, file: file, err: "list previous keys on the file's further lines"},
		{name: "previous alone", previous: []string{string(keyA)}, err: "LEASE_SIGNING_KEY_PREVIOUS is set but LEASE_SIGNING_KEY is not"},
		{name: "short key", key: "short", err: "LEASE_SIGNING_KEY is 5 bytes, want at least 32"},
		{name: "short previous key", key: string(keyA), previous: []string{"short"}, err: "LEASE_SIGNING_KEY_PREVIOUS key 1 is 5 bytes"},
		{name: "missing file", file: filepath.Join(dir, "missing"), err: "LEASE_SIGNING_KEY_FILE: open"},
		{name: "empty file", file: empty, err: "no key in the key file"},
		{name: "short key in the file", file: short, err: "the signing key is 5 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, generated, err := FromSettings(tc.key, tc.previous, tc.file)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "lease: ") {
					t.Fatalf("FromSettings = %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromSettings = %v", err)
			}
			if generated != tc.generated {
				t.Errorf("generated = %v, want %v", generated, tc.generated)
			}
			if tc.signs != nil && !signsWith(t, k, tc.signs) {
				t.Errorf("the keyring does not sign with %.1s…", tc.signs)
			}
			for _, v := range tc.verifies {
				if !verifies(t, k, v) {
					t.Errorf("the keyring does not verify %.1s…", v)
				}
			}
		})
	}
}

func TestRingReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	writeFile(t, file, string(keyA)+"\n")
	r, err := OpenRing(file)
	if err != nil {
		t.Fatal(err)
	}
	first := r.Load()
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("Reload of the same file = %v, %v; want false, nil", changed, err)
	}
	if r.Load() != first {
		t.Error("Reload of the same file replaced the keyring")
	}

	// Rotation step 1: B added as a previous key.
	writeFile(t, file, string(keyA)+"\n"+string(keyB)+"\n")
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload after a change = %v, %v; want true, nil", changed, err)
	}
	if !verifies(t, r.Load(), keyB) || !signsWith(t, r.Load(), keyA) {
		t.Error("after step 1 the ring does not sign with A and verify B")
	}

	// A broken file keeps the keys, and is reported once.
	writeFile(t, file, "short\n")
	if changed, err := r.Reload(); changed || err == nil || !strings.Contains(err.Error(), "keeping the keys loaded before") {
		t.Fatalf("Reload of a broken file = %v, %v; want false and an error", changed, err)
	}
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("Reload of the same broken file = %v, %v; want false, nil (reported once)", changed, err)
	}
	if !signsWith(t, r.Load(), keyA) {
		t.Error("a broken file replaced the keys")
	}

	// A file that disappears is an error each time.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.Reload(); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Reload of a missing file = %v, want ErrNotExist", err)
		}
	}

	// Step 2: B current.
	writeFile(t, file, string(keyB)+"\n"+string(keyA)+"\n")
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload after step 2 = %v, %v", changed, err)
	}
	if !signsWith(t, r.Load(), keyB) || !verifies(t, r.Load(), keyA) {
		t.Error("after step 2 the ring does not sign with B and verify A")
	}
	if _, err := OpenRing(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("OpenRing of a missing file succeeded")
	}
}

func TestRingRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	writeFile(t, file, string(keyA))
	r, err := OpenRing(file)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var reports []string
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.Run(ctx, 0, func(k *Keyring, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					reports = append(reports, "error")
				} else {
					reports = append(reports, k.KeyID())
				}
			})
		}()
		time.Sleep(DefaultPollInterval + time.Second)
		writeFile(t, file, string(keyB))
		time.Sleep(DefaultPollInterval)
		writeFile(t, file, "short")
		time.Sleep(3 * DefaultPollInterval)
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		want := []string{mustKeyring(t, keyB).KeyID(), "error"}
		if strings.Join(reports, ",") != strings.Join(want, ",") {
			t.Errorf("reports = %v, want %v (a change, then one error)", reports, want)
		}
	})
	if !signsWith(t, r.Load(), keyB) {
		t.Error("after Run the ring does not sign with B")
	}
}
