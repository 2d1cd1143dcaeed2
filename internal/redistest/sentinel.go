package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MasterName is the name the sentinels of StartSentinel know their master
// by.
const MasterName = "dynalimit"

// Sentinel is a master and its replica watched by three sentinels, with
// a quorum of two and a down-after of one second.
type Sentinel struct {
	t testing.TB
	// Master and Replica are the data nodes as the sentinels last agreed
	// (Failover swaps them).
	Master, Replica *Server
	// Sentinels are the three sentinels (plain, without a password).
	Sentinels []*Server
}

// StartSentinel starts a master, its replica and three sentinels, and
// waits until every sentinel knows the replica (its link up) and the two
// other sentinels, or fails t. opts apply to the master and the replica
// (the sentinels authenticate to them with its password); TLS is not
// supported here.
func StartSentinel(t testing.TB, opts Options) *Sentinel {
	t.Helper()
	if opts.TLS {
		t.Fatal("redistest: StartSentinel does not support TLS")
	}
	st := &Sentinel{t: t, Master: Start(t, opts)}
	replica := opts
	replica.Args = append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(st.Master.Port())}, opts.Args...)
	st.Replica = Start(t, replica)
	for range 3 {
		s := newServer(t, Options{Flavor: opts.Flavor}, nil)
		conf := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(st.config(s, opts)), 0o644); err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel"}
		s.Start()
		st.Sentinels = append(st.Sentinels, s)
	}
	st.waitReady()
	return st
}

// config returns the configuration file of sentinel s.
func (st *Sentinel) config(s *Server, opts Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\ndir %s\nlogfile \"\"\n", s.port, s.dir)
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d 2\n", MasterName, st.Master.Port())
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s 1000\n", MasterName)
	fmt.Fprintf(&b, "sentinel failover-timeout %s 10000\n", MasterName)
	if opts.User != "" {
		fmt.Fprintf(&b, "sentinel auth-user %s %s\n", MasterName, opts.User)
	}
	if opts.Password != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", MasterName, opts.Password)
	}
	return b.String()
}

// Addrs returns the sentinels' addresses.
func (st *Sentinel) Addrs() []string {
	out := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// waitReady waits until every sentinel sees the master up, its replica
// linked and the two other sentinels.
func (st *Sentinel) waitReady() {
	st.t.Helper()
	st.wait("sentinels ready", func() string {
		for _, s := range st.Sentinels {
			m, err := pairs(s.Do("SENTINEL", "MASTER", MasterName))
			if err != nil {
				return fmt.Sprintf("%s: SENTINEL MASTER: %v", s.Addr(), err)
			}
			if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Sprintf("%s: flags %s, num-slaves %s, num-other-sentinels %s", s.Addr(), m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			v, err := s.Do("SENTINEL", "REPLICAS", MasterName)
			if err != nil {
				return fmt.Sprintf("%s: SENTINEL REPLICAS: %v", s.Addr(), err)
			}
			list, _ := v.([]any)
			if len(list) != 1 {
				return fmt.Sprintf("%s: %d replicas", s.Addr(), len(list))
			}
			r, _ := pairs(list[0], nil)
			if r["flags"] != "slave" || r["master-link-status"] != "ok" {
				return fmt.Sprintf("%s: the replica's flags %s, master-link-status %s", s.Addr(), r["flags"], r["master-link-status"])
			}
		}
		return ""
	})
}

// MasterAddr returns the master's address as the first sentinel that
// answers names it, or fails the test.
func (st *Sentinel) MasterAddr() string {
	st.t.Helper()
	for _, s := range st.Sentinels {
		if addr, err := masterAddr(s); err == nil {
			return addr
		}
	}
	st.t.Fatal("redistest: no sentinel names the master")
	return ""
}

// masterAddr asks sentinel s for the master's address.
func masterAddr(s *Server) (string, error) {
	v, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
	if err != nil {
		return "", err
	}
	a, _ := v.([]any)
	if len(a) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME: %v", v)
	}
	return fmt.Sprintf("%v:%v", a[0], a[1]), nil
}

// Failover forces a failover (SENTINEL FAILOVER on the first sentinel),
// waits until the replica is the master and every sentinel names it,
// makes the old master its replica (REPLICAOF, as the sentinels would some
// seconds later), waits until it replicates, then swaps Master and Replica and
// returns the new master; or fails the test.
func (st *Sentinel) Failover() *Server {
	st.t.Helper()
	st.Sentinels[0].MustDo("SENTINEL", "FAILOVER", MasterName)
	next, old := st.Replica, st.Master
	st.wait("failover", func() string {
		for _, s := range st.Sentinels {
			if addr, err := masterAddr(s); err != nil || addr != next.Addr() {
				return fmt.Sprintf("%s names the master %s (%v)", s.Addr(), addr, err)
			}
		}
		if r := roleOf(next); r != "master" {
			return fmt.Sprintf("the new master %s is a %s", next.Addr(), r)
		}
		if roleOf(old) == "master" {
			// The sentinels would turn it into a replica 8 s after they
			// see it again (four hello periods): do it at once.
			if _, err := old.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(next.Port())); err != nil {
				return fmt.Sprintf("REPLICAOF on the old master %s: %v", old.Addr(), err)
			}
		}
		if info, err := next.Do("INFO", "replication"); err != nil || parseInfo(fmt.Sprint(info))["connected_slaves"] != "1" {
			return fmt.Sprintf("the old master %s does not replicate the new one yet", old.Addr())
		}
		return ""
	})
	st.Master, st.Replica = next, old
	return next
}

// wait calls amiss every 50 ms until it returns "", or fails the test
// after 30 s with what it last returned.
func (st *Sentinel) wait(what string, amiss func() string) {
	st.t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		why := amiss()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("redistest: %s not within %v: %s", what, clusterTimeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// roleOf returns s's ROLE (master, slave, sentinel), or "".
func roleOf(s *Server) string {
	v, err := s.Do("ROLE")
	if err != nil {
		return ""
	}
	a, _ := v.([]any)
	if len(a) == 0 {
		return ""
	}
	r, _ := a[0].(string)
	return r
}

// pairs turns a flat array reply (key, value, ...) into a map.
func pairs(v any, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array: %v", v)
	}
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		m[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	return m, nil
}
