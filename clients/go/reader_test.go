package netaccel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// scriptedNode accepts one connection, reads `calls` calls, then runs answer on it
// with their headers.
func scriptedNode(t *testing.T, calls int, answer func(net.Conn, []CallHeader)) string {
	return oneConnNode(t, func(conn net.Conn) {
		var got []CallHeader
		for len(got) < calls {
			head := make([]byte, HeaderLen)
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			h, _ := DecodeCallHeader(head)
			if _, err := io.CopyN(io.Discard, conn, int64(h.PayloadLen)); err != nil {
				return
			}
			got = append(got, h)
		}
		answer(conn, got)
	})
}

func result(h CallHeader, payload []byte) []byte {
	r := (&ResultHeader{Status: StatusOK, PayloadLen: uint32(len(payload)), RequestID: h.RequestID, AccelID: h.AccelID}).Encode()
	return append(r[:], payload...)
}

// A waiter whose context ends while it reads for everyone stops at once, and what it
// had read of a result is not lost: the next waiter gets that result whole.
func TestAnInterruptedReaderLosesNoBytes(t *testing.T) {
	second := bytes.Repeat([]byte("b"), 1000)
	addr := scriptedNode(t, 2, func(conn net.Conn, calls []CallHeader) {
		b := result(calls[1], second)
		conn.Write(b[:30]) // part of the second call's header
		time.Sleep(time.Second)
		conn.Write(append(b[30:], result(calls[0], []byte("a"))...))
		time.Sleep(time.Second)
	})
	ctx := context.Background()
	c, err := Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := c.Go(ctx, &Request{Accelerator: "echo", Payload: []byte("a")})
	next := c.Go(ctx, &Request{Accelerator: "echo", Payload: second})
	short, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	started := time.Now()
	_, err = first.Wait(short)
	var e *Error
	// Well before the rest of the result comes (1 s), however loaded the machine.
	if !errors.As(err, &e) || e.Kind != KindDeadline || time.Since(started) > 800*time.Millisecond {
		t.Fatalf("cancelled after %v: %v", time.Since(started), err)
	}
	out, err := next.Wait(ctx)
	if err != nil || !bytes.Equal(out, second) {
		t.Fatalf("the second call: %d bytes, %v", len(out), err)
	}
}

// Calls sent without waiting do not block forever behind results nobody reads: this
// node, like the real one, reads no more calls while a result is unwritten.
func TestCallsSentWithoutWaitingDoNotDeadlock(t *testing.T) {
	const calls, callLen, resultLen = 16, 256 << 10, 4 << 20
	addr := oneConnNode(t, func(conn net.Conn) {
		big := make([]byte, resultLen)
		head := make([]byte, HeaderLen)
		for {
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			h, _ := DecodeCallHeader(head)
			if _, err := io.CopyN(io.Discard, conn, int64(h.PayloadLen)); err != nil {
				return
			}
			if _, err := conn.Write(result(h, big)); err != nil {
				return
			}
		}
	})
	ctx := context.Background()
	c, err := Dial(ctx, addr, &Options{InFlightMax: calls})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := make(chan []*Pending, 1)
	go func() {
		var pending []*Pending
		for i := 0; i < calls; i++ {
			pending = append(pending, c.Go(ctx, &Request{Accelerator: "echo", Payload: make([]byte, callLen)}))
		}
		sent <- pending
	}()
	select {
	case pending := <-sent:
		for i, p := range pending {
			if out, err := p.Wait(ctx); err != nil || len(out) != resultLen {
				t.Fatalf("call %d: %d bytes, %v", i, len(out), err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sending blocked: nobody read the results")
	}
}
