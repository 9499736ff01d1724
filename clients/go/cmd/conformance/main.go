// Command conformance is the Go client's driver of the shared conformance suite
// (clients/conformance/README.md): it runs one case with the package's public API and
// prints one JSON line of what it observed.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"netaccel.dev/client"
)

type call struct {
	Accelerator   string             `json:"accelerator"`
	AcceleratorID *uint16            `json:"accelerator_id"`
	Params        map[string]float64 `json:"params"`
	PayloadHex    string             `json:"payload_hex"`
	PayloadFill   *struct {
		Byte string `json:"byte"`
		Len  int    `json:"len"`
	} `json:"payload_fill"`
	DeadlineUs uint32 `json:"deadline_us"`
}

type testCase struct {
	Name     string `json:"name"`
	Mode     string `json:"mode"`
	Function string `json:"function"`
	Calls    []call `json:"calls"`
}

func (c call) payload() []byte {
	if c.PayloadFill != nil {
		b, _ := hex.DecodeString(c.PayloadFill.Byte)
		return []byte(strings.Repeat(string(b), c.PayloadFill.Len))
	}
	b, _ := hex.DecodeString(c.PayloadHex)
	return b
}

func (c call) request() *netaccel.Request {
	r := &netaccel.Request{Accelerator: c.Accelerator, Params: c.Params, Payload: c.payload(),
		Deadline: time.Duration(c.DeadlineUs) * time.Microsecond}
	if c.AcceleratorID != nil {
		r.Accelerator, r.ID = "", *c.AcceleratorID
	}
	return r
}

type report struct {
	outputs []any
	errs    []map[string]any
	order   []int
}

func (r *report) take(i int, out []byte, err error) {
	r.order = append(r.order, i)
	if err == nil {
		r.outputs[i] = hex.EncodeToString(out)
		return
	}
	r.errs[i] = describe(err)
}

func describe(err error) map[string]any {
	var e *netaccel.Error
	if !errors.As(err, &e) {
		return map[string]any{"kind": "internal", "message": err.Error()}
	}
	d := map[string]any{"kind": string(e.Kind), "message": e.Error(), "retryable": e.Retryable()}
	if e.HasStatus {
		d["status"] = e.Status.String()
	}
	if e.RetryAfter > 0 {
		d["retry_after_ms"] = e.RetryAfter.Milliseconds()
	}
	return d
}

func (r *report) line() []byte {
	line := map[string]any{"ok": true, "outputs": r.outputs, "order": r.order}
	for i, e := range r.errs {
		if e != nil {
			e["call"] = i
			line["ok"], line["error"] = false, e
			break
		}
	}
	b, _ := json.Marshal(line)
	return b
}

func tlsConfig(ca, cert, key string) (*tls.Config, error) {
	if ca == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	config := &tls.Config{RootCAs: roots}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

func runNode(ctx context.Context, node string, opts *netaccel.Options, c testCase, r *report) {
	client, err := netaccel.Dial(ctx, node, opts)
	if err != nil {
		r.errs[0] = describe(err)
		return
	}
	defer client.Close()
	if c.Mode == "sync" {
		for i, k := range c.Calls {
			out, err := client.Do(ctx, k.request())
			r.take(i, out, err)
		}
		return
	}
	type done struct {
		i   int
		out []byte
		err error
	}
	results := make(chan done, len(c.Calls))
	for i, k := range c.Calls {
		p := client.Go(ctx, k.request())
		go func(i int) {
			out, err := p.Wait(ctx)
			results <- done{i, out, err}
		}(i)
	}
	for range c.Calls {
		d := <-results
		r.take(d.i, d.out, d.err)
	}
}

func runRegistry(ctx context.Context, urls, token string, c testCase, r *report) {
	bound, err := netaccel.Bind(ctx, netaccel.NewRegistry(urls, token), c.Function, &netaccel.BindOptions{RebindWait: 10 * time.Second})
	if err != nil {
		r.errs[0] = describe(err)
		return
	}
	defer bound.Release(ctx)
	for i, k := range c.Calls {
		out, err := bound.Call(ctx, k.Params, k.payload())
		r.take(i, out, err)
	}
}

func main() {
	casesFile := flag.String("cases", "clients/conformance/cases.json", "the cases")
	name := flag.String("case", "", "the case to run")
	node := flag.String("node", "", "HOST:PORT of the RAC listener")
	registry := flag.String("registry", "", "registry replicas, comma-separated")
	ca := flag.String("tls-ca", "", "CA to trust (TLS)")
	cert := flag.String("cert", "", "client certificate")
	key := flag.String("key", "", "client key")
	tenant := flag.String("tenant", "", "tenant to say hello as")
	token := flag.String("token", "", "the tenant's token")
	flag.Parse()
	text, err := os.ReadFile(*casesFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var all struct{ Cases []testCase }
	if err := json.Unmarshal(text, &all); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var c testCase
	for _, k := range all.Cases {
		if k.Name == *name {
			c = k
		}
	}
	r := &report{outputs: make([]any, len(c.Calls)), errs: make([]map[string]any, len(c.Calls))}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if *registry != "" {
		runRegistry(ctx, *registry, *token, c, r)
	} else {
		config, err := tlsConfig(*ca, *cert, *key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		runNode(ctx, *node, &netaccel.Options{TLS: config, Tenant: *tenant, Token: *token}, c, r)
	}
	os.Stdout.Write(append(r.line(), '\n'))
}
