// Package architecture holds, as tests, the shape of the module's code: how
// many methods a type may carry, how many lines of code a package may hold,
// and which packages may import which. It has no code of its own.
package architecture
