package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// acceleratorsAnnotation is what the registry writes on a claim it recorded: the
// accelerator each netaccel device held, comma-separated, in allocation order.
const acceleratorsAnnotation = "netaccel.io/accelerator"

// driver implements kubeletplugin.DRAPlugin. The helper serialises its calls; the
// mutex guards the checkpoint against the health endpoint and future callers anyway.
type driver struct {
	mu         sync.Mutex
	cdi        cdiWriter
	checkpoint *checkpoint
	binding    registryClient
	claims     claimGetter
	secrets    secretGetter
	// resolveWait bounds how long one prepare waits for the registry to record a
	// claim the scheduler has just allocated (below the kubelet's 45 s call timeout).
	resolveWait time.Duration
	cancel      context.CancelFunc
}

// claimGetter reads a claim again (its annotation may be newer than the helper's copy).
type claimGetter func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

var _ kubeletplugin.DRAPlugin = (*driver)(nil)

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(ctx, claim)
		result[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
		if err != nil {
			klog.FromContext(ctx).Error(err, "prepare", "claim", klog.KObj(claim))
		}
	}
	return result, nil
}

// prepare answers from the checkpoint when the claim was prepared before (the kubelet
// repeats the call after its own restart); otherwise it reads each device's binding
// from the registry, writes the CDI spec, and checkpoints the claim before answering.
func (d *driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if prepared, ok := d.checkpoint.Claims[string(claim.UID)]; ok {
		if err := d.restoreSpec(ctx, string(claim.UID), prepared); err != nil {
			return nil, err
		}
		return prepared.kubeletDevices(), nil
	}
	devices, err := d.resolveWithin(ctx, claim, d.resolveWait)
	if err != nil {
		return nil, err
	}
	if err := d.cdi.write(string(claim.UID), devices); err != nil {
		return nil, err
	}
	prepared := preparedClaim{Namespace: claim.Namespace, Name: claim.Name, Devices: devices}
	if err := d.checkpoint.put(string(claim.UID), prepared); err != nil {
		_ = d.cdi.remove(string(claim.UID))
		return nil, err
	}
	klog.FromContext(ctx).Info("prepared", "claim", klog.KObj(claim), "devices", len(devices))
	return prepared.kubeletDevices(), nil
}

// restoreSpec writes a checkpointed claim's CDI spec again when it is missing (a node
// reboot empties /var/run/cdi), its tenants' tokens and certificates read from their
// Secrets again (the checkpoint does not hold them). A spec that is there is left as it is: this plugin
// wrote it whole, and a Secret changed or deleted since must not fail the claim.
func (d *driver) restoreSpec(ctx context.Context, uid string, prepared preparedClaim) error {
	if d.cdi.exists(uid) {
		return nil
	}
	devices := append([]preparedDevice(nil), prepared.Devices...)
	for i := range devices {
		if devices[i].Tenant == nil {
			continue
		}
		env, files, err := tenantCredentials(ctx, d.secrets, devices[i].Tenant, devices[i].Name, devices[i].Env)
		if err != nil {
			return err
		}
		devices[i].TenantEnv, devices[i].TenantTLS = env, files
	}
	return d.cdi.write(uid, devices)
}

// resolveWithin retries resolve until it succeeds or wait has passed: the registry
// records a claim (annotation, then instance) a moment after the scheduler allocated
// it, and the kubelet may ask first. The claim is read again before each retry.
func (d *driver) resolveWithin(ctx context.Context, claim *resourceapi.ResourceClaim, wait time.Duration) ([]preparedDevice, error) {
	deadline := time.Now().Add(wait)
	for {
		devices, err := d.resolve(ctx, claim)
		var permanent permanentError
		if err == nil || errors.As(err, &permanent) || time.Now().After(deadline) {
			return devices, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if fresh, getErr := d.claims(ctx, claim.Namespace, claim.Name); getErr == nil && fresh.UID == claim.UID {
			claim = fresh
		}
	}
}

// resolve reads each netaccel device's binding from the registry, once.
func (d *driver) resolve(ctx context.Context, claim *resourceapi.ResourceClaim) ([]preparedDevice, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var accelerators []string
	if v, ok := claim.Annotations[acceleratorsAnnotation]; ok && v != "" {
		accelerators = strings.Split(v, ",")
	}
	var devices []preparedDevice
	n := 0
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if n >= len(accelerators) {
			return nil, fmt.Errorf("the registry has not recorded claim %s/%s yet (no %s annotation for device %d): is netaccel-registry --kubernetes running?",
				claim.Namespace, claim.Name, acceleratorsAnnotation, n)
		}
		instance := fmt.Sprintf("dra-%s-%d", claim.UID, n)
		b, err := d.binding.lookup(ctx, "dra."+accelerators[n], instance)
		if err != nil {
			return nil, err
		}
		if b.Node != r.Pool {
			return nil, fmt.Errorf("instance %s is bound on node %q, the claim's device is in pool %q", instance, b.Node, r.Pool)
		}
		device := preparedDevice{
			Request: r.Request, Pool: r.Pool, Device: r.Device,
			Name: cdiName(string(claim.UID), n), Env: d.binding.env(b),
		}
		if device.Tenant, err = tenantOf(claim, r.Request); err != nil {
			return nil, err
		}
		if device.Tenant != nil {
			device.TenantEnv, device.TenantTLS, err = tenantCredentials(ctx, d.secrets, device.Tenant, device.Name, device.Env)
			if err != nil {
				return nil, err
			}
		}
		devices = append(devices, device)
		n++
	}
	return devices, nil
}

// UnprepareResourceClaims removes the CDI spec, its certificate files and the
// checkpoint entry. The instance
// itself is the registry's: it releases it when the claim is deallocated or deleted.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	result := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := d.cdi.remove(string(claim.UID))
		if err == nil {
			err = d.checkpoint.remove(string(claim.UID))
		}
		result[claim.UID] = err
		klog.FromContext(ctx).Info("unprepared", "claim", claim.String(), "err", err)
	}
	return result, nil
}

// HandleError: this plugin publishes no slices, so a background error is one of its
// gRPC servers; a fatal one stops the plugin (its DaemonSet restarts it).
func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel()
	}
}
