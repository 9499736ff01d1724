package netaccel

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ResultPayloadMax is the largest result payload the client accepts (a 4096² matmul
// result is 64 MiB).
const ResultPayloadMax = 1 << 30

// readBufferLen is the read side's buffer: many pipelined results per read call.
const readBufferLen = 64 << 10

// copyMax: a payload up to this long is copied behind its header into the client's
// write buffer (one write); a longer one goes out with the header in one writev.
const copyMax = 16 << 10

// InFlightMaxDefault is the bound on calls in flight when Options says 0: the node's
// own bound per connection (rac_in_flight_max).
const InFlightMaxDefault = 32

// Options say how to connect. The zero value (or nil) is plain TCP, no tenant.
type Options struct {
	// TLS, when set, speaks TLS to the node's RAC-over-TLS listener: RootCAs to trust,
	// Certificates for a node that wants client certificates (mutual TLS). ServerName
	// defaults to the host of the address.
	TLS *tls.Config
	// Tenant and Token: say hello as this tenant after connecting.
	Tenant, Token string
	// InFlightMax bounds the calls in flight; Go waits for room. 0: InFlightMaxDefault.
	InFlightMax int
}

// Request is one call.
type Request struct {
	// Accelerator is a built-in's name; or leave it empty and give ID (user
	// accelerators, models) with RawParams.
	Accelerator string
	ID          uint16
	Params      Params
	RawParams   [ParamsLen]byte
	Payload     []byte
	// Deadline: the call must start executing within this long of reaching the node,
	// else it is answered DEADLINE_EXCEEDED and never runs. 0: the context's deadline,
	// if it has one.
	Deadline time.Duration
}

type outcome struct {
	header  ResultHeader
	payload []byte
	err     error
}

// Client is one connection to a node. It is safe for concurrent use: any number of
// goroutines may call at once, their calls pipelined on the connection and each
// result matched to its call by request id.
//
// A call costs one write (header and payload from one buffer), no goroutine and, in
// the steady state, two allocations: its Pending and its output. The reply channels
// are reused (replies, bounded by the in-flight bound like slots). Results are read
// by the goroutines that wait for them (reader.go).
type Client struct {
	conn    net.Conn
	writeMu sync.Mutex
	wbuf    []byte            // under writeMu: a header and a payload of at most copyMax
	slots   chan struct{}     // one token per call in flight
	replies chan chan outcome // reply channels known empty, for reuse
	nextID  atomic.Uint32
	unread  atomic.Int64 // bytes of calls written since results were last read

	// role holds the reader role's token while no goroutine reads results; the
	// fields below it belong to the goroutine holding the role.
	role       chan struct{}
	rbuf       []byte // results read: rbuf[rpos:rend] is not yet parsed
	rpos, rend int
	part       *partial // a payload longer than rbuf, being read

	mu      sync.Mutex
	waiting map[uint32]chan outcome
	closed  error // set once the stream failed: no call is sent after
}

// Dial connects to a node's RAC listener at addr (HOST:PORT).
func Dial(ctx context.Context, addr string, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &Error{Kind: KindConnect, Message: "cannot connect to " + addr, Err: err}
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true)
	}
	if opts.TLS != nil {
		config := opts.TLS.Clone()
		if config.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			config.ServerName = host
		}
		tconn := tls.Client(conn, config)
		if err := tconn.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, &Error{Kind: KindConnect, Message: "TLS handshake with " + addr, Err: err}
		}
		conn = tconn
	}
	bound := opts.InFlightMax
	if bound <= 0 {
		bound = InFlightMaxDefault
	}
	c := &Client{
		conn:    conn,
		wbuf:    make([]byte, 0, HeaderLen+copyMax),
		slots:   make(chan struct{}, bound),
		replies: make(chan chan outcome, bound),
		waiting: make(map[uint32]chan outcome, bound),
		role:    make(chan struct{}, 1),
		rbuf:    make([]byte, readBufferLen),
	}
	c.role <- struct{}{}
	if opts.Tenant != "" {
		if _, err := c.Control(ctx, map[string]any{"op": "hello", "tenant": opts.Tenant, "token": opts.Token}); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close closes the connection; calls in flight fail with KindClosed.
func (c *Client) Close() error { return c.conn.Close() }

// Call calls built-in accelerator name with params by name and waits for its output.
func (c *Client) Call(ctx context.Context, name string, params Params, payload []byte) ([]byte, error) {
	return c.Do(ctx, &Request{Accelerator: name, Params: params, Payload: payload})
}

// Do makes one call and waits for its output.
func (c *Client) Do(ctx context.Context, r *Request) ([]byte, error) {
	return c.Go(ctx, r).Wait(ctx)
}

// Pending is a call in flight.
type Pending struct {
	c    *Client
	id   uint32
	ch   chan outcome
	err  error // a call that could not be sent
	once sync.Once
	out  outcome
}

// Go sends a call without waiting for its result (waiting for room when
// InFlightMax calls are in flight); Wait gives the result.
func (c *Client) Go(ctx context.Context, r *Request) *Pending {
	id, params := r.ID, r.RawParams
	if r.Accelerator != "" {
		var err error
		if id, params, err = EncodeParams(r.Accelerator, r.Params); err != nil {
			return &Pending{err: err}
		}
	}
	h := CallHeader{AccelID: id, PayloadLen: uint32(len(r.Payload)), Params: params, DeadlineUs: deadlineUs(ctx, r.Deadline)}
	return c.send(ctx, h, r.Payload)
}

// Control sends a control message (spec/rac-v1.md, "Control messages") and returns
// its JSON answer.
func (c *Client) Control(ctx context.Context, message map[string]any) (json.RawMessage, error) {
	payload, err := json.Marshal(message)
	if err != nil {
		return nil, &Error{Kind: KindBadRequest, Message: err.Error()}
	}
	h := CallHeader{Control: true, AccelID: ControlID, PayloadLen: uint32(len(payload))}
	out, err := c.send(ctx, h, payload).Wait(ctx)
	return json.RawMessage(out), err
}

func deadlineUs(ctx context.Context, d time.Duration) uint32 {
	if d == 0 {
		if at, ok := ctx.Deadline(); ok {
			d = time.Until(at)
			if d <= 0 {
				d = time.Microsecond
			}
		}
	}
	us := d.Microseconds()
	if d > 0 && us == 0 {
		us = 1
	}
	if us > 0xFFFFFFFF {
		us = 0xFFFFFFFF
	}
	return uint32(us)
}

func (c *Client) send(ctx context.Context, h CallHeader, payload []byte) *Pending {
	// A context that cannot end (Done is nil) needs no select: a plain channel
	// operation is cheaper, here and in Wait.
	if done := ctx.Done(); done == nil {
		c.slots <- struct{}{}
	} else {
		select {
		case c.slots <- struct{}{}:
		case <-done:
			return &Pending{err: ctxError(ctx)}
		}
	}
	p := &Pending{c: c, ch: c.reply()}
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		<-c.slots
		p.err = c.closed
		return p
	}
	for {
		p.id = c.nextID.Add(1)
		if _, taken := c.waiting[p.id]; p.id != 0 && !taken {
			break
		}
	}
	c.waiting[p.id] = p.ch
	c.mu.Unlock()
	h.RequestID = p.id
	c.write(&h, payload)
	return p
}

// write sends one call in one write. A failed write is not the call's answer: the
// node may have answered and closed (TOO_LARGE), and its answer, if it comes, is;
// otherwise the goroutine reading fails the call when the stream ends, which a
// failed write means it does.
func (c *Client) write(h *CallHeader, payload []byte) {
	if c.unread.Add(int64(HeaderLen+len(payload))) > readAheadMax {
		c.help()
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	head := h.Encode()
	if len(payload) <= copyMax {
		c.wbuf = append(append(c.wbuf[:0], head[:]...), payload...)
		_, _ = c.conn.Write(c.wbuf)
		return
	}
	c.wbuf = append(c.wbuf[:0], head[:]...)
	bufs := net.Buffers{c.wbuf, payload}
	_, _ = bufs.WriteTo(c.conn)
}

// reply is a reply channel for a call: a reused one, or a new one.
func (c *Client) reply() chan outcome {
	select {
	case ch := <-c.replies:
		return ch
	default:
		return make(chan outcome, 1)
	}
}

// recycle keeps ch for another call; only a channel whose result was received is
// known empty (an abandoned call's may still get its result).
func (c *Client) recycle(ch chan outcome) {
	select {
	case c.replies <- ch:
	default:
	}
}

func ctxError(ctx context.Context) *Error {
	return &Error{Kind: KindDeadline, Message: "the context ended before the result", Err: ctx.Err()}
}

// Wait gives the call's output, or its error: a *Error with the node's status, or
// KindDeadline when ctx ends first (the call is abandoned; its result is dropped).
func (p *Pending) Wait(ctx context.Context) ([]byte, error) {
	if p.err != nil {
		return nil, p.err
	}
	p.once.Do(func() {
		p.out = p.c.await(ctx, p)
		<-p.c.slots
	})
	if p.out.err != nil {
		return nil, p.out.err
	}
	if p.out.header.Status != StatusOK {
		return nil, statusError(p.out.header.Status, string(p.out.payload))
	}
	return p.out.payload, nil
}

// Result is the result header of a call that completed (zero before Wait returns).
func (p *Pending) Result() ResultHeader { return p.out.header }

func (c *Client) forget(id uint32) {
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}
