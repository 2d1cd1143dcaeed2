package dynamotest

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
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
	for i := range 3 {
		t.Run("user", func(t *testing.T) {
			if err := l.use(t); err != nil {
				t.Fatal(err)
			}
			ctx := Context(t, 30*time.Second)
			l.CreateTable(ctx, t, TableName(t))
			if i == 0 {
				kept = TableName(t)
				if err := dynamo.CreateTable(ctx, l.Client(t), kept); err != nil {
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
	if l.recycles != 1 || l.Pid() == first || l.Endpoint() != endpoint {
		t.Fatalf("after 3 users: %d fresh starts, pid %d (first %d), endpoint %s (first %s); want 1, a new pid, the same endpoint", l.recycles, l.Pid(), first, l.Endpoint(), endpoint)
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
