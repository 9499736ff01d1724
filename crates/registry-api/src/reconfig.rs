//! Reconfiguration requests: a node asks before it loads another accelerator into a
//! slot (`POST /v1/reconfigurations`), and the registry answers a verdict.

use serde::{Deserialize, Serialize};

use crate::names::check_name;
use crate::SlotId;

/// `POST /v1/reconfigurations`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconfigurationRequest {
    pub node: String,
    pub device: String,
    pub slot: SlotId,
    pub accelerator: String,
    /// The instance on whose behalf the node asks (absent: an operator's request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl ReconfigurationRequest {
    pub fn validate(&self) -> Result<(), String> {
        check_name("node", &self.node)?;
        check_name("device", &self.device)?;
        check_name("accelerator", &self.accelerator)?;
        if let Some(i) = &self.instance {
            check_name("instance", i)?;
        }
        Ok(())
    }
}

/// The answer to a reconfiguration request: `200` with `allowed: true` and the
/// instances the registry moved off the slot, or `409` with `allowed: false` and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Verdict {
    pub fn allowed(migrated: Vec<String>) -> Verdict {
        Verdict {
            allowed: true,
            migrated: Some(migrated),
            reason: None,
        }
    }

    pub fn refused(reason: impl Into<String>) -> Verdict {
        Verdict {
            allowed: false,
            migrated: None,
            reason: Some(reason.into()),
        }
    }
}
