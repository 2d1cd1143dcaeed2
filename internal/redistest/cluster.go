package redistest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// clusterTimeout bounds how long a cluster may take to form, to agree
// again after a change, or to promote a replica.
const clusterTimeout = 30 * time.Second

// NodeTimeout is the cluster-node-timeout of a Cluster's nodes: a master
// unreachable that long is failed and its replica promoted, within a few
// seconds.
const NodeTimeout = time.Second

// Cluster is a Redis Cluster of a test on 127.0.0.1: masters that share
// the 16,384 slots, each with its replicas. The nodes are Servers
// (stopped when the test ends); Kill, Freeze and Start of a node work as
// on a single server, and a node started again rejoins the cluster (its
// nodes.conf is kept).
type Cluster struct {
	t testing.TB
	// Nodes are every node, in the order the cluster was created with: the
	// first masters were its masters then, the others their replicas.
	Nodes []*Server
	ids   map[*Server]string
}

// StartCluster starts masters+masters*replicasPerMaster nodes with
// --cluster-enabled yes, creates the cluster with `redis-cli --cluster
// create` and waits until it is ok (see WaitOK), or fails t. opts apply to
// every node (TLS adds --tls-cluster yes: the cluster bus and the
// replication run over TLS). There must be at least three masters.
func StartCluster(t testing.TB, masters, replicasPerMaster int, opts Options) *Cluster {
	t.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("redistest: a cluster needs at least 3 masters and no negative replicas, not %d and %d", masters, replicasPerMaster)
	}
	extra := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout / time.Millisecond)),
		"--cluster-replica-validity-factor", "0", "--cluster-allow-replica-migration", "no"}
	if opts.TLS {
		extra = append(extra, "--tls-cluster", "yes")
	}
	c := &Cluster{t: t, ids: make(map[*Server]string)}
	for range masters * (1 + replicasPerMaster) {
		// The bus port is one of our own: port+10000 may be taken.
		bus := []string{"--cluster-port", strconv.Itoa(testutil.FreePort(t))}
		s := newServer(t, opts, append(bus, extra...))
		opts.PKI = s.opts.PKI // one PKI for every node
		s.Start()
		c.ids[s] = mustString(t, s.MustDo("CLUSTER", "MYID"))
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	c.Nodes[0].CLI(args...)
	c.WaitOK()
	return c
}

// Seeds returns every node's address, for a client's seed list.
func (c *Cluster) Seeds() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// ID returns the node's cluster id.
func (c *Cluster) ID(s *Server) string { return c.ids[s] }

// byID returns the node of a cluster id, or nil.
func (c *Cluster) byID(id string) *Server {
	for s, sid := range c.ids {
		if sid == id {
			return s
		}
	}
	return nil
}

// NodeInfo is one line of CLUSTER NODES.
type NodeInfo struct {
	ID, Addr string
	// Flags are the node's flags (myself, master, slave, fail?, fail...).
	Flags []string
	// MasterID is the master a replica replicates ("-" for a master).
	MasterID string
	// Slots are the slot ranges a master serves ("0-5460").
	Slots []string
}

// Master reports whether the node is a master.
func (n NodeInfo) Master() bool { return slices.Contains(n.Flags, "master") }

// Failed reports whether the node is flagged as failing (fail or fail?).
func (n NodeInfo) Failed() bool {
	return slices.Contains(n.Flags, "fail") || slices.Contains(n.Flags, "fail?")
}

// Topology returns CLUSTER NODES as s sees it.
func (c *Cluster) Topology(s *Server) ([]NodeInfo, error) {
	v, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	text, _ := v.(string)
	var out []NodeInfo
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, NodeInfo{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ","), MasterID: f[3], Slots: f[8:]})
	}
	return out, nil
}

// Masters returns the running nodes that are masters now.
func (c *Cluster) Masters() []*Server {
	c.t.Helper()
	var out []*Server
	for _, s := range c.Nodes {
		if s.Running() && roleOf(s) == "master" {
			out = append(out, s)
		}
	}
	return out
}

// ReplicasOf returns the running nodes that replicate master now.
func (c *Cluster) ReplicasOf(master *Server) []*Server {
	c.t.Helper()
	var out []*Server
	for _, s := range c.Nodes {
		if s == master || !s.Running() {
			continue
		}
		nodes, err := c.Topology(s)
		if err != nil {
			continue
		}
		for _, n := range nodes {
			if slices.Contains(n.Flags, "myself") && n.MasterID == c.ids[master] {
				out = append(out, s)
			}
		}
	}
	return out
}

// MasterOf returns the master serving key's slot, as the first running
// node sees it.
func (c *Cluster) MasterOf(key string) *Server {
	c.t.Helper()
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		slot, err := s.Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			continue
		}
		nodes, err := c.Topology(s)
		if err != nil {
			continue
		}
		if m := c.byID(servingID(nodes, slot.(int64))); m != nil {
			return m
		}
	}
	c.t.Fatalf("redistest: no running node knows who serves %q", key)
	return nil
}

// servingID returns the id of the master whose ranges hold slot, or "".
func servingID(nodes []NodeInfo, slot int64) string {
	for _, n := range nodes {
		if !n.Master() || n.Failed() {
			continue
		}
		for _, r := range n.Slots {
			lo, hi, _ := strings.Cut(r, "-")
			if hi == "" {
				hi = lo
			}
			l, err1 := strconv.ParseInt(lo, 10, 64)
			h, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && l <= slot && slot <= h {
				return n.ID
			}
		}
	}
	return ""
}

// WaitOK waits until every running node says cluster_state:ok with all
// 16,384 slots ok, knows every node, and names the same masters for the
// same slots, and every running replica's link to its master is up; or
// fails the test after 30 s with what was amiss.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	var amiss string
	deadline := time.Now().Add(clusterTimeout)
	for {
		if amiss = c.notOK(); amiss == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: cluster not ok within %v: %s", clusterTimeout, amiss)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notOK returns what keeps the cluster from being ok, or "".
func (c *Cluster) notOK() string {
	if amiss := c.slotsDisagree(); amiss != "" {
		return amiss
	}
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		v, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", s.Addr(), err)
		}
		text, _ := v.(string)
		info := parseInfo(text)
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" || info["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
			return fmt.Sprintf("%s: cluster_state:%s cluster_slots_ok:%s cluster_known_nodes:%s", s.Addr(),
				info["cluster_state"], info["cluster_slots_ok"], info["cluster_known_nodes"])
		}
		v, err = s.Do("INFO", "replication")
		if err != nil {
			return fmt.Sprintf("%s: INFO replication: %v", s.Addr(), err)
		}
		text, _ = v.(string)
		repl := parseInfo(text)
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return fmt.Sprintf("%s: a replica whose master_link_status is %s", s.Addr(), repl["master_link_status"])
		}
	}
	return ""
}

// slotsDisagree returns "" when every running node names the same
// masters for the same slot ranges, or where two nodes differ: after a
// failover, gossip reaches the nodes one by one, and a node still
// naming the old master would redirect a client there.
func (c *Cluster) slotsDisagree() string {
	var first *Server
	var want string
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		nodes, err := c.Topology(s)
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER NODES: %v", s.Addr(), err)
		}
		var owners []string
		for _, n := range nodes {
			if n.Master() && len(n.Slots) > 0 {
				owners = append(owners, n.ID+" "+strings.Join(n.Slots, " "))
			}
		}
		slices.Sort(owners)
		got := strings.Join(owners, "; ")
		if first == nil {
			first, want = s, got
		} else if got != want {
			return fmt.Sprintf("%s and %s name different masters for the slots", first.Addr(), s.Addr())
		}
	}
	return ""
}

// Failover makes a replica of master take its place with CLUSTER
// FAILOVER (a manual failover: the master hands over without losing
// writes), waits until the cluster is ok again and returns the new
// master; or fails the test.
func (c *Cluster) Failover(master *Server) *Server {
	c.t.Helper()
	replicas := c.ReplicasOf(master)
	if len(replicas) == 0 {
		c.t.Fatalf("redistest: %s has no running replica to fail over to", master.Addr())
	}
	r := replicas[0]
	// The master ignores a replica's request to take over until gossip
	// has told it the replica is its own; the request then times out
	// after 5 s on the replica. So wait for the master's view first, and
	// ask again if a request timed out all the same.
	c.waitKnownReplica(master, r)
	deadline := time.Now().Add(clusterTimeout)
	for {
		r.MustDo("CLUSTER", "FAILOVER")
		asked := time.Now()
		for roleOf(r) != "master" && time.Since(asked) < manualFailoverTimeout {
			time.Sleep(50 * time.Millisecond)
		}
		if roleOf(r) == "master" {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s's role is not master within %v", r.Addr(), clusterTimeout)
		}
	}
	c.waitRole(master, "slave")
	c.WaitOK()
	return r
}

// manualFailoverTimeout is how long a replica waits for its master to
// hand over after CLUSTER FAILOVER (Redis's CLUSTER_MF_TIMEOUT, 5 s),
// with a second's margin.
const manualFailoverTimeout = 6 * time.Second

// waitKnownReplica waits until master's CLUSTER NODES names r as its
// replica, or fails the test after 30 s.
func (c *Cluster) waitKnownReplica(master, r *Server) {
	c.t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		nodes, err := c.Topology(master)
		if err == nil {
			for _, n := range nodes {
				if n.ID == c.ids[r] && n.MasterID == c.ids[master] {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s does not know %s as its replica within %v", master.Addr(), r.Addr(), clusterTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillMaster kills master (SIGKILL), waits until the cluster has promoted
// one of its replicas and is ok again, and returns the promoted replica;
// or fails the test. With NodeTimeout at one second, the promotion takes
// a few seconds. Start on the killed node brings it back as a replica.
func (c *Cluster) KillMaster(master *Server) *Server {
	c.t.Helper()
	replicas := c.ReplicasOf(master)
	if len(replicas) == 0 {
		c.t.Fatalf("redistest: %s has no running replica to promote", master.Addr())
	}
	master.Kill()
	promoted := c.WaitPromoted(replicas)
	c.WaitOK()
	return promoted
}

// WaitPromoted waits until one of replicas is a master and returns it, or
// fails the test after 30 s.
func (c *Cluster) WaitPromoted(replicas []*Server) *Server {
	c.t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		for _, r := range replicas {
			if roleOf(r) == "master" {
				return r
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: no replica promoted within %v", clusterTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRole waits until s's ROLE is role, or fails the test after 30 s.
func (c *Cluster) waitRole(s *Server, role string) {
	c.t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for roleOf(s) != role {
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: %s's role is not %s within %v", s.Addr(), role, clusterTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustString returns v as a string, or fails t.
func mustString(t testing.TB, v any) string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("redistest: a reply %v (%T), not a string", v, v)
	}
	return s
}
