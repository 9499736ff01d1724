package main

// The workload: clients doing random operations on a few functions and their
// instances, and simulated nodes renewing their leases. A few keys and many clients,
// so that operations on one function overlap (that is where anomalies show), and
// every accelerator offered by at least two nodes, so that a lost node's instances
// have somewhere to go.

import (
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Accelerators the simulated nodes offer and the functions ask for.
var accelerators = []string{"sobel", "echo", "topk"}

// Workload shape.
const (
	instancesPerFunction = 4                     // ids fN-i0 … fN-i3
	thinkTimeMax         = 40 * time.Millisecond // pause between one client's operations
)

// SimNode is a simulated node: a registration (one device per accelerator it offers,
// each with one slot, numbered across the node, that can hold only that accelerator, so the registry never
// reconfigures it) and a goroutine renewing its lease every third of it.
type SimNode struct {
	Name    string
	Accs    []string
	port    int
	renew   atomic.Bool // false while the nemesis has "crashed" it
	client  *Client
	leaseMs int64
}

// SimNodes: count nodes, the i-th offering every accelerator but the (i mod 3)-th
// (so each accelerator is on two of any three consecutive nodes).
func SimNodes(count int, leaseMs int64) []*SimNode {
	nodes := make([]*SimNode, count)
	for i := range nodes {
		var accs []string
		for j, a := range accelerators {
			if j != i%len(accelerators) || count == 1 {
				accs = append(accs, a)
			}
		}
		nodes[i] = &SimNode{Name: fmt.Sprintf("n%d", i), Accs: accs, port: 20000 + 10*i, leaseMs: leaseMs}
		nodes[i].renew.Store(true)
	}
	return nodes
}

// Slots: every simulated slot ("node/device/slot") and what it holds.
func Slots(nodes []*SimNode) map[string]string {
	slots := map[string]string{}
	for _, n := range nodes {
		for j, a := range n.Accs {
			slots[fmt.Sprintf("%s/d-%s/%d", n.Name, a, j)] = a
		}
	}
	return slots
}

func (n *SimNode) registration() []byte {
	type slot struct {
		ID          uint32  `json:"id"`
		Accelerator string  `json:"accelerator"`
		Hash        string  `json:"hash"`
		BusyRatio   float64 `json:"busy_ratio"`
		QueueDepth  int     `json:"queue_depth"`
	}
	type device struct {
		ID           string   `json:"id"`
		Backend      string   `json:"backend"`
		Vendor       string   `json:"vendor"`
		Platform     string   `json:"platform"`
		Accelerators []string `json:"accelerators"`
		Slots        []slot   `json:"slots"`
	}
	var devices []device
	for j, a := range n.Accs {
		// Slot ids are unique within a node, across its devices.
		devices = append(devices, device{ID: "d-" + a, Backend: "cpu", Vendor: "netaccel",
			Platform: "host", Accelerators: []string{a},
			Slots: []slot{{ID: uint32(j), Accelerator: a, Hash: "h", BusyRatio: 0.1}}})
	}
	return mustJSON(map[string]interface{}{
		"http":    fmt.Sprintf("127.0.0.1:%d", n.port),
		"rac":     fmt.Sprintf("127.0.0.1:%d", n.port+1),
		"devices": devices,
	})
}

// Run renews the lease until stop is closed (skipping renewals while paused).
func (n *SimNode) Run(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	body := n.registration()
	tick := time.NewTicker(time.Duration(n.leaseMs/3) * time.Millisecond)
	defer tick.Stop()
	for {
		if n.renew.Load() {
			n.client.Do(Record{F: FPutNode, Node: n.Name}, "PUT", "/v1/nodes/"+n.Name, body)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// RunClient does random operations on functions f0…f(functions-1) until stop.
func RunClient(c *Client, functions int, seed int64, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	rng := rand.New(rand.NewSource(seed))
	for {
		select {
		case <-stop:
			return
		default:
		}
		fn := fmt.Sprintf("f%d", rng.Intn(functions))
		inst := fmt.Sprintf("%s-i%d", fn, rng.Intn(instancesPerFunction))
		base := "/v1/functions/" + fn
		switch p := rng.Intn(100); {
		case p < 10:
			acc := accelerators[rng.Intn(len(accelerators))]
			c.Do(Record{F: FPutFn, Fn: fn, Acc: acc}, "PUT", base,
				mustJSON(map[string]interface{}{"accelerator": acc, "instances": 0}))
		case p < 14:
			c.Do(Record{F: FDelFn, Fn: fn}, "DELETE", base, nil)
		case p < 40:
			c.Do(Record{F: FPostInst, Fn: fn, Inst: inst}, "POST", base+"/instances",
				mustJSON(map[string]string{"id": inst}))
		case p < 55:
			c.Do(Record{F: FDelInst, Fn: fn, Inst: inst}, "DELETE", base+"/instances/"+inst, nil)
		case p < 80:
			c.Do(Record{F: FGetInst, Fn: fn, Inst: inst}, "GET", base+"/instances/"+inst, nil)
		default:
			c.Do(Record{F: FGetFn, Fn: fn}, "GET", base, nil)
		}
		time.Sleep(time.Duration(rng.Int63n(int64(thinkTimeMax))))
	}
}

// sortedKeys of a map, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
