package netaccel

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

func roundTrip(t *testing.T, file string, into any) {
	t.Helper()
	raw := specFile(t, "registry/"+file)
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	again, _ := json.Marshal(into)
	var want, got any
	_ = json.Unmarshal(raw, &want)
	_ = json.Unmarshal(again, &got)
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s does not round-trip:\nwant %v\ngot  %v", file, want, got)
	}
}

// The registry contract's fixtures decode into this package's types and encode back
// to the same JSON.
func TestRegistryFixturesRoundTrip(t *testing.T) {
	for _, f := range []string{"binding.json", "binding.unbound.json", "binding.pinned.json"} {
		roundTrip(t, f, &Binding{})
	}
	roundTrip(t, "function.json", &Function{})
	roundTrip(t, "functions.json", &[]Function{})
	roundTrip(t, "error.json", &RegistryErrorBody{})
	roundTrip(t, "instance-spec.json", &InstanceSpec{})
	roundTrip(t, "instance-spec.empty.json", &InstanceSpec{})
	var unbound Binding
	_ = json.Unmarshal(specFile(t, "registry/binding.unbound.json"), &unbound)
	if unbound.Bound() {
		t.Error("an unbound binding reads as bound")
	}
}

// A follower's 503 NOT_LEADER sends the request to the leader its Location names.
func TestAFollowerSendsTheClientToTheLeader(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(specFile(t, "registry/function.json"))
	}))
	defer leader.Close()
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", leader.URL+r.URL.Path)
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(specFile(t, "registry/error.json"))
	}))
	defer follower.Close()
	f, err := NewRegistry(follower.URL, "").Function(context.Background(), "edges")
	if err != nil || f.Accelerator != "sobel" || len(f.Instances) != 2 {
		t.Fatalf("%+v %v", f, err)
	}
}
