// Package lint holds checks of the module's own source that go vet does
// not make, as tests: today, that no non-test function outside a table runs
// past a hundred lines (funclen_test.go). It has no code of its own.
package lint
