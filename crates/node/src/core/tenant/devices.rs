//! Which remote OpenCL devices a tenant may see and use: the patterns of its
//! `opencl_devices` policy key, checked at load and matched against the node's shared
//! devices when a session is admitted (`front::opencl` makes the session's device mask
//! of the answers).
//!
//! A device is named two ways, and a pattern says which it means:
//! - a pattern of digits only (`"0"`, `"3"`) is a device's node-wide index: the number
//!   clients and `/metrics` (label `device`) know it by, unique on the node, stable as
//!   long as the node shares the same platforms. It is the way to tell two identical
//!   devices apart (two GPUs of one model have one name);
//! - any other pattern is matched against the device's name (`CL_DEVICE_NAME`, label
//!   `name` in `/metrics`): a name, or a prefix and a final `*` (`"NVIDIA*"`, `"*"`),
//!   the same patterns as `call` and `load`.
//!
//! Absent, a tenant with `opencl = true` may use every shared device (as before the
//! key existed); an empty list, none.
//!
//! Not here: whether the tenant may use remote OpenCL at all (`opencl`, see
//! [`super::auth::Action::OpenCl`]), the mask's wire form (`ocl_remote::service::gate`).

use credential::{check_pattern, matches_any};
use ocl_remote::service::gate::DeviceMask;

/// The most devices a node shares, so the highest index a pattern may name plus one.
pub const DEVICES_MAX: usize = DeviceMask::DEVICES_MAX;

/// Whether `pattern` names a device by its index (digits only).
fn index_of(pattern: &str) -> Option<usize> {
    if pattern.is_empty() || !pattern.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Too many digits for a `usize` is an index past every bound all the same.
    Some(pattern.parse().unwrap_or(usize::MAX))
}

/// Checks the `opencl_devices` patterns of `who`: names or prefixes as `call`'s, and
/// indices below [`DEVICES_MAX`].
pub fn check(who: &str, patterns: &[String]) -> Result<(), String> {
    for p in patterns {
        match index_of(p) {
            Some(index) if index >= DEVICES_MAX => {
                return Err(format!(
                    "{who}: opencl_devices `{p}` is not a device index: a node shares at \
                     most {DEVICES_MAX} OpenCL devices, numbered from 0"
                ));
            }
            Some(_) => {}
            None => check_pattern(&format!("{who}: opencl_devices"), p)?,
        }
    }
    Ok(())
}

/// Whether the device of node-wide index `index`, named `name`, matches one of
/// `patterns` (see the module docs).
pub fn matches(patterns: &[String], index: usize, name: &str) -> bool {
    patterns.iter().any(|p| match index_of(p) {
        Some(i) => i == index,
        None => matches_any(std::slice::from_ref(p), name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    /// Two identical CPU devices and a GPU, as a node shares them.
    const DEVICES: [&str; 3] = ["pthread-skylake", "pthread-skylake", "NVIDIA H200"];

    fn granted(p: &[&str]) -> Vec<usize> {
        let p = patterns(p);
        (0..DEVICES.len())
            .filter(|&i| matches(&p, i, DEVICES[i]))
            .collect()
    }

    #[test]
    fn indices_tell_identical_devices_apart_and_names_match_by_pattern() {
        assert_eq!(granted(&["0"]), [0]);
        assert_eq!(granted(&["1", "2"]), [1, 2]);
        // A name grants every device of that name.
        assert_eq!(granted(&["pthread-skylake"]), [0, 1]);
        assert_eq!(granted(&["NVIDIA*"]), [2]);
        assert_eq!(granted(&["*"]), [0, 1, 2]);
        // Digits are an index, never a name prefix; a final `*` makes a name pattern.
        assert_eq!(granted(&["00"]), [0]);
        assert_eq!(granted(&["1*"]), Vec::<usize>::new());
        assert_eq!(granted(&["7", "pthread"]), Vec::<usize>::new());
        assert_eq!(
            granted(&[]),
            Vec::<usize>::new(),
            "an empty list grants none"
        );
    }

    #[test]
    fn patterns_are_checked_at_load() {
        let who = "tenant `a`";
        assert_eq!(
            check(who, &patterns(&["0", "63", "gpu*", "*", "x"])),
            Ok(())
        );
        let err = check(who, &patterns(&["64"])).unwrap_err();
        assert_eq!(
            err,
            "tenant `a`: opencl_devices `64` is not a device index: a node shares at most \
             64 OpenCL devices, numbered from 0"
        );
        assert!(check(who, &patterns(&["99999999999999999999999"])).is_err());
        for bad in ["", "a*b", "**"] {
            let err = check(who, &patterns(&[bad])).unwrap_err();
            assert!(
                err.starts_with("tenant `a`: opencl_devices: pattern"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn a_mask_of_the_matches_holds_the_granted_devices_only() {
        let p = patterns(&["2", "pthread-skylake"]);
        let mask = DeviceMask::from_fn(DEVICES.len(), |i| matches(&p, i, DEVICES[i]));
        assert!(mask.contains(0) && mask.contains(1) && mask.contains(2));
        let p = patterns(&["1"]);
        let mask = DeviceMask::from_fn(DEVICES.len(), |i| matches(&p, i, DEVICES[i]));
        assert!(!mask.contains(0) && mask.contains(1) && !mask.contains(2));
        let none = DeviceMask::from_fn(DEVICES.len(), |i| matches(&[], i, DEVICES[i]));
        assert!(none.is_empty());
    }

    #[test]
    fn a_policy_grants_its_devices_and_a_reload_changes_them() {
        use crate::core::tenant::auth::{Action, Anonymous, Auth, AuthSection, Base};
        use crate::core::tenant::TenantConfig;
        let tenant = |name: &str, token: &str, devices: Option<&[&str]>| TenantConfig {
            name: name.to_string(),
            token: token.to_string(),
            opencl: Some(true),
            opencl_devices: devices.map(patterns),
            ..TenantConfig::default()
        };
        let section = |tenants| AuthSection {
            tenants,
            anonymous: Anonymous::Refuse,
            admin_token: Some("adm".to_string()),
            token_check_budget: std::time::Duration::from_secs(1),
        };
        let auth = Auth::new(&section(vec![
            tenant("a", "ta", Some(&["0"])),
            tenant("b", "tb", None),
            tenant("c", "tc", Some(&[])),
        ]))
        .unwrap();
        let seen = |auth: &Auth, token: &str| -> Vec<usize> {
            let p = auth.identify(&Base::Connection(1), Some(token)).unwrap();
            (0..DEVICES.len())
                .filter(|&index| {
                    p.may(Action::OpenClDevice {
                        index,
                        name: DEVICES[index],
                    })
                })
                .collect()
        };
        assert_eq!(seen(&auth, "ta"), [0]);
        assert_eq!(seen(&auth, "tb"), [0, 1, 2], "absent: every device");
        assert_eq!(seen(&auth, "tc"), Vec::<usize>::new(), "empty: none");
        assert_eq!(
            seen(&auth, "adm"),
            [0, 1, 2],
            "the admin token: every device"
        );
        auth.reload(&section(vec![tenant("a", "ta", Some(&["NVIDIA*"]))]))
            .unwrap();
        assert_eq!(seen(&auth, "ta"), [2]);
        // Refused at load (and at reload, which then changes nothing).
        let mut without = tenant("d", "td", Some(&["0"]));
        without.opencl = None;
        let err = auth.reload(&section(vec![without])).err().unwrap();
        assert_eq!(
            err,
            "tenant `d`: opencl_devices grants nothing without opencl = true"
        );
        let err = Auth::new(&section(vec![tenant("e", "te", Some(&["64"]))]))
            .err()
            .unwrap();
        assert!(
            err.contains("opencl_devices `64` is not a device index"),
            "{err}"
        );
        assert_eq!(seen(&auth, "ta"), [2]);
    }
}
