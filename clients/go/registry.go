package netaccel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Binding says where an instance of a function runs (spec/registry/binding.json).
type Binding struct {
	ID         string  `json:"id"`
	Function   string  `json:"function"`
	Node       *string `json:"node"`
	Device     *string `json:"device"`
	Slot       *uint16 `json:"slot"`
	HTTP       *string `json:"http"`
	RAC        *string `json:"rac"`
	OpenCL     *string `json:"opencl"`
	HTTPS      *string `json:"https"`
	RACTLS     *string `json:"rac_tls"`
	GRPC       *string `json:"grpc"`
	GRPCTLS    *string `json:"grpc_tls"`
	Generation uint64  `json:"generation"`
	Pinned     bool    `json:"pinned,omitempty"`
}

// Bound: the binding names a slot (a node serves the instance).
func (b *Binding) Bound() bool { return b.Slot != nil && b.RAC != nil }

// Query narrows where a function's instances may run.
type Query struct {
	Backend *string `json:"backend"`
	Vendor  *string `json:"vendor"`
	Node    *string `json:"node"`
}

// Function is the registry's function document (spec/registry/function.json).
type Function struct {
	Name        string    `json:"name"`
	Accelerator string    `json:"accelerator"`
	Hash        *string   `json:"hash"`
	Query       Query     `json:"query"`
	Instances   []Binding `json:"instances"`
}

// InstanceSpec asks for an instance (spec/registry/instance-spec.json).
type InstanceSpec struct {
	ID   string `json:"id,omitempty"`
	Node string `json:"node,omitempty"`
}

// RegistryErrorBody is the registry's error body (spec/registry/error.json).
type RegistryErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// registryRounds bounds how often a request goes round the replicas while none takes
// it (an election in progress), with registryPause between rounds.
const (
	registryRounds = 5
	registryPause  = 200 * time.Millisecond
	// watchWait is the long poll's wait: short enough that a closed Bound's watcher
	// ends soon, long enough that an idle caller costs the registry little.
	watchWait = 5 * time.Second
)

// Registry is a client of the registry's replicas. A request goes to the replica that
// answered last; a follower's 503 NOT_LEADER names the leader in Location, which is
// asked next; an unreachable replica is skipped for the next one.
type Registry struct {
	replicas []string
	token    string
	http     *http.Client
	mu       sync.Mutex
	last     int
}

// NewRegistry: urls are the replicas, comma-separated (http://HOST:PORT,…).
func NewRegistry(urls, token string) *Registry {
	var replicas []string
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			replicas = append(replicas, u)
		}
	}
	return &Registry{replicas: replicas, token: token, http: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func origin(location string) string {
	u, err := url.Parse(location)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// do sends one request, following leaders and replicas; out (if not nil) is decoded
// from a 2xx body.
func (r *Registry) do(ctx context.Context, method, path string, body, out any) error {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	var last error = &Error{Kind: KindRegistry, Message: "no registry replica given"}
	for round := 0; round < registryRounds; round++ {
		r.mu.Lock()
		start := r.last
		r.mu.Unlock()
		for i := range r.replicas {
			idx := (start + i) % len(r.replicas)
			base := r.replicas[idx]
			for hop := 0; hop < 3 && base != ""; hop++ {
				leader, err := r.once(ctx, base, method, path, data, out)
				if err == nil {
					r.mu.Lock()
					r.last = idx
					r.mu.Unlock()
					return nil
				}
				last = err
				var e *Error
				if errors.As(err, &e) && e.Kind != KindUnavailable {
					return err // the registry's answer: not a replica's trouble
				}
				base = leader
			}
		}
		select {
		case <-ctx.Done():
			return ctxError(ctx)
		case <-time.After(registryPause):
		}
	}
	return last
}

// once asks one replica; an unavailable replica (no answer, 503) is KindUnavailable,
// with the leader it named, if any.
func (r *Registry) once(ctx context.Context, base, method, path string, data []byte, out any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(data))
	if err != nil {
		return "", &Error{Kind: KindRegistry, Message: err.Error()}
	}
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return "", &Error{Kind: KindUnavailable, Message: "registry " + base + " does not answer", Err: err}
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 == 2 {
		if out != nil && len(text) > 0 {
			if err := json.Unmarshal(text, out); err != nil {
				return "", &Error{Kind: KindRegistry, Message: "the registry sent invalid JSON", Err: err}
			}
		}
		return "", nil
	}
	var body RegistryErrorBody
	_ = json.Unmarshal(text, &body)
	message := fmt.Sprintf("%s %s: %d %s: %s", method, path, resp.StatusCode, body.Code, body.Error)
	if resp.StatusCode == http.StatusServiceUnavailable {
		return origin(resp.Header.Get("Location")), &Error{Kind: KindUnavailable, Message: message}
	}
	return "", &Error{Kind: KindRegistry, Message: message}
}

// Function reads a function's document.
func (r *Registry) Function(ctx context.Context, name string) (*Function, error) {
	var f Function
	return &f, r.do(ctx, "GET", "/v1/functions/"+url.PathEscape(name), nil, &f)
}

// CreateInstance binds a new instance of function (or the one spec names).
func (r *Registry) CreateInstance(ctx context.Context, function string, spec InstanceSpec) (*Binding, error) {
	var b Binding
	return &b, r.do(ctx, "POST", "/v1/functions/"+url.PathEscape(function)+"/instances", spec, &b)
}

// Instance reads an instance's binding; with wait > 0, a long poll that answers once
// the generation is above after (or when wait is over).
func (r *Registry) Instance(ctx context.Context, function, id string, after uint64, wait time.Duration) (*Binding, error) {
	path := "/v1/functions/" + url.PathEscape(function) + "/instances/" + url.PathEscape(id)
	if wait > 0 {
		path += fmt.Sprintf("?after=%d&wait_ms=%d", after, wait.Milliseconds())
	}
	var b Binding
	return &b, r.do(ctx, "GET", path, nil, &b)
}

// ReportUnreachable tells the registry this client could not reach the node of the
// instance's binding generation: if that binding is still current, the registry moves
// the instance to another node. It answers the binding then.
func (r *Registry) ReportUnreachable(ctx context.Context, function, id string, generation uint64) (*Binding, error) {
	path := "/v1/functions/" + url.PathEscape(function) + "/instances/" + url.PathEscape(id) + "/unreachable"
	var b Binding
	return &b, r.do(ctx, "POST", path, UnreachableReport{Generation: generation}, &b)
}

// UnreachableReport is the body of ReportUnreachable.
type UnreachableReport struct {
	Generation uint64 `json:"generation"`
}

// DeleteInstance releases an instance.
func (r *Registry) DeleteInstance(ctx context.Context, function, id string) error {
	return r.do(ctx, "DELETE", "/v1/functions/"+url.PathEscape(function)+"/instances/"+url.PathEscape(id), nil, nil)
}
