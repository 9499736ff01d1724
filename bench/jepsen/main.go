// Command jepsen tests the registry's replicas the way Jepsen tests a database: many
// clients do random operations while a nemesis injects faults, every operation is
// recorded with its wall-clock invocation and completion, and a checker decides the
// whole history against a model of the registry's state (porcupine, a
// linearizability checker).
//
//	jepsen run   -registry BIN -duration 60s -out DIR   # cluster, workload, nemesis, check
//	jepsen check -out DIR [-history FILE]              # check DIR/history.jsonl (or FILE) again
//
// A run writes DIR/history.jsonl, DIR/verdict.json, DIR/linearizability.html
// (porcupine's visualisation) and the processes' logs; it exits 0 when the history is
// valid, 1 when it is not, 2 when it could not run. With -expect-invalid the exit
// statuses of valid and invalid swap: that is how a build with a planted bug is
// checked to be caught.
//
// It is not a load test and not a test of the nodes: the simulated nodes only renew
// leases, and the rate is kept low enough for the checker to decide the history.
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "run" && os.Args[1] != "check") {
		fmt.Fprintln(os.Stderr, "usage: jepsen run|check [flags] (-h for the flags)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	bin := fs.String("registry", "", "the netaccel-registry binary")
	duration := fs.Duration("duration", time.Minute, "how long the workload and nemesis run")
	clients := fs.Int("clients", 10, "concurrent clients")
	nodes := fs.Int("nodes", 4, "simulated nodes")
	functions := fs.Int("functions", 6, "functions the clients work on")
	out := fs.String("out", "jepsen-out", "folder for the history, verdict and logs")
	seed := fs.Int64("seed", time.Now().UnixNano(), "random seed of the workload and nemesis")
	leaseMs := fs.Int64("lease-ms", 2000, "the nodes' lease (--lease-ms)")
	ttlS := fs.Int64("election-ttl-s", 2, "the replicas' election lease (--election-ttl-s)")
	staleMs := fs.Int64("read-staleness-ms", 0, "how old a read may be: 0 checks that reads are linearizable too")
	netnsMode := fs.String("netns", "auto", "network namespaces: auto (when root), on (required), off")
	noFaults := fs.Bool("no-faults", false, "no nemesis (a baseline history)")
	faultList := fs.String("faults", "", "comma-separated fault kinds to choose from (default: every kind this machine can inject)")
	checkTimeout := fs.Duration("check-timeout", 2*time.Minute, "longest the linearizability check may take")
	expectInvalid := fs.Bool("expect-invalid", false, "exit 0 only when the history is NOT valid (a planted bug)")
	historyFlag := fs.String("history", "", "check: the history to check (default: OUT/history.jsonl)")
	_ = fs.Parse(os.Args[2:])
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	history := filepath.Join(*out, "history.jsonl")
	if *historyFlag != "" && os.Args[1] == "check" {
		history = *historyFlag
	}
	if os.Args[1] == "run" {
		if *bin == "" {
			fail(fmt.Errorf("-registry BIN is required"))
		}
		cfg := runConfig{bin: *bin, duration: *duration, clients: *clients, nodes: *nodes,
			functions: *functions, out: *out, seed: *seed, leaseMs: *leaseMs, ttlS: *ttlS,
			staleMs: *staleMs, faults: !*noFaults, netns: *netnsMode, kinds: *faultList}
		if err := runTest(cfg, history); err != nil {
			fail(err)
		}
	}
	records, err := ReadHistory(history)
	if err != nil {
		fail(err)
	}
	v, err := Check(records, *checkTimeout, filepath.Join(*out, "linearizability.html"))
	if err != nil {
		fail(err)
	}
	if err := SaveVerdict(v, filepath.Join(*out, "verdict.json")); err != nil {
		fail(err)
	}
	report(v)
	if v.Valid == *expectInvalid {
		if *expectInvalid {
			fmt.Println("FAIL: the history was expected to be invalid (a planted bug) and was found valid")
		}
		os.Exit(1)
	}
	if *expectInvalid {
		fmt.Println("the planted bug was caught")
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "jepsen:", err)
	os.Exit(2)
}

func report(v Verdict) {
	fmt.Printf("valid: %v (linearizable: %s, %d operations checked, %d of unknown outcome)\n",
		v.Valid, v.Linearizable, v.OperationsKnown, v.OperationsOpen)
	for _, k := range sortedKeys(v.ByOperation) {
		fmt.Printf("  %-18s %d\n", k, v.ByOperation[k])
	}
	for _, k := range sortedKeys(v.Faults) {
		fmt.Printf("  fault %-20s %3d  longest write unavailability %6d ms\n", k, v.Faults[k], v.UnavailabilityMs[k])
	}
	for _, k := range sortedKeys(v.FaultsLeftOut) {
		fmt.Printf("  fault %-20s left out: %s\n", k, v.FaultsLeftOut[k])
	}
	for _, a := range v.Anomalies {
		fmt.Println("  ANOMALY:", a)
	}
}

type runConfig struct {
	bin                          string
	duration                     time.Duration
	clients, nodes, functions    int
	out                          string
	seed, leaseMs, ttlS, staleMs int64
	faults                       bool
	netns, kinds                 string
}

// chooseNetns: whether to run in network namespaces (-netns on, off or auto).
func chooseNetns(mode string) (bool, error) {
	if mode == "off" {
		return false, nil
	}
	why := NetnsUsable()
	if why == "" {
		return true, nil
	}
	if mode == "on" {
		return false, fmt.Errorf("network namespaces: %s", why)
	}
	fmt.Printf("network namespaces not available (%s): no partitions, no netem\n", why)
	return false, nil
}

func runTest(cfg runConfig, history string) error {
	useNetns, err := chooseNetns(cfg.netns)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(cfg.bin)
	if err != nil {
		return err
	}
	cluster, err := StartCluster(cfg.out, abs, useNetns, cfg.leaseMs, cfg.ttlS)
	if err != nil {
		return err
	}
	defer cluster.Close()
	// Interrupted (a timeout, ^C): the network and processes go too.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-signals
		cluster.Close()
		fmt.Fprintf(os.Stderr, "jepsen: %v: cluster removed\n", sig)
		os.Exit(2)
	}()
	rec, err := NewRecorder(history)
	if err != nil {
		return err
	}
	sims := SimNodes(cfg.nodes, cfg.leaseMs)
	rec.Write(Record{Type: TypeSetup, Slots: Slots(sims), LeaseMs: cfg.leaseMs,
		ElectionTTLMs: cfg.ttlS * 1000, ReadStalenessMs: cfg.staleMs})
	fmt.Printf("cluster up: replicas %v, netns %v, seed %d; running %v with %d clients\n",
		cluster.Bases, useNetns, cfg.seed, cfg.duration, cfg.clients)

	first := Leader(cluster.Bases)
	for i := 0; first < 0 && i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		first = Leader(cluster.Bases)
	}
	if first < 0 {
		return fmt.Errorf("no replica leads 10 s after they started")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range sims {
		n.client = NewClient(1000+i, cluster.Bases, first, rec)
		wg.Add(1)
		go n.Run(stop, &wg)
	}
	time.Sleep(time.Duration(cfg.leaseMs/3) * time.Millisecond) // the nodes registered
	for i := 0; i < cfg.clients; i++ {
		wg.Add(1)
		// Spread over the replicas, as clients configured with the replicas in
		// different orders are: writes to followers are redirected (or, with the
		// planted bug, wrongly taken).
		start := (first + i) % len(cluster.Bases)
		go RunClient(NewClient(i, cluster.Bases, start, rec), cfg.functions, cfg.seed+int64(i), stop, &wg)
	}
	nemesisDone := make(chan struct{})
	stopNemesis := make(chan struct{})
	if cfg.faults {
		n := &Nemesis{c: cluster, nodes: sims, rec: rec, rng: rand.New(rand.NewSource(cfg.seed)),
			ttl: time.Duration(cfg.ttlS) * time.Second, lease: time.Duration(cfg.leaseMs) * time.Millisecond,
			kinds: FaultKinds(useNetns)}
		if cfg.kinds != "" {
			n.kinds = strings.Split(cfg.kinds, ",")
		}
		go n.Run(stopNemesis, nemesisDone)
	} else {
		close(nemesisDone)
	}
	time.Sleep(cfg.duration)
	// Heal, then let the clients see the healed cluster for a while: the history ends
	// with operations that must reflect every write before them.
	close(stopNemesis)
	<-nemesisDone
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	return rec.Close()
}
