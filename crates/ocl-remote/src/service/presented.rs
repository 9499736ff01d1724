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
//! the ICD). Memory sizes say what one client may allocate: no more than its buffer
//! quota (`buffer_bytes_max`), so a program that sizes its buffers by
//! `CL_DEVICE_MAX_MEM_ALLOC_SIZE` gets them.
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

/// The device's answer to `param` as a client with a buffer quota of
/// `buffer_bytes_max` sees it, from the runtime's `raw`.
pub(crate) fn device_info(param: ClUint, raw: Vec<u8>, buffer_bytes_max: u64) -> Vec<u8> {
    match param {
        cl::CL_DEVICE_VERSION => capped_version(&raw, b"OpenCL "),
        cl::CL_DEVICE_OPENCL_C_VERSION => capped_version(&raw, b"OpenCL C "),
        cl::CL_DEVICE_EXTENSIONS => supported_extensions(&raw),
        // clCreateProgramWithBuiltInKernels does not reach the node.
        cl::CL_DEVICE_BUILT_IN_KERNELS => vec![0],
        cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE
        | cl::CL_DEVICE_GLOBAL_MEM_SIZE
        | cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE => match <[u8; 8]>::try_from(raw.as_slice()) {
            Ok(v) => u64::from_ne_bytes(v)
                .min(buffer_bytes_max)
                .to_ne_bytes()
                .to_vec(),
            Err(_) => raw,
        },
        _ => raw,
    }
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
            device_info(cl::CL_DEVICE_EXTENSIONS, pocl, 1 << 30),
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
    fn memory_sizes_are_capped_at_the_buffer_quota() {
        let size = |param, bytes: u64, quota| {
            u64::from_ne_bytes(
                device_info(param, bytes.to_ne_bytes().to_vec(), quota)
                    .try_into()
                    .unwrap(),
            )
        };
        let quota = 1 << 30;
        assert_eq!(
            size(cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE, 4 << 30, quota),
            quota
        );
        assert_eq!(size(cl::CL_DEVICE_GLOBAL_MEM_SIZE, 15 << 30, quota), quota);
        assert_eq!(
            size(cl::CL_DEVICE_GLOBAL_MEM_SIZE, 512 << 20, quota),
            512 << 20
        );
        assert_eq!(
            size(cl::CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, 4 << 20, quota),
            4 << 20
        );
        // A malformed answer is passed on as it is.
        assert_eq!(
            device_info(cl::CL_DEVICE_GLOBAL_MEM_SIZE, vec![1, 2], quota),
            [1, 2]
        );
        // Other sizes are the device's.
        assert_eq!(size(0x1016, 4 << 30, quota), 4 << 30);
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
            device_info(cl::CL_DEVICE_BUILT_IN_KERNELS, c("pocl.add.i8"), 1),
            c("")
        );
    }
}
