package dynamotest

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// TestSharedStartsAfresh: an instance shared by tests (Main's) starts
// afresh once it has dropped recycleAfter tables and no test uses it: the
// next user gets a new process, on the same endpoint, without the old
// tables. While a test uses it, it is not restarted, whatever it dropped.
func TestSharedStartsAfresh(t *testing.T) {
	l := Start(t)
	l.recycleAfter = 2
	endpoint, first := l.Endpoint(), l.Pid()
	var kept string // a table made by a test, not dropped
	var pids []int  // the process each user got
	for i := range 3 {
		t.Run("user", func(t *testing.T) {
			if err := l.use(t); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, l.Pid())
			ctx := Context(t, 30*time.Second)
			l.CreateTable(ctx, t, TableName(t))
			if i == 0 {
				kept = TableName(t)
				if err := admin.CreateTable(ctx, l.Client(t), kept); err != nil {
					t.Fatal(err)
				}
				// Dropped twice over while this test uses it: no restart.
				l.mu.Lock()
				l.dropped += 5
				l.mu.Unlock()
				if err := l.use(t); err != nil || l.Pid() != first {
					t.Fatalf("use while in use: %v, pid %d, want %d", err, l.Pid(), first)
				}
			}
		})
	}
	// One fresh start: for the second user, after the first dropped its
	// tables; none for the third, after one table dropped.
	if len(pids) != 3 || pids[0] != first || pids[1] == first || pids[2] != pids[1] || l.Endpoint() != endpoint {
		t.Fatalf("users got processes %v (first %d), endpoint %s (first %s); want the first, then one new process twice, on the same endpoint", pids, first, l.Endpoint(), endpoint)
	}
	out, err := l.Client(t).ListTables(Context(t, 10*time.Second), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range out.TableNames {
		if name == kept {
			t.Errorf("table %s of the first process is still there after a fresh start", kept)
		}
	}
}
