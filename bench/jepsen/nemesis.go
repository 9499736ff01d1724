package main

// The nemesis: one fault at a time, chosen at random, each recorded in the history
// when it starts and when it is healed, with a quiet spell between faults so that
// the cluster's recovery is part of the history too.

import (
	"fmt"
	"math/rand"
	"strings"
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
	LossLeader      = "loss-leader"        // 10 % of the leader's packets dropped (nftables numgen)
	EtcdMemberLoss  = "etcd-member-loss"   // kill -9 of one of the 3 etcd members
	NodeLoss        = "node-loss"          // a simulated node stops renewing its lease
)

// FaultKinds: every kind, or those that need no namespaces.
func FaultKinds(netns bool) []string {
	kinds := []string{KillLeader, KillFollower, PauseLeader, PauseFollower, EtcdMemberLoss, NodeLoss}
	if netns {
		kinds = append(kinds, PartitionLeader, PartitionFollow, NetemLeader, LossLeader)
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

// dropRule adds an nftables rule on the output of replica i's namespace; how to take
// it away.
func (n *Nemesis) dropRule(i int, rule ...string) (func() error, error) {
	nft := []string{"ip", "netns", "exec", n.c.spaces[i], "nft"}
	err := run(append(nft, "add", "table", "inet", "njepsen")...)
	if err == nil {
		err = run(append(nft, "add", "chain", "inet", "njepsen", "out",
			"{ type filter hook output priority 0 ; }")...)
	}
	if err == nil {
		err = run(append(append(nft, "add", "rule", "inet", "njepsen", "out"), rule...)...)
	}
	heal := func() error { return run(append(nft, "delete", "table", "inet", "njepsen")...) }
	if err != nil {
		_ = heal()
	}
	return heal, err
}

func without(kinds []string, kind string) []string {
	var rest []string
	for _, k := range kinds {
		if k != kind {
			rest = append(rest, k)
		}
	}
	return rest
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
		target, heal, err := n.inject(kind)
		if err != nil {
			// A fault this machine cannot make (say, no sch_netem in its kernel):
			// said once, then left out of the run.
			fmt.Printf("nemesis: %s left out: %v\n", kind, err)
			n.rec.Write(Record{Type: TypeNemesis, F: kind, Phase: "refused", Error: err.Error()})
			n.kinds = without(n.kinds, kind)
			continue
		}
		n.Counted[kind]++
		n.rec.Write(Record{Type: TypeNemesis, F: kind, Phase: "start", Target: target})
		sleepOrStop(stop, n.duration(kind))
		if err := heal(); err != nil {
			panic(fmt.Sprintf("nemesis: healing %s on %s: %v", kind, target, err))
		}
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
func (n *Nemesis) inject(kind string) (string, func() error, error) {
	leader := kind == KillLeader || kind == PauseLeader || kind == PartitionLeader ||
		kind == NetemLeader || kind == LossLeader
	switch kind {
	case KillLeader, KillFollower:
		p := n.c.Replicas[n.replica(leader)]
		p.kill()
		return p.name, p.start, nil
	case PauseLeader, PauseFollower:
		p := n.c.Replicas[n.replica(leader)]
		p.signal(syscall.SIGSTOP)
		return p.name, func() error { p.signal(syscall.SIGCONT); return nil }, nil
	case PartitionLeader, PartitionFollow:
		i := n.replica(leader)
		ports := make([]string, len(n.c.etcdPort))
		for j, p := range n.c.etcdPort {
			ports[j] = fmt.Sprint(p)
		}
		heal, err := n.dropRule(i, "ip", "daddr", n.c.hostIP, "tcp", "dport", "{ "+strings.Join(ports, ", ")+" }", "drop")
		return n.c.Replicas[i].name, heal, err
	case LossLeader:
		i := n.replica(true)
		heal, err := n.dropRule(i, "numgen", "random", "mod", "100", "<", "10", "drop")
		return n.c.Replicas[i].name, heal, err
	case NetemLeader:
		i := n.replica(true)
		tc := []string{"ip", "netns", "exec", n.c.spaces[i], "tc", "qdisc"}
		err := run(append(tc, "add", "dev", n.c.inner[i], "root", "netem", "delay", "50ms", "25ms", "loss", "5%")...)
		return n.c.Replicas[i].name, func() error { return run(append(tc, "del", "dev", n.c.inner[i], "root")...) }, err
	case EtcdMemberLoss:
		p := n.c.etcd[n.rng.Intn(len(n.c.etcd))]
		p.kill()
		return p.name, p.start, nil
	case NodeLoss:
		node := n.nodes[n.rng.Intn(len(n.nodes))]
		node.renew.Store(false)
		return node.Name, func() error { node.renew.Store(true); return nil }, nil
	}
	panic("unknown fault kind " + kind)
}
