//! Room in the OpenCL runtime's own kernel cache, checked before a slot loads or runs
//! a kernel on PoCL.
//!
//! PoCL compiles a kernel's work-group function the first time the kernel runs with a
//! new work size, and writes it to its cache directory. When it cannot write there (a
//! full disk), it prints `Final linking of kernel … failed` and aborts the process:
//! the whole node, every slot and connection with it, goes down for one call (found
//! by `bench/faults`, `cache-disk-full`). An abort cannot be caught, so the node looks
//! first: a load or a call on PoCL whose cache's file system has less than
//! [`ROOM_BYTES_MIN`] free is refused with a message that says where and why, and the
//! node serves on. The check is a `statvfs`, about a microsecond, beside a kernel run
//! of tens of microseconds at least.
//!
//! Not for: the node's own program cache ([`super::programs`]), whose writes are
//! best-effort (a full disk there only costs a rebuild after a restart); other OpenCL
//! platforms, whose behaviour on a full disk we have not seen.

use std::path::{Path, PathBuf};

/// Free bytes below which a load or call is refused: a small kernel's linked
/// work-group function is tens of kilobytes, and PoCL writes its bitcode beside it.
const ROOM_BYTES_MIN: u64 = 4 << 20;

/// The directory PoCL caches compiled kernels in.
pub(crate) struct RuntimeCache {
    dir: PathBuf,
}

impl RuntimeCache {
    /// PoCL's cache, when `platform_name` is PoCL's: `POCL_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/pocl/kcache`, else `$HOME/.cache/pocl/kcache` (as PoCL
    /// chooses it). `None` for other platforms.
    pub(crate) fn of_platform(platform_name: &str) -> Option<RuntimeCache> {
        if !platform_name.contains("Portable Computing Language") {
            return None;
        }
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let dir = env("POCL_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| env("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("pocl/kcache")))
            .or_else(|| env("HOME").map(|d| PathBuf::from(d).join(".cache/pocl/kcache")))?;
        Some(RuntimeCache { dir })
    }

    /// `Err` saying why when the cache's file system has too little room for PoCL
    /// to write a compiled kernel.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_room(&self.dir, ROOM_BYTES_MIN)
    }
}

fn check_room(dir: &Path, min: u64) -> Result<(), String> {
    match free_bytes(dir) {
        Some(free) if free < min => Err(format!(
            "the OpenCL runtime's kernel cache {} has {free} bytes free, under {min}: PoCL \
             aborts the node when it cannot write a compiled kernel, so OpenCL loads and calls \
             are refused until there is room (or set POCL_CACHE_DIR to a disk that has it)",
            dir.display()
        )),
        // Unknown (no such directory yet, say): PoCL makes it; nothing to refuse on.
        _ => Ok(()),
    }
}

/// Bytes free to unprivileged writers on the file system of `dir`, or of its nearest
/// existing ancestor.
fn free_bytes(dir: &Path) -> Option<u64> {
    let existing = dir.ancestors().find(|p| p.exists())?;
    let path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and a zeroed struct statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` outlives the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // fsblkcnt_t and c_ulong are narrower than u64 on some targets.
    #[allow(clippy::useless_conversion)]
    Some(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pocl_has_a_runtime_cache_to_watch() {
        assert!(RuntimeCache::of_platform("NVIDIA CUDA").is_none());
        assert!(RuntimeCache::of_platform("Intel(R) FPGA SDK for OpenCL(TM)").is_none());
    }

    #[test]
    fn a_file_system_without_room_is_refused_with_where_and_why() {
        let dir = std::env::temp_dir();
        assert!(free_bytes(&dir).is_some_and(|b| b > 0));
        // Nothing has u64::MAX bytes free.
        let refused = check_room(&dir, u64::MAX).unwrap_err();
        assert!(refused.contains(&dir.display().to_string()), "{refused}");
        assert!(refused.contains("POCL_CACHE_DIR"), "{refused}");
        check_room(&dir, 1).unwrap();
        // A directory not made yet is judged by its nearest existing ancestor.
        assert_eq!(
            free_bytes(&dir.join("not/made/yet")).is_some(),
            free_bytes(&dir).is_some()
        );
    }
}
