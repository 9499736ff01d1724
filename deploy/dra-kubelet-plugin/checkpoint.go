package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// checkpointVersion is the file format's version; a file of another is refused rather
// than misread.
const checkpointVersion = 1

// checkpoint is what this node's plugin prepared, saved after every change so that a
// restarted plugin loses nothing: one entry per claim uid.
type checkpoint struct {
	path    string
	Version int                      `json:"version"`
	Claims  map[string]preparedClaim `json:"claims"`
}

type preparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []preparedDevice `json:"devices"`
}

// preparedDevice is one netaccel device of a claim: where the scheduler put it, the
// CDI device naming it, the environment that device gives its containers, and its
// tenant. The tenant's environment (its token) is in the CDI spec only and its
// certificate files in the plugin's directory only: TenantEnv and TenantTLS are never
// saved here, and are read from the tenant's Secrets again when a spec is written from
// the checkpoint.
type preparedDevice struct {
	Request   string     `json:"request"`
	Pool      string     `json:"pool"`
	Device    string     `json:"device"`
	Name      string     `json:"cdiName"`
	Env       []string   `json:"env"`
	Tenant    *tenantRef `json:"tenant,omitempty"`
	TenantEnv []string   `json:"-"`
	TenantTLS *tenantTLS `json:"-"`
}

func (p preparedClaim) kubeletDevices() []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(p.Devices))
	for _, d := range p.Devices {
		out = append(out, kubeletplugin.Device{
			Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device,
			CDIDeviceIDs: []string{cdiKind + "=" + d.Name},
		})
	}
	return out
}

func loadCheckpoint(path string) (*checkpoint, error) {
	c := &checkpoint{path: path, Version: checkpointVersion, Claims: map[string]preparedClaim{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint %s: version %d, this plugin reads %d", path, c.Version, checkpointVersion)
	}
	if c.Claims == nil {
		c.Claims = map[string]preparedClaim{}
	}
	return c, nil
}

func (c *checkpoint) put(uid string, p preparedClaim) error {
	c.Claims[uid] = p
	if err := c.save(); err != nil {
		delete(c.Claims, uid)
		return err
	}
	return nil
}

func (c *checkpoint) remove(uid string) error {
	p, ok := c.Claims[uid]
	if !ok {
		return nil
	}
	delete(c.Claims, uid)
	if err := c.save(); err != nil {
		c.Claims[uid] = p
		return err
	}
	return nil
}

// save replaces the file whole (write, fsync, rename), so a crash leaves the old or
// the new checkpoint, never half of one.
func (c *checkpoint) save() error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(c.path, data)
}

// writeFileAtomic writes a file readable by its owner only (root: the container
// runtime that reads CDI specs runs as root), as a CDI spec may hold a tenant's token.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
