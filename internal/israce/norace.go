//go:build !race

package israce

// Enabled is false: the race detector is not built in.
const Enabled = false
