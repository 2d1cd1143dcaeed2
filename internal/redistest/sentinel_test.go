package redistest

import (
	"testing"
	"time"
)

// TestSentinel: the sentinels name the master; a forced failover makes
// the replica the master, which takes writes, and the old master its
// replica.
func TestSentinel(t *testing.T) {
	began := time.Now()
	st := StartSentinel(t, Options{Password: "secret"})
	t.Logf("master, replica and 3 sentinels ready in %v", time.Since(began))
	if len(st.Addrs()) != 3 {
		t.Fatalf("sentinels %v", st.Addrs())
	}
	if got := st.MasterAddr(); got != st.Master.Addr() {
		t.Fatalf("the sentinels name %s, not %s", got, st.Master.Addr())
	}
	old := st.Master
	began = time.Now()
	next := st.Failover()
	t.Logf("forced failover in %v", time.Since(began))
	if next == old || st.MasterAddr() != next.Addr() || st.Replica != old {
		t.Fatalf("after the failover: master %s, replica %s", st.Master.Addr(), st.Replica.Addr())
	}
	if got := next.MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET on the new master: %v", got)
	}
	if _, err := old.Do("SET", "k", "w"); err == nil {
		t.Fatal("the old master took a write")
	}
}
