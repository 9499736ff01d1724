package main

// The cluster under test: a 3-member etcd and 3 registry replicas. With root and
// network namespaces each replica runs in a namespace of its own, joined to the root
// namespace by a veth pair on a bridge (as crates/registry/tests/netns does for
// nodes), so that the nemesis can cut one replica from etcd (nftables in its
// namespace) or slow its link (tc netem) while clients in the root namespace still
// reach it. Without namespaces everything listens on loopback and those two faults
// are not available.
//
// Names start with "nj" and the process id, so leftovers say who made them; every
// process gets SIGKILL when this one dies (Pdeathsig) and Close deletes the rest.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const replicaCount, etcdCount = 3, 3

// Proc is a process the cluster started (and may stop and start again).
type Proc struct {
	name string
	argv []string
	cmd  *exec.Cmd
	log  *os.File
}

func (p *Proc) start() error {
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %v", p.name, err)
	}
	p.cmd = cmd
	return nil
}

func (p *Proc) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill: SIGKILL and reaped.
func (p *Proc) kill() {
	if p.cmd == nil {
		return
	}
	p.signal(syscall.SIGCONT) // a stopped process is killed all the same, but reap it now
	p.signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.cmd = nil
}

// Cluster is etcd, the replicas and, with namespaces, their network.
type Cluster struct {
	dir      string
	hostIP   string // where etcd listens (and, with namespaces, the bridge's address)
	netns    bool
	bridge   string
	spaces   []string // replica i's namespace
	inner    []string // replica i's link inside its namespace
	etcd     []*Proc
	etcdPort []int // client and peer ports of each member, for the partition rules
	Replicas []*Proc
	Bases    []string
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func freePort(ip string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// NetnsUsable says why namespaces cannot be used here, or "".
func NetnsUsable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	name := fmt.Sprintf("njp%d", os.Getpid())
	if err := run("ip", "netns", "add", name); err != nil {
		return err.Error()
	}
	defer run("ip", "netns", "del", name)
	if err := run("ip", "netns", "exec", name, "nft", "list", "ruleset"); err != nil {
		return err.Error()
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return "tc (iproute2) is missing"
	}
	return ""
}

// removeLeftovers deletes the namespaces and links of runs whose process is gone
// (killed outright: nothing of theirs ran to clean up).
func removeLeftovers() {
	gone := func(name string) bool {
		if !strings.HasPrefix(name, "nj") || len(name) < 4 {
			return false
		}
		pid := strings.SplitN(name[3:], "x", 2)[0]
		if _, err := strconv.Atoi(pid); err != nil {
			return false
		}
		_, err := os.Stat("/proc/" + pid)
		return os.IsNotExist(err)
	}
	spaces, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(spaces), "\n") {
		if f := strings.Fields(line); len(f) > 0 && gone(f[0]) {
			_ = run("ip", "netns", "del", f[0])
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(links), "\n") {
		if f := strings.SplitN(line, ": ", 3); len(f) > 1 {
			if name := strings.SplitN(f[1], "@", 2)[0]; gone(name) {
				_ = run("ip", "link", "del", name)
			}
		}
	}
}

// StartCluster starts etcd and the replicas (binary bin) under dir.
func StartCluster(dir, bin string, netns bool, leaseMs, ttlS int64) (*Cluster, error) {
	c := &Cluster{dir: dir, hostIP: "127.0.0.1", netns: netns}
	if netns {
		removeLeftovers()
		if err := c.makeNetwork(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.startEtcd(); err != nil {
		c.Close()
		return nil, err
	}
	var endpoints []string
	for i := range c.etcd {
		endpoints = append(endpoints, fmt.Sprintf("%s:%d", c.hostIP, c.etcdPort[2*i]))
	}
	for i := 0; i < replicaCount; i++ {
		ip := c.hostIP
		var prefix []string
		if netns {
			ip = c.nsIP(i)
			prefix = []string{"ip", "netns", "exec", c.spaces[i]}
		}
		// A namespace has its own ports: 7400, the default, is free there.
		port := 7400
		if !netns {
			port = freePort(ip)
		}
		listen := fmt.Sprintf("%s:%d", ip, port)
		argv := append(prefix, bin, "--listen", listen, "--log-level", "warn",
			"--store", "etcd://"+strings.Join(endpoints, ","),
			"--election-ttl-s", fmt.Sprint(ttlS), "--lease-ms", fmt.Sprint(leaseMs))
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("replica%d.log", i)))
		if err != nil {
			c.Close()
			return nil, err
		}
		p := &Proc{name: fmt.Sprintf("replica %d", i), argv: argv, log: log}
		c.Replicas = append(c.Replicas, p)
		c.Bases = append(c.Bases, "http://"+listen)
		if err := p.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range c.Replicas {
		if err := waitHealthy(c.Bases[i]+"/health", 20*time.Second); err != nil {
			c.Close()
			return nil, fmt.Errorf("replica %d: %v", i, err)
		}
	}
	return c, nil
}

func (c *Cluster) nsIP(i int) string {
	return strings.TrimSuffix(c.hostIP, ".1") + fmt.Sprintf(".%d", 11+i)
}

func (c *Cluster) makeNetwork() error {
	pid := os.Getpid()
	used, _ := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	third := -1
	for k := 0; k < 250; k++ {
		t := (pid+k)%250 + 1
		if !strings.Contains(string(used), fmt.Sprintf(" 10.98.%d.", t)) {
			third = t
			break
		}
	}
	if third < 0 {
		return fmt.Errorf("no free /24 in 10.98.0.0/16")
	}
	c.hostIP = fmt.Sprintf("10.98.%d.1", third)
	c.bridge = fmt.Sprintf("njb%d", pid)
	steps := [][]string{
		{"ip", "link", "add", c.bridge, "type", "bridge"},
		// Fixed: a bridge without a set MAC takes its lowest port's, which changes
		// as ports join and leaves stale ARP entries for the host behind.
		{"ip", "link", "set", c.bridge, "address", fmt.Sprintf("02:00:0a:62:%02x:01", third)},
		{"ip", "addr", "add", c.hostIP + "/24", "dev", c.bridge},
		{"ip", "link", "set", c.bridge, "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	for i := 0; i < replicaCount; i++ {
		ns := fmt.Sprintf("njn%dx%d", pid, i)
		outer, inner := fmt.Sprintf("njv%dx%d", pid, i), fmt.Sprintf("nji%dx%d", pid, i)
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
		c.spaces = append(c.spaces, ns)
		c.inner = append(c.inner, inner)
		steps := [][]string{
			{"ip", "link", "add", outer, "type", "veth", "peer", "name", inner},
			{"ip", "link", "set", inner, "netns", ns},
			{"ip", "link", "set", outer, "master", c.bridge},
			{"ip", "link", "set", outer, "up"},
			{"ip", "-n", ns, "addr", "add", c.nsIP(i) + "/24", "dev", inner},
			{"ip", "-n", ns, "link", "set", inner, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := run(s...); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) startEtcd() error {
	var members []string
	for i := 0; i < etcdCount; i++ {
		c.etcdPort = append(c.etcdPort, freePort(c.hostIP), freePort(c.hostIP))
		members = append(members, fmt.Sprintf("e%d=http://%s:%d", i, c.hostIP, c.etcdPort[2*i+1]))
	}
	for i := 0; i < etcdCount; i++ {
		client := fmt.Sprintf("http://%s:%d", c.hostIP, c.etcdPort[2*i])
		peer := fmt.Sprintf("http://%s:%d", c.hostIP, c.etcdPort[2*i+1])
		log, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("etcd%d.log", i)))
		if err != nil {
			return err
		}
		p := &Proc{name: fmt.Sprintf("etcd member %d", i), log: log, argv: []string{
			"etcd", "--name", fmt.Sprintf("e%d", i),
			"--data-dir", filepath.Join(c.dir, fmt.Sprintf("etcd%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(members, ","),
			"--initial-cluster-token", fmt.Sprintf("nj%d", os.Getpid()),
			"--log-level", "error"}}
		c.etcd = append(c.etcd, p)
		if err := p.start(); err != nil {
			return err
		}
	}
	for i := range c.etcd {
		url := fmt.Sprintf("http://%s:%d/health", c.hostIP, c.etcdPort[2*i])
		if err := waitHealthy(url, 30*time.Second); err != nil {
			return fmt.Errorf("etcd member %d: %v", i, err)
		}
	}
	return nil
}

func waitHealthy(url string, within time.Duration) error {
	client := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not healthy within %v", url, within)
}

// Close stops every process and deletes the network.
func (c *Cluster) Close() {
	for _, p := range append(append([]*Proc{}, c.Replicas...), c.etcd...) {
		p.kill()
		if p.log != nil {
			p.log.Close()
		}
	}
	for _, ns := range c.spaces {
		_ = run("ip", "netns", "del", ns)
	}
	if c.bridge != "" {
		_ = run("ip", "link", "del", c.bridge)
	}
}
