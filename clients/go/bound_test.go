package netaccel

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRegistry binds instance "i" of function "shout" (accelerator echo) to the RAC
// address first, and moves it to then when a client reports first unreachable.
type fakeRegistry struct {
	mu      sync.Mutex
	binding Binding
	then    string
	reports []uint64
}

func bindingTo(rac string, generation uint64) Binding {
	slot := uint16(0)
	return Binding{ID: "i", Function: "shout", Slot: &slot, RAC: &rac, Generation: generation}
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/functions/shout":
		json.NewEncoder(w).Encode(Function{Name: "shout", Accelerator: "echo"})
	case r.Method == "POST" && r.URL.Path == "/v1/functions/shout/instances":
		json.NewEncoder(w).Encode(f.binding)
	case r.Method == "POST" && r.URL.Path == "/v1/functions/shout/instances/i/unreachable":
		var report UnreachableReport
		json.NewDecoder(r.Body).Decode(&report)
		f.reports = append(f.reports, report.Generation)
		if report.Generation == f.binding.Generation {
			f.binding = bindingTo(f.then, f.binding.Generation+1)
		}
		json.NewEncoder(w).Encode(f.binding)
	case r.Method == "GET" && r.URL.Path == "/v1/functions/shout/instances/i":
		// The long poll: nothing moves on its own here.
		f.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		f.mu.Lock()
		json.NewEncoder(w).Encode(f.binding)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A call whose node cannot be reached (nothing listens; or, with UnreachableAfter, a
// node that never answers) is reported to the registry with its binding's generation,
// and retried once on the binding the registry answers, well before the rebind wait.
func TestAnUnreachableNodeIsReportedAndTheCallRetriedOnTheNewBinding(t *testing.T) {
	for _, c := range []struct {
		name  string
		first string
		after time.Duration
	}{
		{"refused", closedPort(t), 0},
		{"silent", fakeNode(t, 2), 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := &fakeRegistry{binding: bindingTo(c.first, 1), then: fakeNode(t, 1)}
			registry := httptest.NewServer(fake)
			defer registry.Close()
			ctx := context.Background()
			bound, err := Bind(ctx, NewRegistry(registry.URL, ""), "shout", &BindOptions{UnreachableAfter: c.after, RebindWait: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer bound.Close()
			started := time.Now()
			out, err := bound.Call(ctx, nil, []byte("hello"))
			if err != nil || !bytes.Equal(out, []byte("hello")) {
				t.Fatalf("%q %v", out, err)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if len(fake.reports) != 1 || fake.reports[0] != 1 {
				t.Fatalf("reports %v", fake.reports)
			}
			if took := time.Since(started); took > 5*time.Second {
				t.Fatalf("the call took %v", took)
			}
			if g := bound.Binding().Generation; g != 2 || !strings.Contains(*bound.Binding().RAC, "127.0.0.1") {
				t.Fatalf("binding %+v", bound.Binding())
			}
		})
	}
}
