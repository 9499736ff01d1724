package main

// A client of the replicated registry, as the project's clients behave (spec/
// registry-api.md, "Errors"): a write goes to a replica; `503 NOT_LEADER` sends it on
// to the `Location` given, or to the next replica; a replica that refuses the
// connection is skipped. What makes this client a Jepsen client is the verdict it
// records for each operation:
//
//   - ok:   an answer that says what happened (2xx, and the 404 and 409 that say
//     why nothing was done);
//   - fail: every attempt certainly left the state as it was (refused connections,
//     NOT_LEADER, the registry's own "too many requests" and "not the leader");
//   - info: an attempt may have taken effect (a timeout or a reset after the request
//     was sent, a 5xx that does not say) — the operation is then open forever in
//     the checker's eyes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Attempt bounds: one request, and one operation with its retries.
const (
	requestTimeout = 2 * time.Second
	dialTimeout    = 300 * time.Millisecond
	operationMax   = 4 * time.Second
	retryPause     = 50 * time.Millisecond
)

// Client sends operations to the replicas and records them.
type Client struct {
	id        int
	bases     []string
	preferred atomic.Int32
	http      *http.Client
	rec       *Recorder
}

// NewClient: one client, numbered id, of the replicas at bases, asking replica
// first first.
func NewClient(id int, bases []string, first int, rec *Recorder) *Client {
	dialer := &net.Dialer{Timeout: dialTimeout}
	transport := &http.Transport{
		DialContext: dialer.DialContext,
		// A new connection per request: a refused connection then proves the
		// request was never seen, where a reused one that breaks proves nothing.
		DisableKeepAlives: true,
	}
	c := &Client{
		id:    id,
		bases: bases,
		rec:   rec,
		http: &http.Client{
			Transport: transport,
			Timeout:   requestTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
	c.preferred.Store(int32(first))
	return c
}

// answer is one attempt's outcome.
type answer struct {
	status   int
	body     []byte
	code     string // the error body's code
	text     string // the error body's sentence
	location string
	err      error
	dialed   bool // false: the connection was refused, nothing was sent
}

func (c *Client) attempt(method, url string, body []byte) answer {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, reader)
	if err != nil {
		panic(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var op *net.OpError
		dialFailed := errors.As(err, &op) && op.Op == "dial"
		return answer{err: err, dialed: !dialFailed}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{err: err, dialed: true}
	}
	a := answer{status: resp.StatusCode, body: data, location: resp.Header.Get("Location"), dialed: true}
	if resp.StatusCode >= 400 {
		var e struct{ Error, Code string }
		if json.Unmarshal(data, &e) == nil {
			a.code, a.text = e.Code, e.Error
		}
	}
	return a
}

// certainlyNotApplied: the attempt left the state as it was.
func (a answer) certainlyNotApplied() bool {
	if !a.dialed {
		return true
	}
	if a.err != nil || a.status != 503 {
		return false
	}
	if a.code == "NOT_LEADER" {
		return true
	}
	if strings.Contains(a.text, " was created, but ") {
		// A POST whose creation was stored and whose placement failed: the reason
		// it quotes may be one of those below, but the creation stands.
		return false
	}
	for _, why := range []string{"as many requests", "not the leader", "lease ended", "may have run out"} {
		if strings.Contains(a.text, why) {
			return true
		}
	}
	return false
}

// baseOf: the replica a Location points at, or -1.
func (c *Client) baseOf(location string) int {
	for i, b := range c.bases {
		if strings.HasPrefix(location, b+"/") {
			return i
		}
	}
	return -1
}

// Do runs one operation (recorded as r with its invocation and completion);
// ok reports a definite answer, with its status and body.
func (c *Client) Do(r Record, method, path string, body []byte) (answer, string) {
	r.Client = c.id
	op := c.rec.Invoke(r)
	a, replica, verdict := c.run(method, path, body, isRead(r.F))
	if verdict == TypeOK && a.status == 404 && (r.F == FPutFn ||
		(r.F == FPostInst && !strings.HasPrefix(a.text, "there is no function"))) {
		// The write was done, then undone by a concurrent delete before the answer
		// was read back (ops.rs commits, allocates, then reads the result): what the
		// answer says is not the write's effect. Only "there is no function" says
		// the creation was refused.
		verdict = TypeInfo
	}
	done := Record{Type: verdict, Op: op, Client: c.id, F: r.F, Fn: r.Fn, Inst: r.Inst,
		Node: r.Node, Replica: replica, Status: a.status}
	if a.err != nil {
		done.Error = a.err.Error()
	} else if a.status >= 400 {
		done.Error = a.code + ": " + a.text
	}
	if verdict == TypeOK {
		done.Binding, done.Doc = decodeResult(r.F, a)
	}
	c.rec.Write(done)
	return a, verdict
}

// run tries the replicas until one answers; the last answer, who gave it, and the
// verdict.
func (c *Client) run(method, path string, body []byte, read bool) (answer, string, string) {
	deadline := time.Now().Add(operationMax)
	next := int(c.preferred.Load())
	var last answer
	for time.Now().Before(deadline) {
		base := c.bases[next]
		a := c.attempt(method, base+path, body)
		last = a
		switch {
		case a.err == nil && a.status < 500:
			if !read {
				// Only a write proves which replica leads: reads go there too.
				c.preferred.Store(int32(next))
			}
			return a, base, TypeOK
		case read || a.certainlyNotApplied():
			// Try where the replica sends us, else the next one.
			if i := c.baseOf(a.location); i >= 0 && i != next {
				next = i
			} else {
				next = (next + 1) % len(c.bases)
				time.Sleep(retryPause)
			}
		default:
			return a, base, TypeInfo
		}
	}
	if read {
		return last, "", TypeInfo
	}
	return last, "", TypeFail
}

func decodeResult(f string, a answer) (*Binding, *FnDoc) {
	if a.status != 200 && a.status != 201 {
		return nil, nil
	}
	switch f {
	case FPostInst, FGetInst:
		var b Binding
		if json.Unmarshal(a.body, &b) != nil {
			return nil, nil
		}
		return &b, nil
	case FGetFn:
		var d FnDoc
		if json.Unmarshal(a.body, &d) != nil {
			return nil, nil
		}
		return nil, &d
	}
	return nil, nil
}

// Leader asks each replica's /metrics whether it leads; the index of the one that
// does, or -1.
func Leader(bases []string) int {
	client := &http.Client{Timeout: 500 * time.Millisecond}
	found := -1
	for i, b := range bases {
		resp, err := client.Get(b + "/metrics")
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(data), "\nnetaccel_registry_leader 1") {
			if found >= 0 {
				return -1 // two claim it: ask again later
			}
			found = i
		}
	}
	return found
}

func mustJSON(v interface{}) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cannot encode %v: %v", v, err))
	}
	return data
}
