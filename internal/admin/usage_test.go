package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/usage"
)

// TestUsageAgainstLocal writes usage through ApplyUsage on DynamoDB Local
// (a real TransactWriteItems: its cancellation for a marker that exists
// included), then reads it with usage list and summary in each format.
func TestUsageAgainstLocal(t *testing.T) {
	l := dynamotest.Shared(t)
	table := dynamotest.TableName(t)
	l.CreateTable(context.Background(), t, table)
	env := map[string]string{"DYNAMODB_TABLE": table, "DYNAMODB_ENDPOINT": l.Endpoint(), "NAMESPACE": "acme"}
	st, err := dynamo.NewStore(context.Background(), l.Client(t), dynamo.Config{Table: table, Namespace: "acme"})
	if err != nil {
		t.Fatalf("NewStore() = %v", err)
	}
	defer st.Close()
	at := time.Date(2026, 11, 26, 14, 30, 0, 0, time.UTC)
	rec := func(id string, h int, resource, limit string, mt int64) usage.Entry {
		return usage.Entry{ID: id, At: at.Add(time.Duration(h) * time.Hour), Usage: []usage.Usage{{Namespace: "acme", Entity: "team/1", Resource: resource, Limit: limit, Millitokens: mt}}}
	}
	recs := []usage.Entry{rec("a", 0, "gpt-4", "rpm", 3000), rec("b", 0, "gpt-4", "tpm", 1500500), rec("c", 1, "gpt-4", "rpm", 1000), rec("d", 12, "embed", "rpm", 2000)}
	if rep, err := usage.Of(st).ApplyUsage(context.Background(), recs[:2]); err != nil || rep.Applied != 2 {
		t.Fatalf("ApplyUsage(a, b) = %+v, %v", rep, err)
	}
	rep, err := usage.Of(st).ApplyUsage(context.Background(), recs)
	if err != nil || rep.Applied != 2 || rep.Duplicates != 2 || rep.WriteUnits == 0 {
		t.Fatalf("ApplyUsage(a, b again, c, d) = %+v, %v, want 2 applied, 2 duplicates, write units reported", rep, err)
	}
	steps := []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"usage", "list", "-entity", "team/1", "-window", "hourly", "-since", "2026-11-26"},
			[]string{"WINDOW                RESOURCE  LIMIT  TOKENS\n", "2026-11-26T14:00:00Z  gpt-4     rpm         3\n", "2026-11-26T14:00:00Z  gpt-4     tpm    1500.5\n", "2026-11-26T15:00:00Z  gpt-4     rpm         1\n", "2026-11-27T02:00:00Z  embed     rpm         2\n"}},
		{[]string{"usage", "summary", "-entity", "team/1", "-since", "2026-11-01"},
			[]string{"RESOURCE  LIMIT  TOKENS  WINDOWS\n", "embed     rpm         2        1\n", "gpt-4     rpm         4        1\n", "gpt-4     tpm    1500.5        1\n"}},
		{[]string{"usage", "summary", "-entity", "team/1", "-resource", "gpt-4", "-window", "hourly", "-since", "2026-11-26T00:00:00Z", "-o", "chart"},
			[]string{"gpt-4 rpm " + strings.Repeat("█", 40) + " 4", "gpt-4 tpm " + strings.Repeat("█", 40) + " 1500.5"}},
		{[]string{"usage", "list", "-entity", "team/1", "-window", "monthly", "-since", "2026-11-26", "-o", "chart"},
			[]string{"2026-11-01T00:00:00Z embed rpm " + strings.Repeat("█", 20) + " 2", "2026-11-01T00:00:00Z gpt-4 rpm " + strings.Repeat("█", 40) + " 4"}},
		{[]string{"usage", "list", "-entity", "nobody", "-since", "2026-11-26"}, []string{`entity "nobody": no daily usage since then`}},
	}
	for _, s := range steps {
		out, err := run(t, env, s.args...)
		if err != nil {
			t.Fatalf("Run(%q) = %v", s.args, err)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("Run(%q) = %q, want it to contain %q", s.args, out, w)
			}
		}
	}
	out, err := run(t, env, "usage", "list", "-entity", "team/1", "-resource", "gpt-4", "-window", "daily", "-since", "2026-11-26", "-o", "json")
	var rows []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[1]["tokens"] != "1500.5" || rows[1]["millitokens"] != 1500500.0 || rows[0]["window"] != "2026-11-26T00:00:00Z" {
		t.Errorf("usage list -o json = %q, %v, want two daily rows, rpm 4 and tpm 1500.5", out, err)
	}
}

func TestUsageUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"usage", "list"}, "missing -entity E"},
		{[]string{"usage", "summary", "-entity", "e", "-window", "weekly"}, `-window "weekly": want hourly, daily or monthly`},
		{[]string{"usage", "list", "-entity", "e", "-o", "yaml"}, `-o "yaml": want table, json or chart`},
		{[]string{"usage", "list", "-entity", "e", "-since", "yesterday"}, `-since "yesterday": want a time`},
		{[]string{"usage", "top"}, `missing -resource R`},
		{[]string{"usage", "tops"}, `unknown command "usage tops"`},
	}
	for _, tt := range tests {
		_, err := run(t, nil, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%q) = %v, want a usage error containing %q", tt.args, err, tt.want)
		}
	}
}
