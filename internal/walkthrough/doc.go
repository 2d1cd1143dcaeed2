// Package walkthrough runs the walkthroughs of the repository's README.md as
// tests, exactly as written: a README edit that breaks a walkthrough fails
// `go test ./internal/walkthrough` (and `make test`). The package has no
// code outside its tests.
//
// # Markers
//
// A walkthrough is the README's blocks marked with its NAME, run in README
// order. An HTML comment on the line before a fenced block marks it:
//
//	<!-- walkthrough NAME: background READY... -->   before a ```sh block
//	<!-- walkthrough NAME -->                        before a ```console or ```sh block
//	<!-- walkthrough NAME: stop -->                  before a ```sh block
//
// NAME is anything up to the colon or the end of the comment (spaces
// trimmed). Blocks without a marker are not run.
//
// A background block is a second terminal: its lines run as one bash script,
// in the repository root, in a process group of its own, with the test's
// environment (not the exports of the walkthrough's foreground commands: a
// new terminal does not have them). The harness waits until every READY
// target (space-separated) answers: http://… a 200 to a GET, tcp://host:port
// a connection. Each has 3 minutes (a first build or download is in that
// time); the script ending first fails the walkthrough with its output. The
// group is killed when the walkthrough ends.
//
// A stop block ends the last background block as its reader would: Ctrl-C
// there (SIGINT to the command the shell runs in the foreground, not to
// those it started with &), then the block's lines typed into that same
// shell (`kill %1`), after which the shell's input ends. Every process of
// the group must have ended within 30 seconds, and the shell must exit 0.
//
// A foreground block is the first terminal. In a ```console block each line
// starting with "$ " is a command (a line ending in a backslash continues on
// the next), and the lines after it, up to the next "$ " or the end of the
// block, are its expected output: what it prints on stdout, compared
// exactly, trailing blanks and blank last lines trimmed; it must exit 0. A
// "…" in the expected output stands for any text within its line (a
// generated id, which the README shows as "…"). A command whose expected
// output is empty must print nothing on stdout.
// Stderr (progress, downloads, logs) is not compared, and is shown when a
// command disagrees. In
// a ```sh block each line (with its continuations) is a command that must
// exit 0; its output is not compared. Every foreground command runs with
// `bash -c` in the repository root, and the exported variables (`export`,
// or any assignment: the commands run under `set -a`) carry over to the next
// command of the same walkthrough, as in one shell; the working directory
// does not. A command has 10 minutes.
//
// # Ports
//
// The README uses fixed ports, so the walkthroughs do: before each
// walkthrough the harness checks that every port the README's walkthroughs
// use is free (8000 DynamoDB Local; 6379 Redis; 8080, 8081, 6070 the service; 9080,
// 9081, 7070 a second replica; 6071 the aggregator; 8090 the demo application; 10000 and 9901
// Envoy) and fails naming the port and the process that holds it. Nothing
// is skipped but under -short (make test-short): a missing tool (curl,
// npm, java, python3, redis-server) fails the test.
package walkthrough
