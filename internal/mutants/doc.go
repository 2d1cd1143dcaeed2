// Command mutants reads the JSON report of a gremlins run (gremlins unleash
// -o FILE) over one package, sets aside the living mutants that the
// package's tests note as equivalent, and prints the package's figures:
// killed, lived, equivalent, not covered and timed-out mutants, test
// efficacy as gremlins counts it (killed over killed plus lived) and with
// the equivalent mutants set aside, and mutant coverage. It fails when a
// living mutant has no note, when a note matches no living mutant of a
// file the run mutated (the code moved on, or the mutant was not equivalent
// after all), or when the efficacy without the equivalent mutants is below
// -min.
//
// Run it from the repository root after gremlins (make mutation does both):
//
//	go run ./internal/mutants -dir pkg/cascade -min 95 .cache/mutation/cascade.json
//
// A note is a comment line in one of the package's _test.go files:
//
//	// mutant: CONDITIONALS_BOUNDARY decide.go `a > math.MaxInt64-b` at a = MaxInt64−b both return MaxInt64
//
// It names the mutator, the file (relative to -dir) and, between
// backquotes, a piece of the mutated line that spans the mutated operator;
// the rest of the line says why no test can tell the mutant from the code.
// A note matches every mutant of its type whose operator it spans, so one
// note can stand for the same mutation repeated on a line. Matching by text
// rather than line number keeps a note right while the code around it
// moves.
package main
