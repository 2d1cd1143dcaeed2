package admintest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func testUsage(t *testing.T, r *runner) {
	at := time.Date(2026, 11, 26, 14, 30, 0, 0, time.UTC)
	for _, u := range []struct {
		hours           int
		resource, limit string
		mt              int64
	}{
		{0, "gpt-4", "rpm", 3000}, {0, "gpt-4", "tpm", 1500500}, {1, "gpt-4", "rpm", 1000}, {12, "embed", "rpm", 2000},
	} {
		if err := r.st.AddUsage(r.ctx, r.ns, "team/1", u.resource, u.limit, at.Add(time.Duration(u.hours)*time.Hour), u.mt); err != nil {
			t.Fatalf("AddUsage(%+v) = %v", u, err)
		}
	}
	r.ok([]string{"usage", "list", "-entity", "team/1", "-window", "hourly", "-since", "2026-11-26"},
		"WINDOW                RESOURCE  LIMIT  TOKENS\n",
		"2026-11-26T14:00:00Z  gpt-4     rpm         3\n",
		"2026-11-26T14:00:00Z  gpt-4     tpm    1500.5\n",
		"2026-11-26T15:00:00Z  gpt-4     rpm         1\n",
		"2026-11-27T02:00:00Z  embed     rpm         2\n")
	r.ok([]string{"usage", "summary", "-entity", "team/1", "-since", "2026-11-01"},
		"RESOURCE  LIMIT  TOKENS  WINDOWS\n", "embed     rpm         2        1\n", "gpt-4     rpm         4        1\n", "gpt-4     tpm    1500.5        1\n")
	r.ok([]string{"usage", "summary", "-entity", "team/1", "-resource", "gpt-4", "-window", "hourly", "-since", "2026-11-26T00:00:00Z", "-o", "chart"},
		"gpt-4 rpm "+strings.Repeat("█", 40)+" 4", "gpt-4 tpm "+strings.Repeat("█", 40)+" 1500.5")
	r.ok([]string{"usage", "list", "-entity", "team/1", "-window", "monthly", "-since", "2026-11-26", "-o", "chart"},
		"2026-11-01T00:00:00Z embed rpm "+strings.Repeat("█", 20)+" 2", "2026-11-01T00:00:00Z gpt-4 rpm "+strings.Repeat("█", 40)+" 4")
	r.ok([]string{"usage", "list", "-entity", "nobody", "-since", "2026-11-26"}, `entity "nobody": no daily usage since then`)
	// Since a later window: the earlier ones are left out.
	out := r.ok([]string{"usage", "list", "-entity", "team/1", "-window", "hourly", "-since", "2026-11-26T15:10:00Z"}, "2026-11-26T15:00:00Z  gpt-4     rpm")
	if strings.Contains(out, "14:00:00Z") {
		t.Errorf("usage list -since 15:10 = %q, want the window of 14:00 left out", out)
	}
	out = r.ok([]string{"usage", "list", "-entity", "team/1", "-resource", "gpt-4", "-window", "daily", "-since", "2026-11-26", "-o", "json"})
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 || rows[1]["tokens"] != "1500.5" || rows[1]["millitokens"] != 1500500.0 || rows[0]["window"] != "2026-11-26T00:00:00Z" || rows[0]["tokens"] != "4" {
		t.Errorf("usage list -o json = %q, %v, want two daily rows, rpm 4 and tpm 1500.5", out, err)
	}
}
