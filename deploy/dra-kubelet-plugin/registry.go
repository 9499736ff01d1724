package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// registryClient reads a claim's instance from the registry, which recorded it when the
// scheduler allocated the claim.
type registryClient struct {
	base        string
	podRegistry string
	http        *http.Client
}

// binding is the part of the registry's instance document the containers need.
type binding struct {
	ID       string  `json:"id"`
	Function string  `json:"function"`
	Node     string  `json:"node"`
	HTTP     string  `json:"http"`
	RAC      string  `json:"rac"`
	HTTPS    string  `json:"https"`
	RACTLS   string  `json:"rac_tls"`
	Slot     *uint16 `json:"slot"`
}

func (r registryClient) lookup(ctx context.Context, function, instance string) (binding, error) {
	u := strings.TrimRight(r.base, "/") + "/v1/functions/" + url.PathEscape(function) + "/instances/" + url.PathEscape(instance)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return binding{}, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return binding{}, fmt.Errorf("asking the registry for %s: %w", instance, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return binding{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return binding{}, fmt.Errorf("the registry answered %s for %s: %s", resp.Status, instance, strings.TrimSpace(string(body)))
	}
	var b binding
	if err := json.Unmarshal(body, &b); err != nil {
		return binding{}, fmt.Errorf("the registry's answer for %s: %w", instance, err)
	}
	if b.Node == "" || b.HTTP == "" || b.RAC == "" || b.Slot == nil {
		return binding{}, fmt.Errorf("instance %s is not bound to a slot (its node lost?)", instance)
	}
	return b, nil
}

// env is what a container of the claim gets: the names the netaccel clients read
// (NETACCEL_NODE for the CLI's HTTP calls), the webhook's names for the same
// addresses, the node's TLS ports when it has them (as the webhook names them), and
// the slot.
func (r registryClient) env(b binding) []string {
	env := []string{
		"NETACCEL_NODE=http://" + b.HTTP,
		"NETACCEL_NODE_HTTP=" + b.HTTP,
		"NETACCEL_RAC=" + b.RAC,
		"NETACCEL_NODE_RAC=" + b.RAC,
		fmt.Sprintf("NETACCEL_SLOT=%d", *b.Slot),
		"NETACCEL_INSTANCE=" + b.ID,
		"NETACCEL_FUNCTION=" + b.Function,
		"NETACCEL_REGISTRY=" + r.podRegistry,
	}
	if b.HTTPS != "" {
		env = append(env, "NETACCEL_NODE_HTTPS="+b.HTTPS)
	}
	if b.RACTLS != "" {
		env = append(env, "NETACCEL_NODE_RAC_TLS="+b.RACTLS)
	}
	return env
}
