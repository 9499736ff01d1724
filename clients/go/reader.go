package netaccel

// The read side of a Client. It has no goroutine of its own: a goroutine that waits
// for a result which has not come takes the reader role (one token, Client.role),
// reads results off the connection, hands each other call's result to its reply
// channel and stops at its own; then it gives the role back, to the next goroutine
// that waits. A synchronous caller, or one goroutine keeping calls in flight, thus
// reads its own results: no hand-over from a reader goroutine to the caller for
// each result (the cost that held the pipelined rate at 0.81x the Rust client's).
//
// One exception keeps a caller that sends without waiting from blocking forever:
// the node stops reading a connection while its results are unread (TCP
// back-pressure both ways), so once readAheadMax bytes of calls went out with no
// goroutine reading, the writer starts a helper goroutine that holds the role until
// no call waits for a result.
//
// Not here: the wire format (rac.go) and sending (client.go).

import (
	"context"
	"errors"
	"os"
	"time"
)

// readAheadMax is how many bytes of calls may be written while no goroutine reads
// results before a helper starts reading: well below what the kernel's socket
// buffers hold on both ends (Linux's defaults are 128 KiB and more each), so the
// node never has to stop reading for unread results before the helper runs.
const readAheadMax = 64 << 10

// partial is a result whose payload is longer than the read buffer, read straight
// into its own slice; n bytes of it have come.
type partial struct {
	header  ResultHeader
	payload []byte
	n       int
}

// await gives p's outcome: from its reply channel, or read off the connection by
// this goroutine when the reader role is free.
func (c *Client) await(ctx context.Context, p *Pending) outcome {
	// A result already handed over comes first (a select picks at random among
	// ready cases).
	select {
	case out := <-p.ch:
		c.recycle(p.ch)
		return out
	default:
	}
	if done := ctx.Done(); done == nil {
		select {
		case out := <-p.ch:
			c.recycle(p.ch)
			return out
		case <-c.role:
		}
	} else {
		select {
		case out := <-p.ch:
			c.recycle(p.ch)
			return out
		case <-c.role:
		case <-done:
			c.forget(p.id)
			return outcome{err: ctxError(ctx)}
		}
	}
	return c.readFor(ctx, p)
}

// readFor reads results with the reader role held until p's comes, ctx ends or the
// stream fails, handing the others' results over; then it gives the role back.
func (c *Client) readFor(ctx context.Context, p *Pending) outcome {
	defer func() { c.role <- struct{}{} }()
	// The result may have been handed over between the select and taking the role.
	select {
	case out := <-p.ch:
		c.recycle(p.ch)
		return out
	default:
	}
	if ctx.Done() != nil {
		// A read blocked in the kernel sees no context: the context's end sets a
		// read deadline in the past, which ends the read with a timeout.
		stop := context.AfterFunc(ctx, c.interruptRead)
		defer stop()
	}
	for {
		h, payload, why := c.next()
		switch {
		case why == nil && h.RequestID == p.id:
			c.forget(p.id)
			c.recycle(p.ch)
			return outcome{header: h, payload: payload}
		case why == nil:
			why = c.deliver(h, payload)
		case why == errInterrupted && ctx.Err() != nil:
			c.forget(p.id)
			return outcome{err: ctxError(ctx)}
		case why == errInterrupted:
			// Another caller's context ended (its interrupt may come late): read on.
			why = nil
		}
		if why != nil {
			c.fail(why)
			return <-p.ch // fail answered every call waiting, p's among them
		}
	}
}

// help starts a helper goroutine that reads results while no other goroutine does
// (see the file's doc); a no-op while one does.
func (c *Client) help() {
	select {
	case <-c.role:
	default:
		return
	}
	go func() {
		defer func() { c.role <- struct{}{} }()
		for {
			c.mu.Lock()
			idle := len(c.waiting) == 0 || c.closed != nil
			c.mu.Unlock()
			if idle {
				return
			}
			h, payload, why := c.next()
			switch {
			case why == nil:
				why = c.deliver(h, payload)
			case why == errInterrupted:
				why = nil
			}
			if why != nil {
				c.fail(why)
				return
			}
		}
	}()
}

// errInterrupted: a read ended by interruptRead, not by the stream.
var errInterrupted = &Error{Kind: KindDeadline, Message: "the read was interrupted"}

func (c *Client) interruptRead() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) }

// next gives the next result off the connection; the caller holds the reader role.
// What was read stays in c.rbuf (and a long payload in c.part) when a read is
// interrupted, so an interrupted read loses nothing.
func (c *Client) next() (ResultHeader, []byte, *Error) {
	for {
		if p := c.part; p != nil && p.n == len(p.payload) {
			c.part = nil
			return p.header, p.payload, nil
		}
		if c.part == nil && c.rend-c.rpos >= HeaderLen {
			h, err := DecodeResultHeader(c.rbuf[c.rpos:c.rpos+HeaderLen], ResultPayloadMax)
			if err != nil {
				return h, nil, &Error{Kind: KindProtocol, Message: "the node sent a result this client refuses", Err: err}
			}
			body := c.rbuf[c.rpos+HeaderLen : c.rend]
			if len(body) >= int(h.PayloadLen) || HeaderLen+int(h.PayloadLen) > len(c.rbuf) {
				payload := make([]byte, h.PayloadLen)
				n := copy(payload, body)
				c.rpos += HeaderLen + n
				if n == len(payload) {
					return h, payload, nil
				}
				c.part = &partial{header: h, payload: payload, n: n}
			}
		}
		if why := c.fill(); why != nil {
			return ResultHeader{}, nil, why
		}
	}
}

// fill reads once: into the long payload being read, else into the read buffer
// after what is left of it.
func (c *Client) fill() *Error {
	var n int
	var err error
	if p := c.part; p != nil {
		n, err = c.conn.Read(p.payload[p.n:])
		p.n += n
	} else {
		if c.rpos > 0 {
			c.rend = copy(c.rbuf, c.rbuf[c.rpos:c.rend])
			c.rpos = 0
		}
		if c.rend == len(c.rbuf) {
			panic("netaccel: the read buffer is full before a result's header and payload")
		}
		n, err = c.conn.Read(c.rbuf[c.rend:])
		c.rend += n
	}
	if n > 0 {
		c.unread.Store(0)
		return nil // an error with data comes again on the next read
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		if err := c.conn.SetReadDeadline(time.Time{}); err != nil {
			return &Error{Kind: KindClosed, Message: "the connection closed before the result", Err: err}
		}
		return errInterrupted
	case c.part == nil && c.rpos == c.rend:
		return &Error{Kind: KindClosed, Message: "the connection closed before the result", Err: err}
	default:
		return &Error{Kind: KindClosed, Message: "the connection closed in the middle of a result", Err: err}
	}
}

// deliver hands a result to its call's reply channel; an answer to the whole
// connection (request id 0: BUSY at the node's connection bound, an unreadable
// call) is every call's answer, returned.
func (c *Client) deliver(h ResultHeader, payload []byte) *Error {
	c.mu.Lock()
	ch, ok := c.waiting[h.RequestID]
	delete(c.waiting, h.RequestID)
	c.mu.Unlock()
	switch {
	case ok:
		ch <- outcome{header: h, payload: payload} // never blocks: one result per channel
	case h.RequestID == 0 && h.Status != StatusOK:
		return statusError(h.Status, string(payload))
	}
	return nil
}

// fail ends the connection: every call waiting gets why, and no call is sent after.
func (c *Client) fail(why *Error) {
	c.conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == nil {
		c.closed = why
	}
	for id, ch := range c.waiting {
		ch <- outcome{err: why}
		delete(c.waiting, id)
	}
}
