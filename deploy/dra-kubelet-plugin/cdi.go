package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// cdiKind is the CDI vendor/class of netaccel devices: ids are
// "netaccel.io/claim=<claim uid>-<n>", unique per claim so that a runtime's cached
// spec is never mistaken for a later claim's.
const cdiKind = "netaccel.io/claim"

// cdiVersion is the CDI spec version written; environment edits need nothing newer.
const cdiVersion = "0.6.0"

type cdiWriter struct{ dir string }

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
	Env []string `json:"env"`
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
		env := append(append(make([]string, 0, len(d.Env)+len(d.TenantEnv)), d.Env...), d.TenantEnv...)
		spec.Devices = append(spec.Devices, cdiDevice{Name: d.Name, Edits: cdiEdits{Env: env}})
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(w.path(claimUID), data)
}

// exists says whether the claim's spec file is there.
func (w cdiWriter) exists(claimUID string) bool {
	_, err := os.Stat(w.path(claimUID))
	return err == nil
}

func (w cdiWriter) remove(claimUID string) error {
	err := os.Remove(w.path(claimUID))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
