package redistest

import (
	"strconv"
	"testing"
	"time"
)

// TestCluster: three masters with a replica each form a cluster whose
// masters serve every slot; a manual failover and a master killed each
// promote a replica, and the killed master comes back as a replica.
func TestCluster(t *testing.T) {
	began := time.Now()
	c := StartCluster(t, 3, 1, Options{})
	t.Logf("3 masters, 3 replicas ok in %v", time.Since(began))
	if n := len(c.Masters()); n != 3 {
		t.Fatalf("%d masters", n)
	}
	if len(c.Seeds()) != 6 {
		t.Fatalf("seeds %v", c.Seeds())
	}
	m := c.MasterOf("{tenant}k")
	if got := m.MustDo("SET", "{tenant}k", "v"); got != "OK" {
		t.Fatalf("SET on its master: %v", got)
	}
	for _, s := range c.Masters() {
		if s == m {
			continue
		}
		if _, err := s.Do("GET", "{tenant}k"); err == nil || err.Error()[:5] != "MOVED" {
			t.Fatalf("GET on another master: %v", err)
		}
	}

	began = time.Now()
	promoted := c.Failover(m)
	t.Logf("manual failover in %v", time.Since(began))
	if c.MasterOf("{tenant}k") != promoted {
		t.Fatal("the key's slot did not move to the promoted replica")
	}
	if got := promoted.MustDo("GET", "{tenant}k"); got != "v" {
		t.Fatalf("GET after a manual failover: %v", got)
	}

	began = time.Now()
	next := c.KillMaster(promoted)
	t.Logf("automatic failover after a kill in %v", time.Since(began))
	if c.MasterOf("{tenant}k") != next || next != m {
		t.Fatal("the key's slot did not go back to the first master")
	}
	promoted.Start()
	c.WaitOK()
	if r := c.ReplicasOf(next); len(r) != 1 || r[0] != promoted {
		t.Fatalf("the killed master did not come back as the replica of %s", next.Addr())
	}
}

// TestClusterFreeze: a master frozen past the node timeout is failed
// over; thawed, it learns it is a replica now.
func TestClusterFreeze(t *testing.T) {
	c := StartCluster(t, 3, 1, Options{})
	m := c.Masters()[0]
	replicas := c.ReplicasOf(m)
	m.Freeze()
	promoted := c.WaitPromoted(replicas)
	m.Thaw()
	c.WaitOK()
	if r := c.ReplicasOf(promoted); len(r) != 1 || r[0] != m {
		t.Fatalf("the thawed master is not %s's replica", promoted.Addr())
	}
}

// TestClusterTLSAuth: a cluster whose nodes talk TLS to each other and
// to clients, with a password.
func TestClusterTLSAuth(t *testing.T) {
	began := time.Now()
	c := StartCluster(t, 3, 0, Options{TLS: true, Password: "secret"})
	t.Logf("3 masters over TLS ok in %v", time.Since(began))
	for i, s := range c.Masters() {
		key := "{" + strconv.Itoa(i) + "}"
		if got := c.MasterOf(key).MustDo("SET", key, "v"); got != "OK" {
			t.Fatalf("SET on %s: %v", s.Addr(), got)
		}
	}
}
