package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

const uid = "4a0e49b2-46c3-4781-ab92-97ebb0dbc231"

// registryServing answers the instance of claim uid, bound on node, and counts asks.
func registryServing(t *testing.T, node string) (*httptest.Server, *atomic.Int32) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if r.URL.Path != "/v1/functions/dra.sobel/instances/dra-"+uid+"-0" {
			http.Error(w, `{"error":"no such instance"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"id": "dra-" + uid + "-0", "function": "dra.sobel", "node": node,
			"http": "10.0.0.2:8080", "rac": "10.0.0.2:9400", "slot": 1,
			"https": "10.0.0.2:8443", "rac_tls": "10.0.0.2:9443",
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

func claim(annotated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "edges-acc", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "acc", Driver: "other.example.com", Pool: "node-b", Device: "gpu0"},
				{Request: "acc", Driver: DriverName, Pool: "node-b", Device: "cpu0-slot-1"},
			}},
		}},
	}
	if annotated {
		c.Annotations = map[string]string{acceleratorsAnnotation: "sobel"}
	}
	return c
}

func newDriver(t *testing.T, dir, registry string, claims claimGetter) *driver {
	ckpt, err := loadCheckpoint(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	return &driver{
		cdi:         cdiWriter{dir: dir, tlsDir: filepath.Join(dir, "tls")},
		checkpoint:  ckpt,
		binding:     registryClient{base: registry, podRegistry: "http://registry:7400", http: http.DefaultClient},
		claims:      claims,
		resolveWait: 2 * time.Second,
		cancel:      func() {},
	}
}

func prepareOne(t *testing.T, d *driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	result, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return result[c.UID]
}

func TestPrepareWritesTheBindingAndARestartedPluginAnswersFromItsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	srv, asked := registryServing(t, "node-b")
	got := prepareOne(t, newDriver(t, dir, srv.URL, nil), claim(true))
	if got.Err != nil {
		t.Fatal(got.Err)
	}
	want := []kubeletplugin.Device{{Requests: []string{"acc"}, PoolName: "node-b", DeviceName: "cpu0-slot-1",
		CDIDeviceIDs: []string{"netaccel.io/claim=" + uid + "-0"}}}
	if !equalJSON(got.Devices, want) {
		t.Fatalf("devices %+v, want %+v", got.Devices, want)
	}
	spec, err := os.ReadFile(filepath.Join(dir, "netaccel.io-claim_"+uid+".json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"NETACCEL_NODE=http://10.0.0.2:8080", "NETACCEL_RAC=10.0.0.2:9400",
		"NETACCEL_SLOT=1", "NETACCEL_INSTANCE=dra-" + uid + "-0", "NETACCEL_REGISTRY=http://registry:7400"} {
		if !strings.Contains(string(spec), `"`+env+`"`) {
			t.Errorf("%s missing from the CDI spec:\n%s", env, spec)
		}
	}

	// A new process: the checkpoint answers, the registry is not asked, the spec is
	// written again (a reboot empties the CDI directory).
	os.Remove(filepath.Join(dir, "netaccel.io-claim_"+uid+".json"))
	before := asked.Load()
	again := prepareOne(t, newDriver(t, dir, srv.URL, nil), claim(true))
	if again.Err != nil || !equalJSON(again.Devices, want) || asked.Load() != before {
		t.Fatalf("after a restart: %+v (registry asked %d more times)", again, asked.Load()-before)
	}
	if _, err := os.Stat(filepath.Join(dir, "netaccel.io-claim_"+uid+".json")); err != nil {
		t.Fatal(err)
	}
}

func TestUnprepareRemovesSpecAndEntryAndIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	srv, _ := registryServing(t, "node-b")
	d := newDriver(t, dir, srv.URL, nil)
	if r := prepareOne(t, d, claim(true)); r.Err != nil {
		t.Fatal(r.Err)
	}
	restarted := newDriver(t, dir, srv.URL, nil)
	for i := 0; i < 2; i++ {
		result, err := restarted.UnprepareResourceClaims(context.Background(),
			[]kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
		if err != nil || result[types.UID(uid)] != nil {
			t.Fatalf("unprepare %d: %v %v", i, err, result)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && e.Name() != "checkpoint.json" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	ckpt, err := loadCheckpoint(filepath.Join(dir, "checkpoint.json"))
	if err != nil || len(ckpt.Claims) != 0 {
		t.Fatalf("checkpoint after unprepare: %+v %v", ckpt, err)
	}
}

func TestPrepareWaitsForTheRegistryToRecordTheClaim(t *testing.T) {
	srv, _ := registryServing(t, "node-b")
	var reads atomic.Int32
	getter := func(context.Context, string, string) (*resourceapi.ResourceClaim, error) {
		// Annotated from the third read on, as the registry would a moment later.
		return claim(reads.Add(1) >= 3), nil
	}
	r := prepareOne(t, newDriver(t, t.TempDir(), srv.URL, getter), claim(false))
	if r.Err != nil || len(r.Devices) != 1 || reads.Load() < 3 {
		t.Fatalf("%+v after %d reads", r, reads.Load())
	}
}

func TestPrepareRefusesWithTheReason(t *testing.T) {
	elsewhere, _ := registryServing(t, "node-c")
	for name, tc := range map[string]struct {
		registry string
		claim    *resourceapi.ResourceClaim
		want     string
	}{
		"bound elsewhere": {elsewhere.URL, claim(true), `bound on node "node-c"`},
		"never recorded":  {elsewhere.URL, claim(false), "has not recorded claim default/edges-acc"},
	} {
		same := func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return tc.claim, nil }
		d := newDriver(t, t.TempDir(), tc.registry, same)
		d.resolveWait = 300 * time.Millisecond
		r := prepareOne(t, d, tc.claim)
		if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, r.Err, tc.want)
		}
		if len(d.checkpoint.Claims) != 0 {
			t.Errorf("%s: checkpointed a refused claim", name)
		}
	}
}

func TestACheckpointOfAnotherVersionIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := os.WriteFile(path, []byte(`{"version": 2, "claims": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCheckpoint(path); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("got %v", err)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
