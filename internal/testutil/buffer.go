package testutil

import (
	"bytes"
	"sync"
)

// LockedBuffer collects what is written to it (a process's output) and is
// safe for concurrent use. The zero value keeps everything; NewLockedBuffer
// bounds it.
type LockedBuffer struct {
	mu  sync.Mutex
	max int // 0: no bound
	buf bytes.Buffer
}

// NewLockedBuffer returns a LockedBuffer that keeps the last max bytes.
func NewLockedBuffer(max int) *LockedBuffer { return &LockedBuffer{max: max} }

// Write keeps p, dropping the oldest bytes past the bound.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; b.max > 0 && over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
