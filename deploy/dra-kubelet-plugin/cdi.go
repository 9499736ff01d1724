package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cdiKind is the CDI vendor/class of netaccel devices: ids are
// "netaccel.io/claim=<claim uid>-<n>", unique per claim so that a runtime's cached
// spec is never mistaken for a later claim's.
const cdiKind = "netaccel.io/claim"

// cdiVersion is the CDI spec version written; environment edits need nothing newer.
const cdiVersion = "0.6.0"

// cdiWriter writes a claim's CDI spec into dir and its devices' certificate files, if
// any, into tlsDir/<CDI device name>/ (a directory on the host the runtime can mount).
type cdiWriter struct {
	dir    string
	tlsDir string
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name  string   `json:"name"`
	Edits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env    []string   `json:"env"`
	Mounts []cdiMount `json:"mounts,omitempty"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options"`
}

func cdiName(claimUID string, n int) string { return fmt.Sprintf("%s-%d", claimUID, n) }

// path is one spec file per claim: netaccel.io-claim_<uid>.json.
func (w cdiWriter) path(claimUID string) string {
	return filepath.Join(w.dir, "netaccel.io-claim_"+claimUID+".json")
}

func (w cdiWriter) write(claimUID string, devices []preparedDevice) error {
	spec := cdiSpec{Version: cdiVersion, Kind: cdiKind, Devices: make([]cdiDevice, 0, len(devices))}
	for _, d := range devices {
		if d.Tenant != nil && len(d.TenantEnv) == 0 {
			return fmt.Errorf("CDI device %s: tenant %s's environment not read", d.Name, d.Tenant.Tenant)
		}
		edits := cdiEdits{Env: mergeEnv(d.Env, d.TenantEnv)}
		if d.TenantTLS != nil {
			mount, err := w.writeTLS(d.Name, d.TenantTLS)
			if err != nil {
				return fmt.Errorf("CDI device %s: tenant %s's certificate: %w", d.Name, d.Tenant.Tenant, err)
			}
			edits.Mounts = append(edits.Mounts, mount)
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: d.Name, Edits: edits})
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(w.path(claimUID), data)
}

// mergeEnv is base then over, a name in over replacing the same name's entry in base
// (a CDI spec's entries are applied in order, and a runtime may keep either of two).
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	index := map[string]int{}
	for _, e := range append(append([]string(nil), base...), over...) {
		name, _, _ := strings.Cut(e, "=")
		if i, ok := index[name]; ok {
			out[i] = e
			continue
		}
		index[name] = len(out)
		out = append(out, e)
	}
	return out
}

// writeTLS writes a device's certificate files (mode 0600 in a 0700 directory) and
// returns the read-only mount that shows them to its containers at
// tlsMountDir/<device>, where tenantCredentials' environment names them.
func (w cdiWriter) writeTLS(device string, files *tenantTLS) (cdiMount, error) {
	if w.tlsDir == "" {
		return cdiMount{}, fmt.Errorf("this plugin has no directory for certificate files")
	}
	dir := filepath.Join(w.tlsDir, device)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cdiMount{}, err
	}
	for name, data := range map[string][]byte{certKey: files.Cert, keyKey: files.Key, caKey: files.CA} {
		if len(data) == 0 {
			continue
		}
		if err := writeFileAtomic(filepath.Join(dir, name), data); err != nil {
			return cdiMount{}, err
		}
	}
	return cdiMount{HostPath: dir, ContainerPath: tlsMountDir + "/" + device,
		Options: []string{"ro", "nosuid", "nodev", "noexec", "rbind"}}, nil
}

// exists says whether the claim's spec file is there.
func (w cdiWriter) exists(claimUID string) bool {
	_, err := os.Stat(w.path(claimUID))
	return err == nil
}

// remove deletes the claim's spec and its devices' certificate files.
func (w cdiWriter) remove(claimUID string) error {
	err := os.Remove(w.path(claimUID))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if w.tlsDir != "" {
		dirs, _ := filepath.Glob(filepath.Join(w.tlsDir, claimUID+"-*"))
		for _, dir := range dirs {
			err = errors.Join(err, os.RemoveAll(dir))
		}
	}
	return err
}
