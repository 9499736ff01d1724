//! What the node says its platforms and devices are: the runtime's answers to info
//! queries, made true for a client of the remote path.
//!
//! The remote path (protocol and ICD) implements OpenCL 3.0 with the features OpenCL
//! 3.0 makes optional that it cannot carry reported as unsupported: shared virtual
//! memory (its pointers are the node's), pipes and device-side enqueue (no host calls
//! for them in the ICD), sub-groups (`clGetKernelSubGroupInfo` does not reach the
//! node), programs from IL and built-in kernels. So the node presents every device as
//! the OpenCL 3.0 device a client can use: version strings are capped at 3.0, the
//! queries of those features answer "unsupported" ([`fixed_device_info`]) whatever
//! the runtime says, and only extensions that need no host entry point the ICD lacks
//! are listed (kernel-language extensions compile on the node; ones with entry points
//! of their own, such as `cl_khr_command_buffer` or `cl_khr_il_program`, are left
//! out), in `CL_DEVICE_EXTENSIONS` and `CL_DEVICE_EXTENSIONS_WITH_VERSION` alike.
//! `CL_DEVICE_OPENCL_C_FEATURES` leaves out the features of what is unsupported, and
//! the atomic capabilities name no scope the compiler has no feature macro for, so
//! that they agree with the `__opencl_c_*` macros kernels see. Memory sizes say what
//! one client may allocate: the device as if it had no more memory than the client's
//! buffer quota ([`Memory`]), so a program that sizes its buffers by
//! `CL_DEVICE_GLOBAL_MEM_SIZE` and `CL_DEVICE_MAX_MEM_ALLOC_SIZE` gets them.
//!
//! Programs compile as the client asks: the runtime gets the client's options and
//! source unchanged.
//!
//! Pure functions over the runtime's bytes, so that they can be tested without one.

use crate::cl::{self, ClUint};

/// The OpenCL version the remote path implements.
const VERSION: (u32, u32) = (3, 0);

/// Extensions a remote client can use as it would locally: kernel-language features
/// (the node compiles kernels) and device queries (forwarded). Anything else is left
/// out: its host entry points do not exist in the ICD.
const EXTENSIONS_SUPPORTED: &[&str] = &[
    "cl_khr_byte_addressable_store",
    "cl_khr_global_int32_base_atomics",
    "cl_khr_global_int32_extended_atomics",
    "cl_khr_local_int32_base_atomics",
    "cl_khr_local_int32_extended_atomics",
    "cl_khr_int64_base_atomics",
    "cl_khr_int64_extended_atomics",
    "cl_khr_fp64",
    "cl_khr_fp16",
    "cl_khr_3d_image_writes",
    "cl_khr_depth_images",
    "cl_khr_srgb_image_writes",
    "cl_khr_select_fprounding_mode",
    "cl_khr_integer_dot_product",
    "cl_khr_expect_assume",
    "cl_khr_extended_bit_ops",
    "cl_khr_extended_async_copies",
    "cl_khr_kernel_clock",
    "cl_khr_work_group_uniform_arithmetic",
    "cl_khr_device_uuid",
    "cl_khr_pci_bus_info",
    "cl_ext_float_atomics",
    "cl_ext_cxx_for_opencl",
    // The platform's: the ICD is one.
    "cl_khr_icd",
];

/// The OpenCL C features (`CL_DEVICE_OPENCL_C_FEATURES`) of what the remote path
/// does not support (see the module's documentation): left out of the list.
const FEATURES_UNSUPPORTED: &[&str] = &[
    "__opencl_c_pipes",
    "__opencl_c_device_enqueue",
    "__opencl_c_subgroups",
];

/// The feature a kernel needs to use `memory_scope_all_devices`.
const FEATURE_SCOPE_ALL_DEVICES: &str = "__opencl_c_atomic_scope_all_devices";

/// The platform's answer to `param` as a client sees it, from the runtime's `raw`.
pub(crate) fn platform_info(param: ClUint, raw: Vec<u8>) -> Vec<u8> {
    match param {
        cl::CL_PLATFORM_VERSION => capped_version(&raw, b"OpenCL "),
        cl::CL_PLATFORM_EXTENSIONS => supported_extensions(&raw),
        cl::CL_PLATFORM_EXTENSIONS_WITH_VERSION => {
            name_versions(&raw, |name, _| EXTENSIONS_SUPPORTED.contains(&name))
        }
        _ => raw,
    }
}

/// The platform's answers that do not depend on the runtime: the ICD does not forward
/// `clGetDeviceAndHostTimer`, so the host timer is unsupported (resolution 0).
pub(crate) fn fixed_platform_info(param: ClUint) -> Option<Vec<u8>> {
    (param == cl::CL_PLATFORM_HOST_TIMER_RESOLUTION).then(|| 0u64.to_ne_bytes().to_vec())
}

/// The device's answers that do not depend on the runtime: the optional features of
/// OpenCL 3.0 the remote path does not support, answered as a device without them
/// answers (0, `CL_FALSE`, an empty string or list).
pub(crate) fn fixed_device_info(param: ClUint) -> Option<Vec<u8>> {
    let answer = match param {
        cl::CL_DEVICE_SVM_CAPABILITIES
        | cl::CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES
        | cl::CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES => 0u64.to_ne_bytes().to_vec(),
        cl::CL_DEVICE_QUEUE_ON_DEVICE_PREFERRED_SIZE
        | cl::CL_DEVICE_QUEUE_ON_DEVICE_MAX_SIZE
        | cl::CL_DEVICE_MAX_ON_DEVICE_QUEUES
        | cl::CL_DEVICE_MAX_ON_DEVICE_EVENTS
        | cl::CL_DEVICE_PIPE_SUPPORT
        | cl::CL_DEVICE_MAX_PIPE_ARGS
        | cl::CL_DEVICE_PIPE_MAX_ACTIVE_RESERVATIONS
        | cl::CL_DEVICE_PIPE_MAX_PACKET_SIZE
        | cl::CL_DEVICE_MAX_NUM_SUB_GROUPS
        | cl::CL_DEVICE_SUB_GROUP_INDEPENDENT_FORWARD_PROGRESS
        // 2D images from buffers (cl_khr_image2d_from_buffer): the ICD makes images on
        // buffers of one dimension only.
        | cl::CL_DEVICE_IMAGE_PITCH_ALIGNMENT
        | cl::CL_DEVICE_IMAGE_BASE_ADDRESS_ALIGNMENT => 0u32.to_ne_bytes().to_vec(),
        // clCreateProgramWithIL and clCreateProgramWithBuiltInKernels do not reach the
        // node.
        cl::CL_DEVICE_IL_VERSION | cl::CL_DEVICE_BUILT_IN_KERNELS => vec![0],
        cl::CL_DEVICE_ILS_WITH_VERSION | cl::CL_DEVICE_BUILT_IN_KERNELS_WITH_VERSION => {
            Vec::new()
        }
        _ => return None,
    };
    Some(answer)
}

/// The memory sizes of a device as a client sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memory {
    /// `CL_DEVICE_GLOBAL_MEM_SIZE`.
    pub global: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE` (also the bound of
    /// `CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE`).
    pub max_alloc: u64,
}

/// The smallest `CL_DEVICE_MAX_MEM_ALLOC_SIZE` OpenCL 1.2 allows, for a device of
/// `global` bytes: a quarter of it, and at least 128 MiB.
fn max_alloc_min(global: u64) -> u64 {
    (global / 4).max(128 << 20)
}

/// `size` rounded down to whole MiB (sizes below 1 MiB to a multiple of 128 bytes):
/// programs use the largest allocation as a buffer size, and a fill of it with a
/// pattern (up to 128 bytes) must divide it, as for a native device's round sizes (the
/// CTS's `test_thread_dimensions` fills such a buffer).
fn round_down(size: u64) -> u64 {
    let unit = if size >= 1 << 20 { 1 << 20 } else { 128 };
    (size / unit * unit).max(size.min(unit))
}

impl Memory {
    /// A device of `global` bytes with allocations of up to `max_alloc`, shrunk to a
    /// client's quota of `quota` bytes: a device of that size with the same proportion
    /// of one allocation to the whole (PoCL here: 8 of 21.5 GiB, so 380 MiB of a 1 GiB
    /// quota), within what OpenCL 1.2 requires and the device allows. Telling a client it may allocate its
    /// whole quota at once was true, but left no room for the next buffer: programs
    /// that allocate the largest buffer allowed and then a small one (the CTS's
    /// `test_allocations`) failed. Unknown sizes count as the quota.
    pub fn within_quota(global: Option<u64>, max_alloc: Option<u64>, quota: u64) -> Memory {
        let device_global = global.unwrap_or(quota).max(1);
        let device_max_alloc = max_alloc.unwrap_or(device_global).min(device_global);
        let global = device_global.min(quota);
        // The device's proportion, computed without overflow (sizes are below 2^64).
        let scaled =
            (u128::from(device_max_alloc) * u128::from(global) / u128::from(device_global)) as u64;
        let max_alloc = scaled
            .max(max_alloc_min(global))
            .min(global)
            .min(device_max_alloc);
        Memory {
            global,
            max_alloc: round_down(max_alloc),
        }
    }
}

/// The device's answer to `param` as a client sees it, from the runtime's `raw`, the
/// sizes of `memory` and the runtime's OpenCL C `features` (the names of its
/// `CL_DEVICE_OPENCL_C_FEATURES`).
pub(crate) fn device_info(
    param: ClUint,
    raw: Vec<u8>,
    memory: &Memory,
    features: &[String],
) -> Vec<u8> {
    match param {
        cl::CL_DEVICE_VERSION => capped_version(&raw, b"OpenCL "),
        cl::CL_DEVICE_OPENCL_C_VERSION => capped_version(&raw, b"OpenCL C "),
        cl::CL_DEVICE_NUMERIC_VERSION => match <[u8; 4]>::try_from(raw.as_slice()) {
            Ok(v) => u32::from_ne_bytes(v)
                .min(cl::make_version(VERSION.0, VERSION.1, 0))
                .to_ne_bytes()
                .to_vec(),
            Err(_) => raw,
        },
        cl::CL_DEVICE_OPENCL_C_ALL_VERSIONS => name_versions(&raw, |_, version| {
            version < cl::make_version(VERSION.0, VERSION.1 + 1, 0)
        }),
        cl::CL_DEVICE_EXTENSIONS => supported_extensions(&raw),
        cl::CL_DEVICE_EXTENSIONS_WITH_VERSION => {
            name_versions(&raw, |name, _| EXTENSIONS_SUPPORTED.contains(&name))
        }
        cl::CL_DEVICE_OPENCL_C_FEATURES => {
            name_versions(&raw, |name, _| !FEATURES_UNSUPPORTED.contains(&name))
        }
        // A kernel can use `memory_scope_all_devices` only with the feature macro for
        // it (PoCL 3.1 claims the scope and defines no such macro).
        cl::CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES | cl::CL_DEVICE_ATOMIC_FENCE_CAPABILITIES => {
            match <[u8; 8]>::try_from(raw.as_slice()) {
                Ok(v) if !features.iter().any(|f| f == FEATURE_SCOPE_ALL_DEVICES) => {
                    (u64::from_ne_bytes(v) & !cl::CL_DEVICE_ATOMIC_SCOPE_ALL_DEVICES)
                        .to_ne_bytes()
                        .to_vec()
                }
                _ => raw,
            }
        }
        cl::CL_DEVICE_GLOBAL_MEM_SIZE => memory.global.to_ne_bytes().to_vec(),
        cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE => memory.max_alloc.to_ne_bytes().to_vec(),
        cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE => match <[u8; 8]>::try_from(raw.as_slice()) {
            Ok(v) => u64::from_ne_bytes(v)
                .min(memory.max_alloc)
                .to_ne_bytes()
                .to_vec(),
            Err(_) => raw,
        },
        // Pixels of a 1D image on a buffer: a buffer of that many pixels of the smallest
        // format (1 byte) must be allocatable, as natively (the CTS's
        // `min_max_image_buffer_size` checks it).
        cl::CL_DEVICE_IMAGE_MAX_BUFFER_SIZE => match <[u8; 8]>::try_from(raw.as_slice()) {
            Ok(v) => u64::from_ne_bytes(v)
                .min(memory.max_alloc)
                .to_ne_bytes()
                .to_vec(),
            Err(_) => raw,
        },
        _ => raw,
    }
}

/// The names in a `cl_name_version` array (as `CL_DEVICE_OPENCL_C_FEATURES` answers);
/// a malformed array has none.
pub(crate) fn names(raw: &[u8]) -> Vec<String> {
    name_version_entries(raw)
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The entries of a `cl_name_version` array: each a version number and a NUL-padded
/// name. A length that is not a whole number of entries gives none.
fn name_version_entries(raw: &[u8]) -> impl Iterator<Item = (&str, u32)> {
    const ENTRY: usize = 4 + cl::CL_NAME_VERSION_MAX_NAME_SIZE;
    let whole = raw.len() % ENTRY == 0;
    raw.chunks_exact(ENTRY).filter(move |_| whole).map(|entry| {
        let version = u32::from_ne_bytes(entry[..4].try_into().expect("4 bytes"));
        let name = &entry[4..];
        let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        (std::str::from_utf8(&name[..len]).unwrap_or(""), version)
    })
}

/// A `cl_name_version` array with only the entries `keep` accepts, each as it was. A
/// malformed array is passed on as it is.
fn name_versions(raw: &[u8], keep: impl Fn(&str, u32) -> bool) -> Vec<u8> {
    const ENTRY: usize = 4 + cl::CL_NAME_VERSION_MAX_NAME_SIZE;
    if raw.len() % ENTRY != 0 {
        return raw.to_vec();
    }
    raw.chunks_exact(ENTRY)
        .zip(name_version_entries(raw))
        .filter(|(_, (name, version))| keep(name, *version))
        .flat_map(|(entry, _)| entry.iter().copied())
        .collect()
}

/// A version string `<prefix><major>.<minor><rest>` with the version lowered to
/// [`VERSION`] if it is higher; anything else unchanged.
fn capped_version(raw: &[u8], prefix: &[u8]) -> Vec<u8> {
    let Some(after) = raw.strip_prefix(prefix) else {
        return raw.to_vec();
    };
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let major_len = digits(after);
    if major_len == 0 || after.get(major_len) != Some(&b'.') {
        return raw.to_vec();
    }
    let minor_len = digits(&after[major_len + 1..]);
    if minor_len == 0 {
        return raw.to_vec();
    }
    let number = |s: &[u8]| std::str::from_utf8(s).ok()?.parse::<u32>().ok();
    let version = (
        number(&after[..major_len]),
        number(&after[major_len + 1..major_len + 1 + minor_len]),
    );
    let (Some(major), Some(minor)) = version else {
        return raw.to_vec();
    };
    if (major, minor) <= VERSION {
        return raw.to_vec();
    }
    let mut out = prefix.to_vec();
    out.extend_from_slice(format!("{}.{}", VERSION.0, VERSION.1).as_bytes());
    out.extend_from_slice(&after[major_len + 1 + minor_len..]);
    out
}

/// A space-separated extension list (NUL-terminated) with only the extensions a remote
/// client can use.
fn supported_extensions(raw: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(raw);
    let kept: Vec<&str> = text
        .trim_end_matches('\0')
        .split_ascii_whitespace()
        .filter(|e| EXTENSIONS_SUPPORTED.contains(e))
        .collect();
    let mut out = kept.join(" ").into_bytes();
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMORY: Memory = Memory {
        global: 1,
        max_alloc: 1,
    };

    fn c(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v
    }

    #[test]
    fn versions_above_3_0_are_capped_and_the_rest_is_kept() {
        let cap = |s: &str, prefix: &str| {
            String::from_utf8(capped_version(&c(s), prefix.as_bytes())).unwrap()
        };
        assert_eq!(
            cap("OpenCL 3.0 PoCL HSTR: pthread", "OpenCL "),
            "OpenCL 3.0 PoCL HSTR: pthread\0"
        );
        assert_eq!(cap("OpenCL 3.1 x", "OpenCL "), "OpenCL 3.0 x\0");
        assert_eq!(cap("OpenCL 4.10 x", "OpenCL "), "OpenCL 3.0 x\0");
        assert_eq!(cap("OpenCL 2.1 y", "OpenCL "), "OpenCL 2.1 y\0");
        assert_eq!(cap("OpenCL 1.2 PoCL", "OpenCL "), "OpenCL 1.2 PoCL\0");
        assert_eq!(cap("OpenCL C 3.5 ", "OpenCL C "), "OpenCL C 3.0 \0");
        assert_eq!(cap("OpenCL C 1.2 PoCL", "OpenCL C "), "OpenCL C 1.2 PoCL\0");
        // Not a version string: unchanged.
        for odd in [
            "OpenCL",
            "OpenCL 3",
            "OpenCL 3.x",
            "Vendor 3.0",
            "OpenCL .5",
        ] {
            assert_eq!(cap(odd, "OpenCL "), format!("{odd}\0"));
        }
        assert_eq!(
            capped_version(b"OpenCL 99999999999.0", b"OpenCL "),
            b"OpenCL 99999999999.0"
        );
        let numeric = |v: u32| {
            let raw = v.to_ne_bytes().to_vec();
            let out = device_info(cl::CL_DEVICE_NUMERIC_VERSION, raw, &MEMORY, &[]);
            u32::from_ne_bytes(out.try_into().unwrap())
        };
        assert_eq!(
            numeric(cl::make_version(3, 0, 0)),
            cl::make_version(3, 0, 0)
        );
        assert_eq!(
            numeric(cl::make_version(3, 1, 2)),
            cl::make_version(3, 0, 0)
        );
        assert_eq!(
            numeric(cl::make_version(1, 2, 0)),
            cl::make_version(1, 2, 0)
        );
    }

    /// A `cl_name_version` array of `entries`.
    fn nv(entries: &[(&str, u32)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, version) in entries {
            out.extend_from_slice(&version.to_ne_bytes());
            let mut padded = [0u8; cl::CL_NAME_VERSION_MAX_NAME_SIZE];
            padded[..name.len()].copy_from_slice(name.as_bytes());
            out.extend_from_slice(&padded);
        }
        out
    }

    #[test]
    fn name_version_lists_keep_what_a_remote_client_can_use() {
        let v1 = cl::make_version(1, 0, 0);
        let v3 = cl::make_version(3, 0, 0);
        let pocl = nv(&[
            ("cl_khr_fp64", v1),
            ("cl_khr_command_buffer", cl::make_version(0, 9, 0)),
            ("cl_khr_3d_image_writes", v1),
        ]);
        assert_eq!(
            device_info(cl::CL_DEVICE_EXTENSIONS_WITH_VERSION, pocl, &MEMORY, &[]),
            nv(&[("cl_khr_fp64", v1), ("cl_khr_3d_image_writes", v1)])
        );
        assert_eq!(
            platform_info(
                cl::CL_PLATFORM_EXTENSIONS_WITH_VERSION,
                nv(&[("cl_khr_icd", v1), ("cl_pocl_content_size", v1)])
            ),
            nv(&[("cl_khr_icd", v1)])
        );
        let features = nv(&[
            ("__opencl_c_images", v3),
            ("__opencl_c_pipes", v3),
            ("__opencl_c_device_enqueue", v3),
            ("__opencl_c_subgroups", v3),
            ("__opencl_c_fp64", v3),
        ]);
        assert_eq!(
            device_info(
                cl::CL_DEVICE_OPENCL_C_FEATURES,
                features.clone(),
                &MEMORY,
                &[]
            ),
            nv(&[("__opencl_c_images", v3), ("__opencl_c_fp64", v3)])
        );
        assert_eq!(
            names(&features)[..2],
            ["__opencl_c_images", "__opencl_c_pipes"]
        );
        let c_versions = nv(&[
            ("OpenCL C", cl::make_version(1, 2, 0)),
            ("OpenCL C", v3),
            ("OpenCL C", cl::make_version(3, 1, 0)),
        ]);
        assert_eq!(
            device_info(
                cl::CL_DEVICE_OPENCL_C_ALL_VERSIONS,
                c_versions,
                &MEMORY,
                &[]
            ),
            nv(&[("OpenCL C", cl::make_version(1, 2, 0)), ("OpenCL C", v3)])
        );
        // Malformed arrays pass as they are; they have no names.
        assert_eq!(
            device_info(cl::CL_DEVICE_OPENCL_C_FEATURES, vec![1, 2, 3], &MEMORY, &[]),
            [1, 2, 3]
        );
        assert!(names(&[1, 2, 3]).is_empty());
        assert!(names(&[]).is_empty());
    }

    #[test]
    fn atomic_scopes_agree_with_the_feature_macros() {
        // PoCL 3.1: relaxed, acq_rel, seq_cst, work-group, device, all-devices scope.
        let pocl: u64 = 0b111_1110_0111 | cl::CL_DEVICE_ATOMIC_SCOPE_ALL_DEVICES;
        let caps = |param, features: &[String]| {
            let out = device_info(param, pocl.to_ne_bytes().to_vec(), &MEMORY, features);
            u64::from_ne_bytes(out.try_into().unwrap())
        };
        for param in [
            cl::CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES,
            cl::CL_DEVICE_ATOMIC_FENCE_CAPABILITIES,
        ] {
            assert_eq!(
                caps(param, &["__opencl_c_atomic_scope_device".into()]),
                pocl & !cl::CL_DEVICE_ATOMIC_SCOPE_ALL_DEVICES
            );
            assert_eq!(caps(param, &[FEATURE_SCOPE_ALL_DEVICES.into()]), pocl);
        }
    }

    #[test]
    fn only_extensions_a_remote_client_can_use_are_listed() {
        let pocl = c(
            "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics \
                      cl_khr_3d_image_writes cl_khr_command_buffer cl_khr_spir \
                      cl_khr_fp64 ",
        );
        assert_eq!(
            device_info(cl::CL_DEVICE_EXTENSIONS, pocl, &MEMORY, &[]),
            c(
                "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics \
               cl_khr_3d_image_writes cl_khr_fp64"
            )
        );
        assert_eq!(
            platform_info(
                cl::CL_PLATFORM_EXTENSIONS,
                c("cl_khr_icd cl_pocl_content_size")
            ),
            c("cl_khr_icd")
        );
        assert_eq!(supported_extensions(b""), c(""));
    }

    #[test]
    fn memory_is_the_device_shrunk_to_the_quota() {
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        let m = |global, max_alloc, quota| Memory::within_quota(global, max_alloc, quota);
        // PoCL here: 21.5 GiB, 8 GiB per allocation; a 1 GiB quota.
        let pocl = m(Some(23_129_018_368), Some(8 * GIB), GIB);
        assert_eq!(pocl.global, GIB);
        assert!((370 * MIB..390 * MIB).contains(&pocl.max_alloc), "{pocl:?}");
        assert_eq!(pocl.max_alloc % MIB, 0, "whole MiB");
        // A device smaller than the quota is itself.
        assert_eq!(
            m(Some(512 * MIB), Some(128 * MIB), GIB),
            Memory {
                global: 512 * MIB,
                max_alloc: 128 * MIB
            }
        );
        // Never below a quarter, nor 128 MiB, nor above the whole, nor above what the
        // device itself allows.
        assert_eq!(m(Some(64 * GIB), Some(GIB), 4 * GIB).max_alloc, GIB);
        assert_eq!(m(Some(64 * GIB), Some(2 * GIB), GIB).max_alloc, 256 * MIB);
        assert_eq!(
            m(Some(64 * GIB), Some(2 * GIB), 64 * MIB).max_alloc,
            64 * MIB
        );
        assert_eq!(m(Some(64 * GIB), Some(MIB), GIB).max_alloc, MIB);
        // Unknown sizes count as the quota; a device whose allocation exceeds its
        // memory is read as its memory.
        assert_eq!(
            m(None, None, GIB),
            Memory {
                global: GIB,
                max_alloc: GIB
            }
        );
        assert_eq!(m(Some(2 * GIB), Some(u64::MAX), GIB).max_alloc, GIB);
        assert_eq!(m(Some(u64::MAX), Some(u64::MAX), u64::MAX).global, u64::MAX);
    }

    #[test]
    fn the_largest_allocation_is_a_round_size() {
        assert_eq!(round_down(398_768_473), 380 << 20);
        assert_eq!(round_down(1 << 30), 1 << 30);
        assert_eq!(round_down((1 << 20) + 100), 1 << 20);
        assert_eq!(round_down(1000), 896);
        // Tiny sizes stay what they are rather than 0.
        assert_eq!(round_down(100), 100);
    }

    #[test]
    fn memory_sizes_are_the_presented_ones() {
        let memory = Memory {
            global: 1 << 30,
            max_alloc: 1 << 28,
        };
        let size = |param, bytes: u64| {
            u64::from_ne_bytes(
                device_info(param, bytes.to_ne_bytes().to_vec(), &memory, &[])
                    .try_into()
                    .unwrap(),
            )
        };
        assert_eq!(size(cl::CL_DEVICE_GLOBAL_MEM_SIZE, 15 << 30), 1 << 30);
        assert_eq!(size(cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE, 4 << 30), 1 << 28);
        assert_eq!(
            size(cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, 4 << 20),
            4 << 20
        );
        assert_eq!(
            size(cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, 1 << 30),
            1 << 28
        );
        assert_eq!(size(cl::CL_DEVICE_IMAGE_MAX_BUFFER_SIZE, 1 << 16), 1 << 16);
        assert_eq!(size(cl::CL_DEVICE_IMAGE_MAX_BUFFER_SIZE, 1 << 31), 1 << 28);
        // A malformed answer is passed on as it is.
        assert_eq!(
            device_info(
                cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE,
                vec![1, 2],
                &memory,
                &[]
            ),
            [1, 2]
        );
        // Other sizes are the device's.
        assert_eq!(size(0x1016, 4 << 30), 4 << 30);
    }

    #[test]
    fn unsupported_features_are_answered_without_the_runtime() {
        let zero64 = 0u64.to_ne_bytes().to_vec();
        let zero32 = 0u32.to_ne_bytes().to_vec();
        for param in [
            cl::CL_DEVICE_SVM_CAPABILITIES,
            cl::CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES,
            cl::CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES,
        ] {
            assert_eq!(fixed_device_info(param), Some(zero64.clone()), "{param:#x}");
        }
        for param in [
            cl::CL_DEVICE_PIPE_SUPPORT,
            cl::CL_DEVICE_MAX_PIPE_ARGS,
            cl::CL_DEVICE_MAX_ON_DEVICE_QUEUES,
            cl::CL_DEVICE_MAX_NUM_SUB_GROUPS,
            cl::CL_DEVICE_SUB_GROUP_INDEPENDENT_FORWARD_PROGRESS,
            cl::CL_DEVICE_IMAGE_PITCH_ALIGNMENT,
        ] {
            assert_eq!(fixed_device_info(param), Some(zero32.clone()), "{param:#x}");
        }
        assert_eq!(fixed_device_info(cl::CL_DEVICE_IL_VERSION), Some(c("")));
        assert_eq!(
            fixed_device_info(cl::CL_DEVICE_BUILT_IN_KERNELS),
            Some(c(""))
        );
        assert_eq!(
            fixed_device_info(cl::CL_DEVICE_ILS_WITH_VERSION),
            Some(Vec::new())
        );
        // The rest is the runtime's.
        for param in [
            cl::CL_DEVICE_VERSION,
            cl::CL_DEVICE_OPENCL_C_FEATURES,
            cl::CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES,
            cl::CL_DEVICE_NUMERIC_VERSION,
        ] {
            assert_eq!(fixed_device_info(param), None, "{param:#x}");
        }
        assert_eq!(
            fixed_platform_info(cl::CL_PLATFORM_HOST_TIMER_RESOLUTION),
            Some(zero64)
        );
        assert_eq!(fixed_platform_info(cl::CL_PLATFORM_VERSION), None);
    }
}
