package netaccel

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
)

// echoNode answers every call with its own payload, in order, until the client
// closes; it is the node of the allocation test and the benchmarks.
func echoNode(t testing.TB) string {
	return oneConnNode(t, func(conn net.Conn) {
		r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
		head := make([]byte, HeaderLen)
		var payload []byte
		var res [HeaderLen]byte // outside the loop: one allocation, not one per call
		for {
			if _, err := io.ReadFull(r, head); err != nil {
				return
			}
			h, err := DecodeCallHeader(head)
			if err != nil {
				return
			}
			if cap(payload) < int(h.PayloadLen) {
				payload = make([]byte, h.PayloadLen)
			}
			payload = payload[:h.PayloadLen]
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			res = (&ResultHeader{Status: StatusOK, PayloadLen: h.PayloadLen, RequestID: h.RequestID, AccelID: h.AccelID, Slot: NoSlot}).Encode()
			w.Write(res[:])
			w.Write(payload)
			if r.Buffered() == 0 {
				if w.Flush() != nil {
					return
				}
			}
		}
	})
}

func dialEcho(t testing.TB) *Client {
	c, err := Dial(context.Background(), echoNode(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A synchronous call allocates its Pending and its output and nothing else in the
// steady state (the bound: at most 2 per call; it was 8).
func TestASyncCallAllocatesAtMostTwice(t *testing.T) {
	c := dialEcho(t)
	ctx := context.Background()
	req := &Request{Accelerator: "echo", Payload: make([]byte, 64)}
	call := func() {
		if out, err := c.Do(ctx, req); err != nil || len(out) != 64 {
			t.Fatalf("%d bytes, %v", len(out), err)
		}
	}
	for i := 0; i < 100; i++ {
		call() // warm: the reply channel pool, the map, the buffers
	}
	if allocs := testing.AllocsPerRun(2000, call); allocs > 2 {
		t.Fatalf("%.1f allocations per call, want at most 2", allocs)
	}
}

func BenchmarkSyncCall(b *testing.B) {
	c := dialEcho(b)
	ctx := context.Background()
	req := &Request{Accelerator: "echo", Payload: make([]byte, 64)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := c.Do(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// Pipelined: InFlightMaxDefault calls in flight from one goroutine, the oldest waited
// for and another sent in its place (what bench/clients/go does).
func BenchmarkPipelined(b *testing.B) {
	c := dialEcho(b)
	ctx := context.Background()
	req := &Request{Accelerator: "echo", Payload: make([]byte, 64)}
	ring := make([]*Pending, InFlightMaxDefault)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		slot := i % len(ring)
		if p := ring[slot]; p != nil {
			if _, err := p.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		ring[slot] = c.Go(ctx, req)
	}
	for _, p := range ring {
		if p != nil {
			p.Wait(ctx)
		}
	}
}
