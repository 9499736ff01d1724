package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
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

const (
	certPEM = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n"
	keyPEM  = "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----\n"
	caPEM   = "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n"
)

// tlsSecrets serves kubernetes.io/tls Secrets of namespace default by name.
func tlsSecrets(data map[string]map[string]string) secretGetter {
	return func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
		keys, ok := data[name]
		if namespace != "default" || !ok {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
		}
		s := &corev1.Secret{Data: map[string][]byte{}}
		for k, v := range keys {
			s.Data[k] = []byte(v)
		}
		return s, nil
	}
}

func certParams(tenant, secret string) string {
	return fmt.Sprintf(`{"apiVersion":"netaccel.io/v1alpha1","kind":"TenantConfig","tenant":%q,"certificateSecret":%q}`, tenant, secret)
}

func TestATenantsCertificateIsMountedAndItsContainersCallOverTLS(t *testing.T) {
	dir := t.TempDir()
	srv, _ := registryServing(t, "node-b")
	d := newDriver(t, dir, srv.URL, nil)
	d.secrets = tlsSecrets(map[string]map[string]string{
		"team-a-cert": {"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM},
	})
	c := configured(tenantConfiguration(resourceapi.AllocationConfigSourceClaim, DriverName, certParams("team-a", "team-a-cert")))
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Fatal(r.Err)
	}
	device := uid + "-0"
	specPath := filepath.Join(dir, "netaccel.io-claim_"+uid+".json")
	spec, _ := os.ReadFile(specPath)
	mount := "/var/run/netaccel/tls/" + device
	for _, want := range []string{
		`"NETACCEL_TENANT=team-a"`, `"NETACCEL_NODE=https://10.0.0.2:8443"`, `"NETACCEL_RAC=rac+tls://10.0.0.2:9443"`,
		`"NETACCEL_CERT=` + mount + `/tls.crt"`, `"NETACCEL_KEY=` + mount + `/tls.key"`, `"NETACCEL_CACERT=` + mount + `/ca.crt"`,
		`"hostPath": "` + filepath.Join(dir, "tls", device) + `"`, `"containerPath": "` + mount + `"`, `"ro"`,
	} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("%s missing from the CDI spec:\n%s", want, spec)
		}
	}
	// The plain addresses are replaced, not left beside the TLS ones.
	for _, gone := range []string{`"NETACCEL_NODE=http://`, `"NETACCEL_RAC=10.0.0.2:9400"`, "NETACCEL_TENANT_TOKEN"} {
		if strings.Contains(string(spec), gone) {
			t.Errorf("%s still in the CDI spec:\n%s", gone, spec)
		}
	}
	for name, want := range map[string]string{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM} {
		path := filepath.Join(dir, "tls", device, name)
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v", name, got, err)
		}
		if info, _ := os.Stat(path); info == nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s is not mode 0600", name)
		}
	}
	ckpt, _ := os.ReadFile(filepath.Join(dir, "checkpoint.json"))
	if strings.Contains(string(ckpt), "MIIBkey") || !strings.Contains(string(ckpt), `"certificateSecret": "team-a-cert"`) {
		t.Fatalf("the checkpoint holds the key, or not the Secret's name:\n%s", ckpt)
	}
	// Unprepared: the spec and the files are gone.
	if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tls", device)); !os.IsNotExist(err) {
		t.Fatalf("the certificate files outlive the claim: %v", err)
	}
}

func TestACertificateTenantIsRefusedWhatItCannotUse(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"id": "dra-" + uid + "-0", "function": "dra.sobel", "node": "node-b",
			"http": "10.0.0.2:8080", "rac": "10.0.0.2:9400", "slot": 1,
		})
	}))
	t.Cleanup(plain.Close)
	tlsServing, _ := registryServing(t, "node-b")
	secrets := tlsSecrets(map[string]map[string]string{
		"good":   {"tls.crt": certPEM, "tls.key": keyPEM},
		"no-key": {"tls.crt": certPEM},
		"binary": {"tls.crt": certPEM, "tls.key": "\x00\x01"},
	})
	for name, tc := range map[string]struct {
		registry, secret, want string
	}{
		"a node without TLS ports": {plain.URL, "good", "serves no HTTPS and RAC-over-TLS ports"},
		"no key":                   {tlsServing.URL, "no-key", `needs a key "tls.key" holding PEM`},
		"not PEM":                  {tlsServing.URL, "binary", `needs a key "tls.key" holding PEM`},
	} {
		c := configured(tenantConfiguration(resourceapi.AllocationConfigSourceClaim, DriverName, certParams("team-a", tc.secret)))
		d := newDriver(t, t.TempDir(), tc.registry, func(context.Context, string, string) (*resourceapi.ResourceClaim, error) { return c, nil })
		d.secrets = secrets
		d.resolveWait = 300 * time.Millisecond
		if r := prepareOne(t, d, c); r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, r.Err, tc.want)
		}
	}
}
