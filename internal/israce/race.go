//go:build race

package israce

// Enabled is true: the race detector is built in.
const Enabled = true
