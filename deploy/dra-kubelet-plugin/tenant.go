package main

// A claim's tenant: which netaccel tenant its containers call as, and their credential
// (a token, a client certificate for nodes that authenticate by mutual TLS, or both).
//
// A claim names its tenant in DRA's opaque device configuration for this driver, in
// the claim (spec.devices.config) or in its DeviceClass; the kube-scheduler copies both
// into the allocation, the class's first, and the last that applies to a request wins:
//
//	config:
//	- opaque:
//	    driver: netaccel.io
//	    parameters: {apiVersion: netaccel.io/v1alpha1, kind: TenantConfig,
//	                 tenant: team-a, tokenSecret: team-a-token}
//
// The token is the key `token` of that Secret, read from the claim's own namespace: a
// claim can only hand its containers a credential its namespace already holds, which
// whoever may create Pods there could mount anyway. The token goes into the claim's CDI
// spec (mode 0600) and nowhere else: never logged, never checkpointed (the checkpoint
// keeps the Secret's name, and a spec written again reads the Secret again).
//
// With `certificateSecret: NAME` (a Secret of type kubernetes.io/tls: `tls.crt`,
// `tls.key`, and optionally `ca.crt`, the CA that signed the nodes' certificates) the
// containers call over TLS with that client certificate, which the node maps to its
// tenant (`[tls.subjects]`): the three files are written under the plugin's directory
// (mode 0600, one directory per device, removed when the claim is unprepared) and
// mounted read-only at /var/run/netaccel/tls/<device>/, NETACCEL_CERT, NETACCEL_KEY and
// NETACCEL_CACERT name them, and NETACCEL_NODE and NETACCEL_RAC point at the node's
// HTTPS and RAC-over-TLS ports (https://, rac+tls://). A node without TLS ports cannot
// serve such a claim: prepare fails and says so.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

const (
	tenantAPIVersion = "netaccel.io/v1alpha1"
	tenantKind       = "TenantConfig"
	// tokenKey is the key of the tenant's Secret that holds the token.
	tokenKey = "token"
	// tokenBytesMax bounds a token read from a Secret (the node's tokens are far shorter).
	tokenBytesMax = 4096
	// The keys of a kubernetes.io/tls Secret, and the CA a Secret may add.
	certKey = "tls.crt"
	keyKey  = "tls.key"
	caKey   = "ca.crt"
	// pemBytesMax bounds each PEM file read from a certificate Secret.
	pemBytesMax = 64 << 10
	// tlsMountDir is where a device's certificate files appear in its containers.
	tlsMountDir = "/var/run/netaccel/tls"
)

// tenantConfig is the opaque parameters a claim or class gives this driver.
type tenantConfig struct {
	APIVersion        string `json:"apiVersion"`
	Kind              string `json:"kind"`
	Tenant            string `json:"tenant"`
	TokenSecret       string `json:"tokenSecret"`
	CertificateSecret string `json:"certificateSecret"`
}

// tenantRef is what a prepared device keeps of its tenant: names, never the token or
// the key.
type tenantRef struct {
	Tenant     string `json:"tenant"`
	Namespace  string `json:"namespace"`
	Secret     string `json:"secret,omitempty"`
	CertSecret string `json:"certificateSecret,omitempty"`
}

// tenantTLS is a device's client certificate as its containers get it: PEM files.
type tenantTLS struct {
	Cert, Key, CA []byte
}

// secretGetter reads a Secret (the Kubernetes API in the plugin, a map in tests).
type secretGetter func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// permanentError is a refusal that asking again cannot change (a malformed
// configuration): prepare gives up at once instead of retrying until its deadline.
type permanentError struct{ error }

// tenantOf is the tenant configured for the allocated request `request` of claim, or
// nil when none is: the last of this driver's opaque configurations that names the
// request (or its parent request, for a subrequest "req/sub") or names no request.
func tenantOf(claim *resourceapi.ResourceClaim, request string) (*tenantRef, error) {
	var found *tenantRef
	for i, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != DriverName || !appliesTo(c.Requests, request) {
			continue
		}
		config, err := parseTenantConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, permanentError{fmt.Errorf("claim %s/%s, configuration %d (%s) for driver %s: %w",
				claim.Namespace, claim.Name, i, c.Source, DriverName, err)}
		}
		found = &tenantRef{Tenant: config.Tenant, Namespace: claim.Namespace,
			Secret: config.TokenSecret, CertSecret: config.CertificateSecret}
	}
	return found, nil
}

func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	for _, r := range requests {
		if r == request || strings.HasPrefix(request, r+"/") {
			return true
		}
	}
	return false
}

// parseTenantConfig reads the opaque parameters strictly: unknown fields, another kind
// or version, and a missing tenant or Secret are refused with what is wrong.
func parseTenantConfig(raw []byte) (tenantConfig, error) {
	var c tenantConfig
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&c); err != nil {
		return c, fmt.Errorf("parameters: %w", err)
	}
	if c.APIVersion != tenantAPIVersion || c.Kind != tenantKind {
		return c, fmt.Errorf("parameters are %s %s, this plugin reads %s %s", c.APIVersion, c.Kind, tenantAPIVersion, tenantKind)
	}
	if c.Tenant == "" || strings.IndexFunc(c.Tenant, unprintable) >= 0 {
		return c, errors.New("tenant: a name without spaces or control characters is required")
	}
	if c.TokenSecret == "" && c.CertificateSecret == "" {
		return c, errors.New("tokenSecret: the name of a Secret in the claim's namespace is required (or certificateSecret, or both)")
	}
	for _, f := range [][2]string{{"tokenSecret", c.TokenSecret}, {"certificateSecret", c.CertificateSecret}} {
		if strings.IndexFunc(f[1], unprintable) >= 0 {
			return c, fmt.Errorf("%s: the name of a Secret in the claim's namespace, without spaces or control characters", f[0])
		}
	}
	return c, nil
}

func unprintable(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

// tenantCredentials is the tenant's part of device `device`'s containers: its
// environment (NETACCEL_TENANT; NETACCEL_TENANT_TOKEN with a token; with a certificate,
// the files' paths and the node's TLS addresses in place of the plain ones, read from
// the device's binding environment `bound`) and its certificate files, all read from
// the Secrets now. Errors name the Secrets, never their content.
func tenantCredentials(ctx context.Context, secrets secretGetter, ref *tenantRef, device string, bound []string) ([]string, *tenantTLS, error) {
	if secrets == nil {
		return nil, nil, errors.New("this plugin reads no Secrets (no Kubernetes client)")
	}
	env := []string{"NETACCEL_TENANT=" + ref.Tenant}
	if ref.Secret != "" {
		token, err := tenantToken(ctx, secrets, ref)
		if err != nil {
			return nil, nil, err
		}
		env = append(env, "NETACCEL_TENANT_TOKEN="+token)
	}
	if ref.CertSecret == "" {
		return env, nil, nil
	}
	files, err := tenantCertificate(ctx, secrets, ref)
	if err != nil {
		return nil, nil, err
	}
	https, racTLS := envValue(bound, "NETACCEL_NODE_HTTPS"), envValue(bound, "NETACCEL_NODE_RAC_TLS")
	if https == "" || racTLS == "" {
		return nil, nil, fmt.Errorf("tenant %s authenticates with a client certificate (Secret %s/%s) but the device's node serves no HTTPS and RAC-over-TLS ports (its [tls] section)",
			ref.Tenant, ref.Namespace, ref.CertSecret)
	}
	dir := tlsMountDir + "/" + device
	env = append(env, "NETACCEL_NODE=https://"+https, "NETACCEL_RAC=rac+tls://"+racTLS,
		"NETACCEL_CERT="+dir+"/"+certKey, "NETACCEL_KEY="+dir+"/"+keyKey)
	if len(files.CA) > 0 {
		env = append(env, "NETACCEL_CACERT="+dir+"/"+caKey)
	}
	return env, files, nil
}

// tenantToken reads the tenant's token from its Secret's key `token`.
func tenantToken(ctx context.Context, secrets secretGetter, ref *tenantRef) (string, error) {
	secret, err := secrets(ctx, ref.Namespace, ref.Secret)
	if err != nil {
		return "", fmt.Errorf("the token of tenant %s: Secret %s/%s: %w", ref.Tenant, ref.Namespace, ref.Secret, err)
	}
	// A token written with a final newline (a file made by `openssl rand -hex 32 >`)
	// is the token without it.
	token := strings.TrimRight(string(secret.Data[tokenKey]), "\r\n")
	if token == "" || len(token) > tokenBytesMax || strings.IndexFunc(token, unprintable) >= 0 {
		return "", permanentError{fmt.Errorf("the token of tenant %s: Secret %s/%s needs a key %q of 1 to %d printable bytes without spaces",
			ref.Tenant, ref.Namespace, ref.Secret, tokenKey, tokenBytesMax)}
	}
	return token, nil
}

// tenantCertificate reads the tenant's client certificate from its kubernetes.io/tls
// Secret: `tls.crt` and `tls.key` required, `ca.crt` optional, each PEM and bounded.
func tenantCertificate(ctx context.Context, secrets secretGetter, ref *tenantRef) (*tenantTLS, error) {
	secret, err := secrets(ctx, ref.Namespace, ref.CertSecret)
	if err != nil {
		return nil, fmt.Errorf("the certificate of tenant %s: Secret %s/%s: %w", ref.Tenant, ref.Namespace, ref.CertSecret, err)
	}
	files := &tenantTLS{Cert: secret.Data[certKey], Key: secret.Data[keyKey], CA: secret.Data[caKey]}
	for _, f := range []struct {
		key      string
		data     []byte
		required bool
	}{{certKey, files.Cert, true}, {keyKey, files.Key, true}, {caKey, files.CA, false}} {
		if len(f.data) == 0 && !f.required {
			continue
		}
		if len(f.data) == 0 || len(f.data) > pemBytesMax || !bytes.Contains(f.data, []byte("-----BEGIN ")) {
			return nil, permanentError{fmt.Errorf("the certificate of tenant %s: Secret %s/%s needs a key %q holding PEM of at most %d bytes",
				ref.Tenant, ref.Namespace, ref.CertSecret, f.key, pemBytesMax)}
		}
	}
	return files, nil
}

// envValue is the value of NAME in a list of NAME=VALUE, or "".
func envValue(env []string, name string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v
		}
	}
	return ""
}
