// Package israce reports whether the race detector is built in. Under it
// sync.Pool drops a quarter of what is put back, so allocation counts are
// not those of the real binary: the allocation ceilings run without it
// (make test runs them in a pass of their own).
package israce
