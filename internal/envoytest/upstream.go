package envoytest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// Upstream is the application behind Envoy in the tests: an HTTP/1.1 server
// whose answer each request chooses with query parameters:
//
//	status=429          the status code (default 200)
//	header=Name:value   a response header (repeatable)
//	trailer=Name:value  a response trailer (repeatable; the body is chunked)
//	chunks=N            the body as N flushed chunks "chunk i\n" (default 1)
//	delay=10ms          a pause before each chunk
//
// It counts the requests it received by path.
type Upstream struct {
	// Port is its port on 127.0.0.1.
	Port int

	srv *http.Server
	mu  sync.Mutex
	hit map[string]int
}

// StartUpstream serves on port (0: a free one) until the test's cleanup.
func StartUpstream(t testing.TB, port int) *Upstream {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("envoytest: upstream: %v", err)
	}
	u := &Upstream{Port: ln.Addr().(*net.TCPAddr).Port, hit: map[string]int{}}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- u.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = u.srv.Shutdown(ctx)
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("envoytest: upstream: %v", err)
		}
	})
	return u
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.hit[r.URL.Path]++
	u.mu.Unlock()
	q := r.URL.Query()
	status := http.StatusOK
	if s := q.Get("status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			http.Error(w, "bad status", http.StatusBadRequest)
			return
		}
		status = n
	}
	for _, h := range q["header"] {
		k, v, _ := strings.Cut(h, ":")
		w.Header().Add(k, v)
	}
	var trailers [][2]string
	for _, h := range q["trailer"] {
		k, v, _ := strings.Cut(h, ":")
		w.Header().Add("Trailer", k)
		trailers = append(trailers, [2]string{k, v})
	}
	chunks := 1
	if s := q.Get("chunks"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			chunks = n
		}
	}
	delay, _ := time.ParseDuration(q.Get("delay"))
	w.WriteHeader(status)
	for i := range chunks {
		if delay > 0 {
			time.Sleep(delay)
		}
		fmt.Fprintf(w, "chunk %d\n", i)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	for _, kv := range trailers {
		w.Header().Set(kv[0], kv[1])
	}
}

// Requests returns how many requests for path the upstream received.
func (u *Upstream) Requests(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hit[path]
}

// StartDemoApp builds ./examples/upstream (the README's demo application,
// docker-compose.yml's upstream) once per test binary, runs it with args
// and waits until 127.0.0.1:port accepts connections; args must make it
// listen there (-addr 127.0.0.1:PORT). The cleanup stops it and logs its
// output when t failed. It skips t under -short, as Binary does.
func StartDemoApp(t testing.TB, port int, args ...string) {
	t.Helper()
	bin := testutil.Build(t, "./examples/upstream")
	testutil.StartProcess(t, "examples/upstream", exec.Command(bin, args...), testutil.Accepting(fmt.Sprintf("127.0.0.1:%d", port)))
}
