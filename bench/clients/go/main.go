// Command bench is the Go client's program of bench/clients/run.sh: 64-byte echo
// calls on one connection, one at a time (p50), then --inflight calls in flight on the
// same connection, sent with Client.Go and waited for oldest first (calls/s), as the
// Rust program does; prints one JSON line with the sync calls' allocations per call.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"time"

	"netaccel.dev/client"
)

func main() {
	node := flag.String("node", "", "HOST:PORT")
	seconds := flag.Float64("seconds", 2, "seconds per measurement")
	size := flag.Int("size", 64, "payload bytes")
	inflight := flag.Int("inflight", 32, "calls in flight")
	flag.Parse()
	ctx := context.Background()
	c, err := netaccel.Dial(ctx, *node, &netaccel.Options{InFlightMax: *inflight})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	payload := make([]byte, *size)
	span := time.Duration(*seconds * float64(time.Second))
	req := &netaccel.Request{Accelerator: "echo", Payload: payload}
	var lat []time.Duration
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for start := time.Now(); time.Since(start) < span; {
		t := time.Now()
		if _, err := c.Do(ctx, req); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		lat = append(lat, time.Since(t))
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	// Pipelined: --inflight calls sent (Client.Go: one write each, no goroutine per
	// call), the oldest waited for and another sent in its place, as the Rust
	// program does.
	ring := make([]*netaccel.Pending, *inflight)
	done := 0
	wait := func(p *netaccel.Pending) {
		if _, err := p.Wait(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		done++
	}
	start := time.Now()
	for i := 0; time.Since(start) < span; i++ {
		slot := i % len(ring)
		if ring[slot] != nil {
			wait(ring[slot])
		}
		ring[slot] = c.Go(ctx, req)
	}
	for i, p := range ring {
		if p != nil {
			wait(p)
			ring[i] = nil
		}
	}
	line, _ := json.Marshal(map[string]any{
		"client":                "go",
		"sync_p50_us":           float64(lat[len(lat)/2].Nanoseconds()) / 1000,
		"sync_calls":            len(lat),
		"pipelined_calls_per_s": float64(done) / time.Since(start).Seconds(),
		"allocs_per_call":       float64(after.Mallocs-before.Mallocs) / float64(len(lat)),
	})
	fmt.Println(string(line))
}
