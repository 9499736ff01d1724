//! A tenant's quota as configured: the limits only, so that a tenant's configuration
//! (`core::tenant`) can hold them without depending on the accounts that enforce them
//! (`core::quota`, which depends on the tenant's identity).

use serde::{Deserialize, Serialize};

/// A tenant's limits (`[tenants.quota]`, `[anonymous_quota]`); an unset one is no limit.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaConfig {
    /// Calls a second, sustained.
    pub calls_per_s: Option<u64>,
    /// Calls the tenant may make at once after being idle; unset: a tenth of a
    /// second's worth, and at least 1.
    pub calls_burst: Option<u64>,
    /// Request payload bytes a second, sustained.
    pub bytes_per_s: Option<u64>,
    /// Bytes the tenant may send at once after being idle; unset: a tenth of a
    /// second's worth, and at least 1.
    pub bytes_burst: Option<u64>,
    /// Calls of the tenant queued or running at once.
    pub concurrent_calls_max: Option<usize>,
    /// Bytes of objects the tenant may hold in the object store.
    pub object_bytes_max: Option<usize>,
    /// Bytes of OpenCL buffers and images the tenant's remote OpenCL sessions may hold
    /// on the node's devices, all together.
    pub opencl_bytes_max: Option<u64>,
}

impl QuotaConfig {
    /// Checks the limits of `who` (its name in the configuration): each at least 1.
    pub fn validate(&self, who: &str) -> Result<(), String> {
        for (name, count) in [
            ("calls_per_s", self.calls_per_s),
            ("bytes_per_s", self.bytes_per_s),
            ("calls_burst", self.calls_burst),
            ("bytes_burst", self.bytes_burst),
            (
                "concurrent_calls_max",
                self.concurrent_calls_max.map(|n| n as u64),
            ),
            ("opencl_bytes_max", self.opencl_bytes_max),
        ] {
            if count == Some(0) {
                return Err(format!("{who}: {name} must be at least 1"));
            }
        }
        Ok(())
    }
}
