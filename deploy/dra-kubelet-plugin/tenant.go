package main

// A claim's tenant: which netaccel tenant its containers call as, and their token.
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
)

// tenantConfig is the opaque parameters a claim or class gives this driver.
type tenantConfig struct {
	APIVersion  string `json:"apiVersion"`
	Kind        string `json:"kind"`
	Tenant      string `json:"tenant"`
	TokenSecret string `json:"tokenSecret"`
}

// tenantRef is what a prepared device keeps of its tenant: names, never the token.
type tenantRef struct {
	Tenant    string `json:"tenant"`
	Namespace string `json:"namespace"`
	Secret    string `json:"secret"`
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
		found = &tenantRef{Tenant: config.Tenant, Namespace: claim.Namespace, Secret: config.TokenSecret}
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
	if c.TokenSecret == "" || strings.IndexFunc(c.TokenSecret, unprintable) >= 0 {
		return c, errors.New("tokenSecret: the name of a Secret in the claim's namespace is required")
	}
	return c, nil
}

func unprintable(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

// tenantEnv is the tenant's part of a container's environment: NETACCEL_TENANT and
// NETACCEL_TENANT_TOKEN, the token read from the Secret now. Errors name the Secret,
// never its content.
func tenantEnv(ctx context.Context, secrets secretGetter, ref *tenantRef) ([]string, error) {
	if secrets == nil {
		return nil, errors.New("this plugin reads no Secrets (no Kubernetes client)")
	}
	secret, err := secrets(ctx, ref.Namespace, ref.Secret)
	if err != nil {
		return nil, fmt.Errorf("the token of tenant %s: Secret %s/%s: %w", ref.Tenant, ref.Namespace, ref.Secret, err)
	}
	// A token written with a final newline (a file made by `openssl rand -hex 32 >`)
	// is the token without it.
	token := strings.TrimRight(string(secret.Data[tokenKey]), "\r\n")
	if token == "" || len(token) > tokenBytesMax || strings.IndexFunc(token, unprintable) >= 0 {
		return nil, permanentError{fmt.Errorf("the token of tenant %s: Secret %s/%s needs a key %q of 1 to %d printable bytes without spaces",
			ref.Tenant, ref.Namespace, ref.Secret, tokenKey, tokenBytesMax)}
	}
	return []string{"NETACCEL_TENANT=" + ref.Tenant, "NETACCEL_TENANT_TOKEN=" + token}, nil
}
