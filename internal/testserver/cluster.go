package testserver

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// clusterSlots is the number of hash slots in a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of three masters without replicas on loopback,
// with all hash slots assigned.
type Cluster struct {
	nodes []*Redis
}

// StartCluster starts three cluster-enabled redis-server nodes (no
// persistence, cluster-node-timeout 2000), gives each a third of the slots
// (CLUSTER ADDSLOTSRANGE), joins them (CLUSTER MEET) and waits until every
// node reports cluster_state:ok with all three nodes and all slots, and has
// a live cluster-bus link to each other node (so that a PUBLISH reaches
// every node). No redis-cli is needed. Everything is killed at t.Cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := Require(t, "redis-server")
	const n = 3
	c := &Cluster{}
	for range n {
		dir := t.TempDir()
		node := startServer(t, "redis-cluster", bin, dir, 2, func(ports []int) []string {
			return append(redisBaseArgs(ports[0], dir),
				"--cluster-enabled", "yes",
				"--cluster-port", strconv.Itoa(ports[1]),
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000",
				"--cluster-announce-ip", "127.0.0.1",
			)
		})
		c.nodes = append(c.nodes, node)
	}

	for i, node := range c.nodes {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if _, err := respDo(node.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			t.Fatalf("testserver: %s: CLUSTER SET-CONFIG-EPOCH: %v", node.Addr(), err)
		}
		if _, err := respDo(node.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("testserver: %s: CLUSTER ADDSLOTSRANGE %d %d: %v", node.Addr(), lo, hi, err)
		}
	}
	for _, node := range c.nodes[1:] {
		_, err := respDo(c.nodes[0].Addr(), "CLUSTER", "MEET", "127.0.0.1",
			strconv.Itoa(node.ports[0]), strconv.Itoa(node.ports[1]))
		if err != nil {
			t.Fatalf("testserver: CLUSTER MEET %s: %v", node.Addr(), err)
		}
	}
	for _, node := range c.nodes {
		err := poll(sentinelTimeout, func() error { return clusterOK(node.Addr(), n) })
		if err != nil {
			t.Fatalf("testserver: cluster node %s: %v%s", node.Addr(), err, node.process().logTail())
		}
	}
	return c
}

// clusterOK checks that the node at addr reports a healthy cluster of n nodes
// with every slot served, linked to each other node.
func clusterOK(addr string, n int) error {
	info, err := respInfo(addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_known_nodes":    strconv.Itoa(n),
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
	}
	for k, v := range want {
		if info[k] != v {
			return fmt.Errorf("%s:%s, want %s", k, info[k], v)
		}
	}
	return clusterLinked(addr, n)
}

// clusterLinked checks that the node at addr has a cluster-bus link to each
// of the n-1 others, out of its handshake with it and answered (a PONG). A
// node sends a PUBLISH to the others over these links and drops it for a
// node it has none to: cluster_state:ok and cluster_known_nodes come before
// the links do (a node learnt through another's gossip starts in handshake),
// and a subscriber there would miss the message.
func clusterLinked(addr string, n int) error {
	s, err := respString(addr, "CLUSTER", "NODES")
	if err != nil {
		return err
	}
	others := 0
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		// <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
		f := strings.Fields(line)
		if len(f) < 8 {
			return fmt.Errorf("CLUSTER NODES line %q", line)
		}
		flags := strings.Split(f[2], ",")
		if slices.Contains(flags, "myself") {
			continue
		}
		others++
		for _, bad := range []string{"handshake", "noaddr", "fail?", "fail"} {
			if slices.Contains(flags, bad) {
				return fmt.Errorf("node %s is %s", f[1], f[2])
			}
		}
		if f[7] != "connected" || f[5] == "0" {
			return fmt.Errorf("node %s: link %s, last pong %s", f[1], f[7], f[5])
		}
	}
	if others != n-1 {
		return fmt.Errorf("CLUSTER NODES lists %d other nodes, want %d", others, n-1)
	}
	return nil
}

// Addrs returns the nodes' client addresses, for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Nodes returns the three nodes, to kill, pause or restart one (a restarted
// node keeps its nodes.conf, so it rejoins with the same identity and slots).
func (c *Cluster) Nodes() []*Redis { return append([]*Redis(nil), c.nodes...) }
