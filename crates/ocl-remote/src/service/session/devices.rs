//! The devices of a session: those its admission holds (see
//! [`crate::service::gate::DeviceMask`]), the one place every request that names a
//! device asks, and what a request for another costs the client (`CL_INVALID_DEVICE`)
//! and the node (a log line and an audit line, once per device and session).

use super::Session;
use crate::cl::{self, ClInt};
use crate::ffi::Handle;
use crate::service::gate::DeviceMask;

impl Session<'_> {
    /// The real handles of devices `devices`, `CL_INVALID_DEVICE` if one is not a device
    /// of this session's (see [`Session::device`]).
    pub(super) fn device_handles(&self, devices: &[u32]) -> Result<Vec<Handle>, ClInt> {
        devices
            .iter()
            .map(|d| self.device(*d).map(|e| e.raw.0))
            .collect()
    }

    /// The devices this session may see and use (its admission's; all without a gate).
    pub(super) fn devices(&self) -> DeviceMask {
        self.admission
            .as_ref()
            .map_or(DeviceMask::ALL, |a| a.devices)
    }

    /// Device `index` (node-wide), if it is one of this session's: every request that
    /// names a device asks here. A device outside the admission is refused as one
    /// that does not exist, `CL_INVALID_DEVICE` (its client was never told of it, so
    /// it forged the index); the first refusal of each device in a session is logged
    /// and handed to the gate to audit (in a runtime process, which has no gate, the
    /// node reads the log line back: see `isolate`).
    pub(super) fn device(&self, index: u32) -> Result<&crate::service::DeviceEntry, ClInt> {
        let entry = self.shared.runtime.device(index)?;
        if self.devices().contains(index) {
            return Ok(entry);
        }
        let Some(admission) = &self.admission else {
            unreachable!("a session without an admission has every device");
        };
        debug_assert!(
            (index as usize) < DeviceMask::DEVICES_MAX,
            "the service shares at most that many devices"
        );
        let bit = 1u64 << index;
        if self.devices_refused.get() & bit == 0 {
            self.devices_refused.set(self.devices_refused.get() | bit);
            let line = crate::service::gate::device_refusal(&admission.tenant, index);
            crate::service::log::log!(WARN, "{line}");
            if let Some(gate) = &self.shared.config.gate {
                gate.refused_device(&self.caller, &admission.tenant, index);
            }
        }
        Err(cl::CL_INVALID_DEVICE)
    }
}
