package main

// The nemesis: one fault at a time, chosen at random, each recorded in the history
// when it starts and when it is healed, with a quiet spell between faults so that
// the cluster's recovery is part of the history too.

import (
	"fmt"
	"math/rand"
	"syscall"
	"time"
)

// Fault kinds.
const (
	KillLeader      = "kill-leader"        // kill -9, restarted 1-3 s later
	KillFollower    = "kill-follower"      // the same, a follower
	PauseLeader     = "pause-leader"       // SIGSTOP longer than the election lease
	PauseFollower   = "pause-follower"     // the same, a follower
	PartitionLeader = "partition-leader"   // the leader cut from every etcd member (nftables)
	PartitionFollow = "partition-follower" // a follower cut from etcd
	NetemLeader     = "netem-leader"       // delay 50±25 ms and 5 % loss on the leader's link
	EtcdMemberLoss  = "etcd-member-loss"   // kill -9 of one of the 3 etcd members
	NodeLoss        = "node-loss"          // a simulated node stops renewing its lease
)

// FaultKinds: every kind, or those that need no namespaces.
func FaultKinds(netns bool) []string {
	kinds := []string{KillLeader, KillFollower, PauseLeader, PauseFollower, EtcdMemberLoss, NodeLoss}
	if netns {
		kinds = append(kinds, PartitionLeader, PartitionFollow, NetemLeader)
	}
	return kinds
}

// Nemesis injects faults into a cluster and its simulated nodes.
type Nemesis struct {
	c       *Cluster
	nodes   []*SimNode
	rec     *Recorder
	rng     *rand.Rand
	ttl     time.Duration // the election lease
	lease   time.Duration // a node's lease
	kinds   []string
	Counted map[string]int
}

// Run injects faults until stop is closed, then heals the last one.
func (n *Nemesis) Run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	n.Counted = map[string]int{}
	for {
		if !sleepOrStop(stop, 2*time.Second+time.Duration(n.rng.Int63n(int64(2*time.Second)))) {
			return
		}
		kind := n.kinds[n.rng.Intn(len(n.kinds))]
		target, heal := n.inject(kind)
		n.Counted[kind]++
		n.rec.Write(Record{Type: TypeNemesis, F: kind, Phase: "start", Target: target})
		sleepOrStop(stop, n.duration(kind))
		heal()
		n.rec.Write(Record{Type: TypeNemesis, F: kind, Phase: "end", Target: target})
	}
}

func sleepOrStop(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	case <-time.After(d):
		return true
	}
}

func (n *Nemesis) duration(kind string) time.Duration {
	switch kind {
	case KillLeader, KillFollower:
		return time.Second + time.Duration(n.rng.Int63n(int64(2*time.Second)))
	case PauseLeader, PauseFollower:
		return n.ttl + 1500*time.Millisecond
	case PartitionLeader, PartitionFollow:
		return 2*n.ttl + time.Second
	case NodeLoss:
		return 3*n.lease + 2*time.Second
	}
	return 5 * time.Second
}

// replica picks the leader (leader true) or a follower; -1 when none leads.
func (n *Nemesis) replica(leader bool) int {
	lead := -1
	for i := 0; i < 25 && lead < 0; i++ {
		if lead = Leader(n.c.Bases); lead < 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if leader && lead >= 0 {
		return lead
	}
	for {
		i := n.rng.Intn(len(n.c.Replicas))
		if i != lead || lead < 0 {
			return i
		}
	}
}

// inject starts a fault of kind; what it hit, and how to heal it.
func (n *Nemesis) inject(kind string) (string, func()) {
	leader := kind == KillLeader || kind == PauseLeader || kind == PartitionLeader || kind == NetemLeader
	switch kind {
	case KillLeader, KillFollower:
		i := n.replica(leader)
		p := n.c.Replicas[i]
		p.kill()
		return p.name, func() { must(p.start()) }
	case PauseLeader, PauseFollower:
		i := n.replica(leader)
		p := n.c.Replicas[i]
		p.signal(syscall.SIGSTOP)
		return p.name, func() { p.signal(syscall.SIGCONT) }
	case PartitionLeader, PartitionFollow:
		i := n.replica(leader)
		ns := n.c.spaces[i]
		ports := ""
		for j, p := range n.c.etcdPort {
			if j > 0 {
				ports += ", "
			}
			ports += fmt.Sprint(p)
		}
		must(run("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "njepsen"))
		must(run("ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "njepsen", "out",
			"{ type filter hook output priority 0 ; }"))
		must(run("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "njepsen", "out",
			"ip", "daddr", n.c.hostIP, "tcp", "dport", "{ "+ports+" }", "drop"))
		return n.c.Replicas[i].name, func() {
			must(run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "njepsen"))
		}
	case NetemLeader:
		i := n.replica(true)
		ns, dev := n.c.spaces[i], n.c.inner[i]
		must(run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
			"netem", "delay", "50ms", "25ms", "loss", "5%"))
		return n.c.Replicas[i].name, func() {
			must(run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"))
		}
	case EtcdMemberLoss:
		p := n.c.etcd[n.rng.Intn(len(n.c.etcd))]
		p.kill()
		return p.name, func() { must(p.start()) }
	case NodeLoss:
		node := n.nodes[n.rng.Intn(len(n.nodes))]
		node.renew.Store(false)
		return node.Name, func() { node.renew.Store(true) }
	}
	panic("unknown fault kind " + kind)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
