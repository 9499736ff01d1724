//! What the node says its platforms and devices are: the runtime's answers to info
//! queries, made true for a client of the remote path.
//!
//! The remote path (protocol and ICD) implements OpenCL 1.2. A runtime that reports
//! OpenCL 3.0 (PoCL does) would send programs down 2.x/3.0 paths that fail remotely:
//! properties arrays, numeric versions, SVM, device-side queues. So the node presents
//! every device as OpenCL 1.2, the version the ICD's platform reports: version strings
//! are capped at 1.2, the queries OpenCL 2.0 to 3.0 added answer `CL_INVALID_VALUE` (as
//! a 1.2 device does), and only extensions that need nothing of the host API beyond 1.2
//! are listed (kernel-language extensions compile on the node; ones with entry points
//! of their own, such as `cl_khr_command_buffer` or `cl_khr_il_program`, have none in
//! the ICD). Memory sizes say what one client may allocate: the device as if it had no
//! more memory than the client's buffer quota ([`Memory`]), so a program that sizes its
//! buffers by `CL_DEVICE_GLOBAL_MEM_SIZE` and `CL_DEVICE_MAX_MEM_ALLOC_SIZE` gets them.
//!
//! Programs compile for that device too ([`build_options`], [`source_prefix`]): a
//! runtime that reports a higher version compiles for it by default, and a kernel would
//! see `__OPENCL_VERSION__` 300 on a 1.2 device (the CTS's `kernel_preprocessor_macros`
//! checks it).
//!
//! Pure functions over the runtime's bytes, so that they can be tested without one.

use crate::cl::{self, ClInt, ClUint};

/// The OpenCL version the remote path implements.
const VERSION: (u32, u32) = (1, 2);

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

/// Platform queries OpenCL 2.1 and 3.0 added: `CL_PLATFORM_HOST_TIMER_RESOLUTION`,
/// `CL_PLATFORM_NUMERIC_VERSION`, `CL_PLATFORM_EXTENSIONS_WITH_VERSION`.
const PLATFORM_INFO_AFTER_1_2: [ClUint; 3] = [
    cl::CL_PLATFORM_HOST_TIMER_RESOLUTION,
    cl::CL_PLATFORM_NUMERIC_VERSION,
    cl::CL_PLATFORM_EXTENSIONS_WITH_VERSION,
];

/// Whether a platform query is one a 1.2 platform does not know (answer
/// `CL_INVALID_VALUE` without asking the runtime).
pub(crate) fn platform_query_refused(param: ClUint) -> bool {
    PLATFORM_INFO_AFTER_1_2.contains(&param)
}

/// Whether a device query is one a 1.2 device does not know.
pub(crate) fn device_query_refused(param: ClUint) -> bool {
    cl::CL_DEVICE_INFO_2_0_TO_3_0
        .iter()
        .any(|r| r.contains(&param))
}

/// The platform's answer to `param` as a client sees it, from the runtime's `raw`.
pub(crate) fn platform_info(param: ClUint, raw: Vec<u8>) -> Vec<u8> {
    match param {
        cl::CL_PLATFORM_VERSION => capped_version(&raw, b"OpenCL "),
        cl::CL_PLATFORM_EXTENSIONS => supported_extensions(&raw),
        _ => raw,
    }
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

/// The device's answer to `param` as a client sees it, from the runtime's `raw` and
/// the sizes of `memory`.
pub(crate) fn device_info(param: ClUint, raw: Vec<u8>, memory: &Memory) -> Vec<u8> {
    match param {
        cl::CL_DEVICE_VERSION => capped_version(&raw, b"OpenCL "),
        cl::CL_DEVICE_OPENCL_C_VERSION => capped_version(&raw, b"OpenCL C "),
        cl::CL_DEVICE_EXTENSIONS => supported_extensions(&raw),
        // clCreateProgramWithBuiltInKernels does not reach the node.
        cl::CL_DEVICE_BUILT_IN_KERNELS => vec![0],
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

/// Whether a device whose `CL_DEVICE_VERSION` is `raw` compiles programs for a version
/// above the presented one by default (its `__OPENCL_VERSION__` and default `-cl-std`
/// follow its version), so that [`build_options`] and [`source_prefix`] apply.
pub(crate) fn compiles_above_presented(raw: &[u8]) -> bool {
    capped_version(raw, b"OpenCL ") != raw
}

/// The option that selects the presented OpenCL C version.
const CL_STD: &str = "-cl-std=CL1.2";

/// The build options (`clBuildProgram`, `clCompileProgram`) the runtime gets for a
/// client's `options`, on a device that [`compiles_above_presented`]:
///
/// - `-cl-std=CL1.2` unless the client names a `-cl-std` itself (the runtime would
///   compile OpenCL C 3.0: `__OPENCL_C_VERSION__` 300), put before the client's
///   options so that each of theirs keeps its meaning (a `-D` at their end takes the
///   next word as its name);
/// - with no options at all, `-cl-kernel-arg-info` as well: what a runtime keeps of a
///   build without options, as PoCL does only without options or with this one.
pub(crate) fn build_options(client: &[u8]) -> Vec<u8> {
    let names_std = client
        .split(u8::is_ascii_whitespace)
        .any(|word| word.starts_with(b"-cl-std"));
    if names_std {
        return client.to_vec();
    }
    if client.is_empty() {
        return format!("{CL_STD} -cl-kernel-arg-info").into_bytes();
    }
    let mut out = format!("{CL_STD} ").into_bytes();
    out.extend_from_slice(client);
    out
}

/// What the node puts before a client's program source on a device that
/// [`compiles_above_presented`]. PoCL defines `__OPENCL_VERSION__` as its device's
/// version after the client's options (so no option can lower it, and a `-D` of it
/// only warns); the source redefines it as the presented version, and `#line 1` gives
/// the client's first line its number (the file name stays the runtime's), so that
/// `__LINE__` and build logs are what they are natively. The client's own source is
/// what `CL_PROGRAM_SOURCE` answers (the ICD keeps it).
pub(crate) fn source_prefix() -> String {
    let version = VERSION.0 * 100 + VERSION.1 * 10;
    format!("#undef __OPENCL_VERSION__\n#define __OPENCL_VERSION__ {version}\n#line 1\n")
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

/// The error for a query refused by [`platform_query_refused`] or
/// [`device_query_refused`].
pub(crate) const REFUSED: ClInt = cl::CL_INVALID_VALUE;

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
    fn versions_above_1_2_are_capped_and_the_rest_is_kept() {
        let cap = |s: &str, prefix: &str| {
            String::from_utf8(capped_version(&c(s), prefix.as_bytes())).unwrap()
        };
        assert_eq!(
            cap("OpenCL 3.0 PoCL HSTR: pthread", "OpenCL "),
            "OpenCL 1.2 PoCL HSTR: pthread\0"
        );
        assert_eq!(cap("OpenCL 2.10 x", "OpenCL "), "OpenCL 1.2 x\0");
        assert_eq!(cap("OpenCL 1.2 PoCL", "OpenCL "), "OpenCL 1.2 PoCL\0");
        assert_eq!(cap("OpenCL 1.1", "OpenCL "), "OpenCL 1.1\0");
        assert_eq!(cap("OpenCL C 3.0 ", "OpenCL C "), "OpenCL C 1.2 \0");
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
    }

    #[test]
    fn only_extensions_a_remote_client_can_use_are_listed() {
        let pocl = c(
            "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics \
                      cl_khr_3d_image_writes cl_khr_command_buffer cl_khr_spir \
                      cl_khr_fp64 ",
        );
        assert_eq!(
            device_info(cl::CL_DEVICE_EXTENSIONS, pocl, &MEMORY),
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
                device_info(param, bytes.to_ne_bytes().to_vec(), &memory)
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
            device_info(cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, vec![1, 2], &memory),
            [1, 2]
        );
        // Other sizes are the device's.
        assert_eq!(size(0x1016, 4 << 30), 4 << 30);
    }

    #[test]
    fn programs_compile_for_the_presented_version() {
        let options = |client: &str| String::from_utf8(build_options(client.as_bytes())).unwrap();
        assert_eq!(options(""), "-cl-std=CL1.2 -cl-kernel-arg-info");
        assert_eq!(options(" "), "-cl-std=CL1.2  ");
        assert_eq!(options("-DX=1 -D"), "-cl-std=CL1.2 -DX=1 -D");
        // The client's own choice stands.
        assert_eq!(options("-O2 -cl-std=CL2.0"), "-O2 -cl-std=CL2.0");
        assert_eq!(options("-cl-std=CL1.1"), "-cl-std=CL1.1");
        assert_eq!(options("-DSTD=-cl-std"), "-cl-std=CL1.2 -DSTD=-cl-std");
        assert_eq!(
            source_prefix(),
            "#undef __OPENCL_VERSION__\n#define __OPENCL_VERSION__ 120\n#line 1\n"
        );
        assert!(compiles_above_presented(b"OpenCL 3.0 PoCL HSTR\0"));
        assert!(!compiles_above_presented(b"OpenCL 1.2 PoCL\0"));
        assert!(!compiles_above_presented(b"OpenCL 1.1\0"));
    }

    #[test]
    fn queries_after_1_2_are_refused() {
        for param in [0x104A, 0x1053, 0x105E, 0x1060, 0x1066, 0x106F, 0x1072] {
            assert!(device_query_refused(param), "{param:#x}");
        }
        // 1.2 queries and cl_khr_device_uuid's are answered.
        for param in [0x1000, 0x102F, 0x1049, 0x106A, 0x106E, 0x4000] {
            assert!(!device_query_refused(param), "{param:#x}");
        }
        assert!(platform_query_refused(cl::CL_PLATFORM_NUMERIC_VERSION));
        assert!(!platform_query_refused(cl::CL_PLATFORM_VERSION));
        assert_eq!(
            device_info(cl::CL_DEVICE_BUILT_IN_KERNELS, c("pocl.add.i8"), &MEMORY),
            c("")
        );
    }
}
