package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestServeBadConfigLogsEachProblem: serve on descriptor files that do not
// load logs each problem as a JSON line of its own (no "\n" inside one),
// with its file, line and key as fields, then the check-config command
// that checks the directory; it exits 1.
func TestServeBadConfigLogsEachProblem(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: minute\n  - key: j\n    rate_limit:\n      unit: minit\n      requests_per_unit: 1\n")
	env := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
	code, _, errOut := runMain(t, env, "serve", "-config_dir", dir)
	if code != 1 {
		t.Errorf("serve on a bad directory = exit %d, want 1; stderr:\n%s", code, errOut)
	}
	var entries []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("stderr line %q is not one JSON entry: %v", line, err)
		}
		if strings.Contains(line, `\n`) {
			t.Errorf("stderr line %q holds an escaped newline, want one problem a line", line)
		}
		entries = append(entries, e)
	}
	want := []struct{ key, msg string }{
		{"rate_limt", dir + "/a.yaml:4: rate_limt: config error, unknown key 'rate_limt'; did you mean 'rate_limit'?"},
		{"unit", dir + "/a.yaml:8: unit: invalid rate limit unit 'minit': want one of second, minute, hour, day, week, month, year (any case)"},
	}
	if len(entries) != len(want)+1 {
		t.Fatalf("serve logged %d entries, want %d problems and the hint:\n%s", len(entries), len(want), errOut)
	}
	for i, w := range want {
		e := entries[i]
		if e["msg"] != w.msg || e["key"] != w.key || e["file"] != dir+"/a.yaml" || e["level"] != "error" {
			t.Errorf("entry %d = %v, want msg %q, key %q, file %q", i, e, w.msg, w.key, dir+"/a.yaml")
		}
	}
	last := entries[len(want)]
	if hint := "check them with: ratelimit check-config -config_dir " + dir; !strings.Contains(last["msg"].(string), hint) {
		t.Errorf("last entry = %v, want it to say %q", last, hint)
	}
}
