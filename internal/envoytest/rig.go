package envoytest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Options describe one example to run.
type Options struct {
	// Bootstrap is the Envoy bootstrap, relative to the repository root
	// (e.g. examples/envoy/envoy.yaml).
	Bootstrap string
	// ConfigDir is the descriptor directory, relative to the repository
	// root. It is copied to a temporary directory the service reads, so
	// that a test may rewrite it (Rig.ConfigDir).
	ConfigDir string
	// Env is added to the service's environment.
	Env []string
	// ServiceAddr, when set, is where the bootstrap's service port points
	// instead of a ratelimit binary the rig starts (another rate-limit
	// service, or nothing at all).
	ServiceAddr string
	// Strings, Clusters and Edits are passed to Render.
	Strings  map[string]string
	Clusters map[string]string
	Edits    []Edit
}

// Rig is one example running: the application, the ratelimit binary and
// Envoy between a test's HTTP client and them.
type Rig struct {
	Envoy   *Envoy
	Service *Service // nil with Options.ServiceAddr
	App     *Upstream
	// ConfigDir is the descriptor directory the service reads.
	ConfigDir string
	// ListenerPort is Envoy's HTTP listener on 127.0.0.1.
	ListenerPort int
}

// Start runs the example: the upstream, the service and Envoy, each on free
// loopback ports, and waits until Envoy is ready.
func Start(t testing.TB, o Options) *Rig {
	t.Helper()
	root := testutil.RepoRoot(t)
	r := &Rig{App: StartUpstream(t, 0), ListenerPort: testutil.FreePort(t)}
	servicePort := 0
	if o.ServiceAddr != "" {
		_, p, err := net.SplitHostPort(o.ServiceAddr)
		if err != nil {
			t.Fatalf("envoytest: ServiceAddr: %v", err)
		}
		if servicePort, err = strconv.Atoi(p); err != nil {
			t.Fatalf("envoytest: ServiceAddr: %v", err)
		}
	} else {
		r.ConfigDir = t.TempDir()
		if err := os.CopyFS(r.ConfigDir, os.DirFS(filepath.Join(root, o.ConfigDir))); err != nil {
			t.Fatalf("envoytest: copy %s: %v", o.ConfigDir, err)
		}
		r.Service = StartService(t, r.ConfigDir, o.Env...)
		servicePort = r.Service.GRPCPort
	}
	admin := testutil.FreePort(t)
	cfg, err := Render(filepath.Join(root, o.Bootstrap), Substitutions{
		Ports: map[int]int{
			ExampleListenerPort: r.ListenerPort,
			ExampleAdminPort:    admin,
			ExampleServicePort:  servicePort,
			ExampleAppPort:      r.App.Port,
		},
		Strings:  o.Strings,
		Clusters: o.Clusters,
		Edits:    o.Edits,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Envoy = StartEnvoy(t, cfg, admin)
	return r
}

// URL returns the URL of path on Envoy's listener.
func (r *Rig) URL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", r.ListenerPort, path)
}

// Client returns an HTTP client whose connections come from sourceIP (any
// 127.0.0.0/8 address), so that Envoy's remote_address tells clients apart.
// Its idle connections are closed at the test's cleanup.
func Client(t testing.TB, sourceIP string) *http.Client {
	t.Helper()
	ip := net.ParseIP(sourceIP)
	if ip == nil {
		t.Fatalf("envoytest: bad source address %q", sourceIP)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// Response is an answer read to the end.
type Response struct {
	Status  int
	Header  http.Header
	Trailer http.Header
	Body    string
}

// Do sends method path through Envoy with the headers given as name, value
// pairs and reads the whole answer. A transport error fails t.
func (r *Rig) Do(t testing.TB, c *http.Client, method, path string, header ...string) Response {
	t.Helper()
	resp, err := r.DoErr(c, method, path, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// DoErr is Do returning the transport error.
func (r *Rig) DoErr(c *http.Client, method, path string, header ...string) (Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.URL(path), nil)
	if err != nil {
		return Response{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Trailer: resp.Trailer, Body: string(b)}, nil
}

// DynamoDBTable returns the binary's settings for a fresh table on local,
// created with `ratelimit table create` as a user would, and dropped when
// t ends.
func DynamoDBTable(t testing.TB, local *dynamotest.Local) []string {
	t.Helper()
	table := dynamotest.TableName(t)
	env := []string{
		"BACKEND_TYPE=dynamodb",
		"DYNAMODB_ENDPOINT=" + local.Endpoint(),
		"DYNAMODB_TABLE=" + table,
		"AWS_REGION=us-east-1",
	}
	local.DropAtCleanup(t, table)
	RunBinary(t, env, "table", "create")
	return env
}

// RunBinary runs the ratelimit binary with args and env added (for admin
// commands such as `table create`) and fails t when it exits non-zero.
func RunBinary(t testing.TB, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ratelimit %v: %v\n%s", args, err, out)
	}
	return string(out)
}
