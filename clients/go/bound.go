package netaccel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// BindOptions are Bind's options; the zero value is fine.
type BindOptions struct {
	// Options connect to the bound node (TLS: the node's rac_tls address is used).
	Options *Options
	// RebindWait: how long a call that finds its binding stale waits for a new one
	// (0: 10 s); a lost node is noticed by the registry within one lease.
	RebindWait time.Duration
	// Instance: use this instance id instead of a new one.
	Instance string
	// UnreachableAfter: a call that has had no answer for this long is abandoned as if
	// its node could not be reached (KindClosed): reported to the registry, which moves
	// the instance to another node, and retried once on the new binding. For a node cut
	// off from its clients while the registry still reaches it. Set it above the longest
	// call the function makes (the call may run twice). 0: calls are not abandoned for
	// time.
	UnreachableAfter time.Duration
}

// Bound is an instance of a function bound through the registry. Calls go straight to
// the instance's node; a watcher follows migrations (long poll); a call that fails
// because its binding is stale (the node is gone, or no longer hosts the accelerator)
// waits for a new binding and is retried once; when the node could not be reached, the
// registry is told first (ReportUnreachable), so that the instance moves at once
// rather than when the node's lease runs out. Safe for concurrent use.
type Bound struct {
	registry    *Registry
	function    string
	accelerator string
	options     BindOptions
	stop        context.CancelFunc

	mu      sync.Mutex
	binding Binding
	client  *Client
	addr    string
}

// Bind binds an instance of function.
func Bind(ctx context.Context, registry *Registry, function string, options *BindOptions) (*Bound, error) {
	if options == nil {
		options = &BindOptions{}
	}
	f, err := registry.Function(ctx, function)
	if err != nil {
		return nil, err
	}
	b, err := registry.CreateInstance(ctx, function, InstanceSpec{ID: options.Instance})
	if err != nil {
		return nil, err
	}
	watch, stop := context.WithCancel(context.Background())
	bound := &Bound{registry: registry, function: function, accelerator: f.Accelerator, options: *options, stop: stop, binding: *b}
	go bound.watch(watch)
	return bound, nil
}

// Binding is the binding as last seen.
func (b *Bound) Binding() Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.binding
}

func (b *Bound) watch(ctx context.Context) {
	for ctx.Err() == nil {
		seen := b.Binding()
		next, err := b.registry.Instance(ctx, b.function, seen.ID, seen.Generation, watchWait)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		b.update(next)
	}
}

func (b *Bound) update(next *Binding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if next.Generation > b.binding.Generation {
		b.binding = *next
	}
}

// Call calls the function's accelerator with params on the bound node.
func (b *Bound) Call(ctx context.Context, params Params, payload []byte) ([]byte, error) {
	req := &Request{Accelerator: b.accelerator, Params: params, Payload: payload}
	binding := b.Binding()
	out, err := b.callOn(ctx, binding, req)
	if err == nil || !stale(err) {
		return out, err
	}
	if unreachable(err) {
		b.reportUnreachable(ctx, binding)
	}
	fresh, rerr := b.rebind(ctx, binding)
	if rerr != nil {
		return nil, rerr
	}
	return b.callOn(ctx, fresh, req)
}

// stale: the failure says the binding is out of date rather than the call wrong.
func stale(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Kind {
	case KindConnect, KindClosed, KindUnknownAccelerator, KindUnavailable:
		return true
	}
	return false
}

// unreachable: the call failed at the transport (no connection, or it ended or went
// silent before the result), not with a status the node answered.
func unreachable(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Kind == KindConnect || e.Kind == KindClosed)
}

// reportUnreachable tells the registry this client cannot reach binding's node, unless
// the instance has moved already, and keeps the binding the registry answers. A failed
// report changes nothing: the rebind waits as it would have.
func (b *Bound) reportUnreachable(ctx context.Context, binding Binding) {
	if !binding.Bound() || b.Binding().Generation != binding.Generation {
		return
	}
	if fresh, err := b.registry.ReportUnreachable(ctx, b.function, binding.ID, binding.Generation); err == nil {
		b.update(fresh)
	}
}

func (b *Bound) rebind(ctx context.Context, stale Binding) (Binding, error) {
	wait := b.options.RebindWait
	if wait == 0 {
		wait = 10 * time.Second
	}
	until := time.Now().Add(wait)
	for {
		if current := b.Binding(); current.Generation > stale.Generation && current.Bound() {
			return current, nil
		}
		left := time.Until(until)
		if left <= 0 {
			return stale, &Error{Kind: KindUnavailable, RetryAfter: RetryAfter, Message: "instance " + stale.ID + " got no new binding in the wait"}
		}
		next, err := b.registry.Instance(ctx, b.function, stale.ID, stale.Generation, min(left, watchWait))
		if err == nil {
			b.update(next)
		} else if ctx.Err() != nil {
			return stale, ctxError(ctx)
		}
	}
}

func (b *Bound) callOn(ctx context.Context, binding Binding, req *Request) ([]byte, error) {
	if !binding.Bound() {
		return nil, &Error{Kind: KindUnavailable, RetryAfter: RetryAfter, Message: "instance " + binding.ID + " is not bound to a slot"}
	}
	addr := *binding.RAC
	opts := b.options.Options
	if opts != nil && opts.TLS != nil {
		if binding.RACTLS == nil {
			return nil, &Error{Kind: KindConnect, Message: "the node of instance " + binding.ID + " has no RAC-over-TLS listener"}
		}
		addr = *binding.RACTLS
	}
	client, err := b.clientFor(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	out, err := b.do(ctx, client, addr, req)
	if stale(err) {
		b.drop(client)
	}
	return out, err
}

// do makes the call on client, abandoned (KindClosed) when it has had no answer for
// UnreachableAfter. A timer cancels it rather than a context deadline, which the
// client would send to the node as the call's own deadline.
func (b *Bound) do(ctx context.Context, client *Client, addr string, req *Request) ([]byte, error) {
	after := b.options.UnreachableAfter
	if after <= 0 {
		return client.Do(ctx, req)
	}
	call, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool
	timer := time.AfterFunc(after, func() { silent.Store(true); cancel() })
	out, err := client.Do(call, req)
	timer.Stop()
	if err != nil && silent.Load() && ctx.Err() == nil {
		return nil, &Error{Kind: KindClosed, Message: fmt.Sprintf("no answer from %s within %v (BindOptions.UnreachableAfter)", addr, after), Err: err}
	}
	return out, err
}

func (b *Bound) clientFor(ctx context.Context, addr string, opts *Options) (*Client, error) {
	b.mu.Lock()
	if b.client != nil && b.addr == addr {
		c := b.client
		b.mu.Unlock()
		return c, nil
	}
	b.mu.Unlock()
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client != nil {
		b.client.Close()
	}
	b.client, b.addr = c, addr
	return c, nil
}

func (b *Bound) drop(c *Client) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client == c {
		c.Close()
		b.client = nil
	}
}

// Close stops following the binding and closes the connection; the instance stays.
func (b *Bound) Close() {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client != nil {
		b.client.Close()
		b.client = nil
	}
}

// Release deletes the instance from the registry and closes the Bound.
func (b *Bound) Release(ctx context.Context) error {
	b.Close()
	return b.registry.DeleteInstance(ctx, b.function, b.Binding().ID)
}
