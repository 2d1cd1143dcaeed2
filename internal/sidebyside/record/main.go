// Command record runs the side-by-side scenarios against envoyproxy/ratelimit
// and writes its answers to internal/sidebyside/testdata/recorded.json, the
// answers the side-by-side test holds this service to.
//
// The old service needs its binary and a Redis. Build the binary from
// envoyproxy/ratelimit at the commit named by -legacy-version (go build -o
// ratelimit-legacy ./src/service_cmd in a checkout of it); the Redis is an
// in-process miniredis. From the repository root:
//
//	go run ./internal/sidebyside/record -legacy /path/to/ratelimit-legacy
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/alicebob/miniredis/v2"

	"github.com/dynalimit/dynalimit/internal/sidebyside"
)

func main() {
	legacy := flag.String("legacy", "", "envoyproxy/ratelimit binary")
	version := flag.String("legacy-version", "envoyproxy/ratelimit f2fb157 (2026-07-06), Redis: miniredis v2.40.0", "what -legacy is, for the record")
	flag.Parse()
	if *legacy == "" {
		fmt.Fprintln(os.Stderr, "record: -legacy is required")
		os.Exit(2)
	}
	if err := record(*legacy, *version); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(1)
	}
}

func record(bin, version string) error {
	ctx := context.Background()
	rec := sidebyside.Recording{Legacy: version, Answers: map[string][]sidebyside.Answer{}, Series: map[string][]string{}}
	for _, sc := range sidebyside.Scenarios {
		// A Redis of its own per scenario: every scenario starts from empty
		// counters, as the test's binary starts from empty buckets.
		r, err := miniredis.Run()
		if err != nil {
			return err
		}
		answers, series, out, err := sidebyside.RunScenario(ctx, bin, nil, sc, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+r.Addr())
		r.Close()
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", sc.Name, err, out)
		}
		rec.Answers[sc.Name] = answers
		if sc.Scrape {
			rec.Series[sc.Name] = series
		}
	}
	r, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer r.Close()
	dir, err := os.MkdirTemp("", "sidebyside")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if rec.UDS, _, err = sidebyside.ProbeUDS(ctx, bin, nil, dir, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+r.Addr()); err != nil {
		return err
	}
	root, err := sidebyside.Runtime()
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(filepath.Dir(root), "recorded.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}
