package lease

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often Ring.Run rereads the key file.
const DefaultPollInterval = 10 * time.Second

// FromSettings returns the keyring the settings describe:
// LEASE_SIGNING_KEY (key) with LEASE_SIGNING_KEY_PREVIOUS (previous), or
// LEASE_SIGNING_KEY_FILE (file), or, when neither is set, a generated key
// (generated is then true: leases will not verify on another replica or
// after a restart). Keys are the raw bytes of the strings, surrounding
// whitespace removed; empty entries of previous are skipped. Setting both
// key and file, or previous without key, is an error.
func FromSettings(key string, previous []string, file string) (k *Keyring, generated bool, err error) {
	if err := CheckSettings(key, previous, file); err != nil {
		return nil, false, err
	}
	current, prev := trimKeys(key, previous)
	switch {
	case file != "":
		k, _, err = readKeyFile(file)
		return k, false, err
	case current != nil:
		k, err = NewKeyring(current, prev...)
		return k, false, err
	}
	k, err = Generated()
	return k, err == nil, err
}

// CheckSettings reports what FromSettings would refuse without reading a
// file: key and file both set, previous keys without key or with file, a
// key shorter than MinKeyBytes. Its errors name the variables, never the
// keys.
func CheckSettings(key string, previous []string, file string) error {
	k, prev := trimKeys(key, previous)
	switch {
	case k != nil && file != "":
		return errors.New("lease: LEASE_SIGNING_KEY and LEASE_SIGNING_KEY_FILE are both set: set one")
	case file != "" && len(prev) > 0:
		return errors.New("lease: LEASE_SIGNING_KEY_PREVIOUS goes with LEASE_SIGNING_KEY; with LEASE_SIGNING_KEY_FILE, list previous keys on the file's further lines")
	case k == nil && len(prev) > 0:
		return errors.New("lease: LEASE_SIGNING_KEY_PREVIOUS is set but LEASE_SIGNING_KEY is not")
	case k != nil && len(k) < MinKeyBytes:
		return fmt.Errorf("lease: LEASE_SIGNING_KEY is %d bytes, want at least %d (e.g. openssl rand -base64 48)", len(k), MinKeyBytes)
	}
	for i, p := range prev {
		if len(p) < MinKeyBytes {
			return fmt.Errorf("lease: LEASE_SIGNING_KEY_PREVIOUS key %d is %d bytes, want at least %d", i+1, len(p), MinKeyBytes)
		}
	}
	return nil
}

// trimKeys returns the keys of the settings: without surrounding
// whitespace, key nil when empty, empty previous keys dropped.
func trimKeys(key string, previous []string) ([]byte, [][]byte) {
	var k []byte
	if key = strings.TrimSpace(key); key != "" {
		k = []byte(key)
	}
	var prev [][]byte
	for _, p := range previous {
		if p = strings.TrimSpace(p); p != "" {
			prev = append(prev, []byte(p))
		}
	}
	return k, prev
}

// ParseKeyFile returns the keyring of a key file's contents: the first
// non-empty line is the signing key, each further non-empty line a key that
// still verifies. Lines are taken without surrounding whitespace (a
// trailing newline or CR is fine).
func ParseKeyFile(data []byte) (*Keyring, error) {
	var keys [][]byte
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("lease: no key in the key file (want the signing key on its first non-empty line)")
	}
	return NewKeyring(keys[0], keys[1:]...)
}

// readKeyFile reads and parses a key file, returning the SHA-256 of its
// contents too.
func readKeyFile(file string) (*Keyring, [sha256.Size]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("lease: LEASE_SIGNING_KEY_FILE: %w", err)
	}
	sum := sha256.Sum256(data)
	k, err := ParseKeyFile(data)
	if err != nil {
		return nil, sum, fmt.Errorf("%w (LEASE_SIGNING_KEY_FILE %s)", err, file)
	}
	return k, sum, nil
}

// Ring holds the keyring of a key file and rereads the file when asked
// (Reload) or every interval (Run), so that a key rotated in a mounted
// Secret takes effect without a restart. A file that no longer parses
// keeps the keyring it had. Load and Reload are safe for concurrent use.
type Ring struct {
	file string
	cur  atomic.Pointer[Keyring]

	mu  sync.Mutex        // guards sum
	sum [sha256.Size]byte // of the contents last read, valid or not
}

// OpenRing reads file (see ParseKeyFile) and returns its Ring.
func OpenRing(file string) (*Ring, error) {
	k, sum, err := readKeyFile(file)
	if err != nil {
		return nil, err
	}
	r := &Ring{file: file, sum: sum}
	r.cur.Store(k)
	return r, nil
}

// Load returns the current keyring, never nil: a request loads it once
// and signs or verifies with that value throughout.
func (r *Ring) Load() *Keyring { return r.cur.Load() }

// Reload rereads the file. It reports changed when the contents differ from
// the last read and parse (the keyring is then replaced), and the error of
// contents that differ from the last read and do not parse (the keyring is
// kept). Contents read before, valid or not, change nothing and report
// nothing; a file that cannot be read is an error each time.
func (r *Ring) Reload() (changed bool, err error) {
	data, err := os.ReadFile(r.file)
	if err != nil {
		return false, fmt.Errorf("lease: LEASE_SIGNING_KEY_FILE: %w", err)
	}
	sum := sha256.Sum256(data)
	r.mu.Lock()
	defer r.mu.Unlock()
	if sum == r.sum {
		return false, nil
	}
	r.sum = sum
	k, err := ParseKeyFile(data)
	if err != nil {
		return false, fmt.Errorf("%w (LEASE_SIGNING_KEY_FILE %s; keeping the keys loaded before)", err, r.file)
	}
	r.cur.Store(k)
	return true, nil
}

// Run calls Reload every interval (DefaultPollInterval when zero) until
// ctx ends, and report with the new keyring after a change or with the
// error of a failed reload. It returns when ctx ends.
func (r *Ring) Run(ctx context.Context, interval time.Duration, report func(k *Keyring, err error)) {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := r.Reload()
		switch {
		case err != nil:
			report(nil, err)
		case changed:
			report(r.Load(), nil)
		}
	}
}
