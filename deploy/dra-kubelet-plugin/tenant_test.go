package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const token = "s3cret-of-team-a"

// configured is claim(true) with these opaque configurations of the allocation, in order.
func configured(configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	c := claim(true)
	c.Status.Allocation.Devices.Config = configs
	return c
}

func tenantConfiguration(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	}
}

func tenantParams(tenant, secret string) string {
	return fmt.Sprintf(`{"apiVersion":"netaccel.io/v1alpha1","kind":"TenantConfig","tenant":%q,"tokenSecret":%q}`, tenant, secret)
}

// secretsHolding serves the Secrets of namespace default named in data, and counts reads.
func secretsHolding(data map[string]string) (secretGetter, *atomic.Int32) {
	var reads atomic.Int32
	return func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
		reads.Add(1)
		value, ok := data[name]
		if namespace != "default" || !ok {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
		}
		return &corev1.Secret{Data: map[string][]byte{"token": []byte(value)}}, nil
	}, &reads
}

func TestATenantsClaimGetsItsTokenInTheCDISpecOnly(t *testing.T) {
	dir := t.TempDir()
	srv, asked := registryServing(t, "node-b")
	secrets, reads := secretsHolding(map[string]string{"team-a-token": token + "\n", "team-x-token": "x"})
	// The class says team-x for every request; the claim says team-a for "acc": the
	// claim's comes later and wins. Another driver's configuration is not read.
	c := configured(
		tenantConfiguration(resourceapi.AllocationConfigSourceClass, DriverName, tenantParams("team-x", "team-x-token")),
		tenantConfiguration(resourceapi.AllocationConfigSourceClaim, DriverName, tenantParams("team-a", "team-a-token"), "acc"),
		tenantConfiguration(resourceapi.AllocationConfigSourceClaim, "other.example.com", `{"whatever": 1}`),
	)
	d := newDriver(t, dir, srv.URL, nil)
	d.secrets = secrets
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	specPath := filepath.Join(dir, "netaccel.io-claim_"+uid+".json")
	spec, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"NETACCEL_TENANT=team-a", "NETACCEL_TENANT_TOKEN=" + token, "NETACCEL_SLOT=1"} {
		if !strings.Contains(string(spec), `"`+env+`"`) {
			t.Errorf("%s missing from the CDI spec:\n%s", env, spec)
		}
	}
	if info, _ := os.Stat(specPath); info.Mode().Perm() != 0o600 {
		t.Errorf("CDI spec mode %v, want 0600", info.Mode().Perm())
	}
	ckpt, _ := os.ReadFile(filepath.Join(dir, "checkpoint.json"))
	if strings.Contains(string(ckpt), token) || !strings.Contains(string(ckpt), `"secret": "team-a-token"`) {
		t.Fatalf("the checkpoint holds the token, or not the Secret's name:\n%s", ckpt)
	}

	// Restarted: a spec that is there is kept (the Secret not read); after a reboot
	// emptied the CDI directory, the spec is written again with the token read from
	// the Secret again. The registry is not asked.
	before, readsBefore := asked.Load(), reads.Load()
	restarted := newDriver(t, dir, srv.URL, nil)
	restarted.secrets = secrets
	if r := prepareOne(t, restarted, c); r.Err != nil || reads.Load() != readsBefore {
		t.Fatalf("with its spec there: %v, Secret read %d times", r.Err, reads.Load()-readsBefore)
	}
	os.Remove(specPath)
	if r := prepareOne(t, restarted, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	again, _ := os.ReadFile(specPath)
	if string(again) != string(spec) || asked.Load() != before || reads.Load() != readsBefore+1 {
		t.Fatalf("after a restart: registry asked %d, Secret read %d more times; spec:\n%s",
			asked.Load()-before, reads.Load()-readsBefore, again)
	}
}

func TestATenantConfigurationIsCheckedAndRefusedWithTheReason(t *testing.T) {
	srv, _ := registryServing(t, "node-b")
	secrets, _ := secretsHolding(map[string]string{"good": token, "empty": "\n", "spaced": "a b"})
	claimConfig := func(params string) resourceapi.DeviceAllocationConfiguration {
		return tenantConfiguration(resourceapi.AllocationConfigSourceClaim, DriverName, params)
	}
	for name, tc := range map[string]struct {
		params    string
		want      string
		permanent bool
	}{
		"unknown field": {`{"apiVersion":"netaccel.io/v1alpha1","kind":"TenantConfig","tenant":"a","tokenSecret":"good","token":"x"}`, `unknown field "token"`, true},
		"another kind":  {`{"apiVersion":"netaccel.io/v1","kind":"Tenant","tenant":"a","tokenSecret":"good"}`, "this plugin reads netaccel.io/v1alpha1 TenantConfig", true},
		"no tenant":     {tenantParams("", "good"), "tenant: a name", true},
		"no Secret":     {tenantParams("team-a", ""), "tokenSecret: the name of a Secret", true},
		"empty token":   {tenantParams("team-a", "empty"), `Secret default/empty needs a key "token"`, true},
		"spaced token":  {tenantParams("team-a", "spaced"), `Secret default/spaced needs a key "token"`, true},
		"missing":       {tenantParams("team-a", "absent"), `Secret default/absent: secrets "absent" not found`, false},
	} {
		c := configured(claimConfig(tc.params))
		d := newDriver(t, t.TempDir(), srv.URL, func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return c, nil })
		d.secrets = secrets
		d.resolveWait = 500 * time.Millisecond
		started := time.Now()
		r := prepareOne(t, d, c)
		if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, r.Err, tc.want)
			continue
		}
		if strings.Contains(r.Err.Error(), token) {
			t.Errorf("%s: the error shows the token: %v", name, r.Err)
		}
		// A malformed configuration is refused at once; a missing Secret is waited
		// for (it may be created with the claim).
		if waited := time.Since(started) >= d.resolveWait; waited == tc.permanent {
			t.Errorf("%s: waited %v for a refusal (permanent: %v)", name, time.Since(started), tc.permanent)
		}
		if len(d.checkpoint.Claims) != 0 {
			t.Errorf("%s: checkpointed a refused claim", name)
		}
	}
}
