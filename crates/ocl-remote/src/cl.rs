//! The OpenCL types and constants both sides of the remote OpenCL path use.
//!
//! Values are those of the Khronos headers (`CL/cl.h`, `CL/cl_ext.h`); only the ones
//! the service or the ICD interpret are listed. Everything else travels as raw numbers.

#![allow(missing_docs)]

pub type ClInt = i32;
pub type ClUint = u32;
pub type ClUlong = u64;
pub type ClBitfield = u64;

pub const CL_SUCCESS: ClInt = 0;
pub const CL_DEVICE_NOT_FOUND: ClInt = -1;
pub const CL_MEM_OBJECT_ALLOCATION_FAILURE: ClInt = -4;
pub const CL_OUT_OF_RESOURCES: ClInt = -5;
pub const CL_OUT_OF_HOST_MEMORY: ClInt = -6;
pub const CL_PROFILING_INFO_NOT_AVAILABLE: ClInt = -7;
pub const CL_MEM_COPY_OVERLAP: ClInt = -8;
pub const CL_BUILD_PROGRAM_FAILURE: ClInt = -11;
pub const CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: ClInt = -14;
pub const CL_INVALID_VALUE: ClInt = -30;
pub const CL_INVALID_DEVICE_TYPE: ClInt = -31;
pub const CL_INVALID_PLATFORM: ClInt = -32;
pub const CL_INVALID_DEVICE: ClInt = -33;
pub const CL_INVALID_CONTEXT: ClInt = -34;
pub const CL_INVALID_QUEUE_PROPERTIES: ClInt = -35;
pub const CL_INVALID_COMMAND_QUEUE: ClInt = -36;
pub const CL_INVALID_HOST_PTR: ClInt = -37;
pub const CL_INVALID_MEM_OBJECT: ClInt = -38;
pub const CL_INVALID_BINARY: ClInt = -42;
pub const CL_INVALID_BUILD_OPTIONS: ClInt = -43;
pub const CL_INVALID_PROGRAM: ClInt = -44;
pub const CL_INVALID_PROGRAM_EXECUTABLE: ClInt = -45;
pub const CL_INVALID_KERNEL_NAME: ClInt = -46;
pub const CL_INVALID_KERNEL: ClInt = -48;
pub const CL_INVALID_ARG_INDEX: ClInt = -49;
pub const CL_INVALID_ARG_VALUE: ClInt = -50;
pub const CL_INVALID_ARG_SIZE: ClInt = -51;
pub const CL_INVALID_KERNEL_ARGS: ClInt = -52;
pub const CL_INVALID_WORK_DIMENSION: ClInt = -53;
pub const CL_INVALID_WORK_GROUP_SIZE: ClInt = -54;
pub const CL_INVALID_WORK_ITEM_SIZE: ClInt = -55;
pub const CL_INVALID_EVENT_WAIT_LIST: ClInt = -57;
pub const CL_INVALID_EVENT: ClInt = -58;
pub const CL_INVALID_OPERATION: ClInt = -59;
pub const CL_INVALID_BUFFER_SIZE: ClInt = -61;
pub const CL_INVALID_GLOBAL_WORK_SIZE: ClInt = -63;
pub const CL_INVALID_COMPILER_OPTIONS: ClInt = -66;
pub const CL_INVALID_LINKER_OPTIONS: ClInt = -67;
pub const CL_INVALID_PROPERTY: ClInt = -64;
pub const CL_PLATFORM_NOT_FOUND_KHR: ClInt = -1001;

pub const CL_PLATFORM_PROFILE: ClUint = 0x0900;
pub const CL_PLATFORM_VERSION: ClUint = 0x0901;
pub const CL_PLATFORM_NAME: ClUint = 0x0902;
pub const CL_PLATFORM_VENDOR: ClUint = 0x0903;
pub const CL_PLATFORM_EXTENSIONS: ClUint = 0x0904;
pub const CL_PLATFORM_HOST_TIMER_RESOLUTION: ClUint = 0x0905;
pub const CL_PLATFORM_NUMERIC_VERSION: ClUint = 0x0906;
pub const CL_PLATFORM_EXTENSIONS_WITH_VERSION: ClUint = 0x0907;
pub const CL_PLATFORM_ICD_SUFFIX_KHR: ClUint = 0x0920;

pub const CL_DEVICE_TYPE_ALL: ClBitfield = 0xFFFF_FFFF;
pub const CL_DEVICE_TYPE_DEFAULT: ClBitfield = 1;
pub const CL_DEVICE_TYPE_CPU: ClBitfield = 1 << 1;
pub const CL_DEVICE_TYPE: ClUint = 0x1000;
pub const CL_DEVICE_MAX_MEM_ALLOC_SIZE: ClUint = 0x1010;
pub const CL_DEVICE_IMAGE_MAX_BUFFER_SIZE: ClUint = 0x1040;
pub const CL_DEVICE_GLOBAL_MEM_SIZE: ClUint = 0x101F;
pub const CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE: ClUint = 0x1020;
pub const CL_DEVICE_NAME: ClUint = 0x102B;
pub const CL_DEVICE_VERSION: ClUint = 0x102F;
pub const CL_DEVICE_EXTENSIONS: ClUint = 0x1030;
pub const CL_DEVICE_PLATFORM: ClUint = 0x1031;
pub const CL_DEVICE_HOST_UNIFIED_MEMORY: ClUint = 0x1035;
pub const CL_DEVICE_OPENCL_C_VERSION: ClUint = 0x103D;
pub const CL_DEVICE_BUILT_IN_KERNELS: ClUint = 0x103F;
pub const CL_DEVICE_PARENT_DEVICE: ClUint = 0x1042;
pub const CL_DEVICE_REFERENCE_COUNT: ClUint = 0x1047;
pub const CL_DEVICE_IMAGE_PITCH_ALIGNMENT: ClUint = 0x104A;
pub const CL_DEVICE_IMAGE_BASE_ADDRESS_ALIGNMENT: ClUint = 0x104B;
pub const CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES: ClUint = 0x104E;
pub const CL_DEVICE_QUEUE_ON_DEVICE_PREFERRED_SIZE: ClUint = 0x104F;
pub const CL_DEVICE_QUEUE_ON_DEVICE_MAX_SIZE: ClUint = 0x1050;
pub const CL_DEVICE_MAX_ON_DEVICE_QUEUES: ClUint = 0x1051;
pub const CL_DEVICE_MAX_ON_DEVICE_EVENTS: ClUint = 0x1052;
pub const CL_DEVICE_SVM_CAPABILITIES: ClUint = 0x1053;
pub const CL_DEVICE_MAX_PIPE_ARGS: ClUint = 0x1055;
pub const CL_DEVICE_PIPE_MAX_ACTIVE_RESERVATIONS: ClUint = 0x1056;
pub const CL_DEVICE_PIPE_MAX_PACKET_SIZE: ClUint = 0x1057;
pub const CL_DEVICE_IL_VERSION: ClUint = 0x105B;
pub const CL_DEVICE_MAX_NUM_SUB_GROUPS: ClUint = 0x105C;
pub const CL_DEVICE_SUB_GROUP_INDEPENDENT_FORWARD_PROGRESS: ClUint = 0x105D;
pub const CL_DEVICE_NUMERIC_VERSION: ClUint = 0x105E;
pub const CL_DEVICE_EXTENSIONS_WITH_VERSION: ClUint = 0x1060;
pub const CL_DEVICE_ILS_WITH_VERSION: ClUint = 0x1061;
pub const CL_DEVICE_BUILT_IN_KERNELS_WITH_VERSION: ClUint = 0x1062;
pub const CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES: ClUint = 0x1063;
pub const CL_DEVICE_ATOMIC_FENCE_CAPABILITIES: ClUint = 0x1064;
pub const CL_DEVICE_OPENCL_C_ALL_VERSIONS: ClUint = 0x1066;
pub const CL_DEVICE_OPENCL_C_FEATURES: ClUint = 0x106F;
pub const CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES: ClUint = 0x1070;
pub const CL_DEVICE_PIPE_SUPPORT: ClUint = 0x1071;
pub const CL_DEVICE_ATOMIC_SCOPE_ALL_DEVICES: ClBitfield = 1 << 6;

/// `cl_name_version` (OpenCL 3.0): a `CL_MAKE_VERSION` number and a NUL-padded name of
/// this many bytes, the element of the `…_WITH_VERSION` and `…_ALL_VERSIONS` answers.
pub const CL_NAME_VERSION_MAX_NAME_SIZE: usize = 64;

/// `CL_MAKE_VERSION(major, minor, patch)`.
pub const fn make_version(major: u32, minor: u32, patch: u32) -> u32 {
    (major << 22) | (minor << 12) | patch
}

pub const CL_CONTEXT_REFERENCE_COUNT: ClUint = 0x1080;
pub const CL_CONTEXT_DEVICES: ClUint = 0x1081;
pub const CL_CONTEXT_PROPERTIES: ClUint = 0x1082;
pub const CL_CONTEXT_NUM_DEVICES: ClUint = 0x1083;
pub const CL_CONTEXT_PLATFORM: isize = 0x1084;

pub const CL_QUEUE_CONTEXT: ClUint = 0x1090;
pub const CL_QUEUE_DEVICE: ClUint = 0x1091;
pub const CL_QUEUE_REFERENCE_COUNT: ClUint = 0x1092;
pub const CL_QUEUE_PROPERTIES: ClUint = 0x1093;
pub const CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE: ClBitfield = 1;
pub const CL_QUEUE_PROFILING_ENABLE: ClBitfield = 2;
pub const CL_QUEUE_ON_DEVICE: ClBitfield = 1 << 2;
pub const CL_QUEUE_ON_DEVICE_DEFAULT: ClBitfield = 1 << 3;
pub const CL_QUEUE_SIZE: ClUint = 0x1094;
pub const CL_QUEUE_DEVICE_DEFAULT: ClUint = 0x1095;
pub const CL_QUEUE_PROPERTIES_ARRAY: ClUint = 0x1098;

pub const CL_MEM_READ_WRITE: ClBitfield = 1;
pub const CL_MEM_WRITE_ONLY: ClBitfield = 1 << 1;
pub const CL_MEM_READ_ONLY: ClBitfield = 1 << 2;
pub const CL_MEM_USE_HOST_PTR: ClBitfield = 1 << 3;
pub const CL_MEM_ALLOC_HOST_PTR: ClBitfield = 1 << 4;
pub const CL_MEM_COPY_HOST_PTR: ClBitfield = 1 << 5;
pub const CL_MEM_HOST_WRITE_ONLY: ClBitfield = 1 << 7;
pub const CL_MEM_HOST_READ_ONLY: ClBitfield = 1 << 8;
pub const CL_MEM_HOST_NO_ACCESS: ClBitfield = 1 << 9;
/// The host access flags (OpenCL 1.2); a memory object has at most one of them.
pub const CL_MEM_HOST_ACCESS: ClBitfield =
    CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS;

/// Whether the host may read (`clEnqueueRead*`, maps for reading) a memory object
/// created with `flags`.
pub fn host_may_read(flags: ClBitfield) -> bool {
    flags & (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_NO_ACCESS) == 0
}

/// Whether the host may write (`clEnqueueWrite*`, maps for writing) a memory object
/// created with `flags`.
pub fn host_may_write(flags: ClBitfield) -> bool {
    flags & (CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS) == 0
}
pub const CL_MEM_OBJECT_BUFFER: ClUint = 0x10F0;
pub const CL_MEM_TYPE: ClUint = 0x1100;
pub const CL_MEM_FLAGS: ClUint = 0x1101;
pub const CL_MEM_SIZE: ClUint = 0x1102;
pub const CL_MEM_HOST_PTR: ClUint = 0x1103;
pub const CL_MEM_MAP_COUNT: ClUint = 0x1104;
pub const CL_MEM_REFERENCE_COUNT: ClUint = 0x1105;
pub const CL_MEM_CONTEXT: ClUint = 0x1106;
pub const CL_MEM_ASSOCIATED_MEMOBJECT: ClUint = 0x1107;
pub const CL_MEM_OFFSET: ClUint = 0x1108;
pub const CL_MEM_USES_SVM_POINTER: ClUint = 0x1109;
pub const CL_MEM_PROPERTIES: ClUint = 0x110A;
pub const CL_BUFFER_CREATE_TYPE_REGION: ClUint = 0x1220;

pub const CL_MAP_READ: ClBitfield = 1;
pub const CL_MAP_WRITE: ClBitfield = 2;
pub const CL_MAP_WRITE_INVALIDATE_REGION: ClBitfield = 4;

pub const CL_PROGRAM_REFERENCE_COUNT: ClUint = 0x1160;
pub const CL_PROGRAM_CONTEXT: ClUint = 0x1161;
pub const CL_PROGRAM_NUM_DEVICES: ClUint = 0x1162;
pub const CL_PROGRAM_DEVICES: ClUint = 0x1163;
pub const CL_PROGRAM_SOURCE: ClUint = 0x1164;
pub const CL_PROGRAM_BINARY_SIZES: ClUint = 0x1165;
pub const CL_PROGRAM_BINARIES: ClUint = 0x1166;
pub const CL_PROGRAM_NUM_KERNELS: ClUint = 0x1167;
pub const CL_PROGRAM_KERNEL_NAMES: ClUint = 0x1168;
pub const CL_PROGRAM_IL: ClUint = 0x1169;
pub const CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT: ClUint = 0x116A;
pub const CL_PROGRAM_SCOPE_GLOBAL_DTORS_PRESENT: ClUint = 0x116B;
pub const CL_PROGRAM_BUILD_STATUS: ClUint = 0x1181;
pub const CL_PROGRAM_BUILD_OPTIONS: ClUint = 0x1182;
pub const CL_BUILD_SUCCESS: ClInt = 0;
pub const CL_BUILD_NONE: ClInt = -1;
pub const CL_PROGRAM_BINARY_TYPE: ClUint = 0x1184;
pub const CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT: ClUint = 0x1;
pub const CL_PROGRAM_BINARY_TYPE_LIBRARY: ClUint = 0x2;

pub const CL_KERNEL_FUNCTION_NAME: ClUint = 0x1190;
pub const CL_KERNEL_NUM_ARGS: ClUint = 0x1191;
pub const CL_KERNEL_REFERENCE_COUNT: ClUint = 0x1192;
pub const CL_KERNEL_CONTEXT: ClUint = 0x1193;
pub const CL_KERNEL_PROGRAM: ClUint = 0x1194;
pub const CL_KERNEL_ARG_ADDRESS_QUALIFIER: ClUint = 0x1196;
pub const CL_KERNEL_ARG_TYPE_NAME: ClUint = 0x1198;
pub const CL_KERNEL_ARG_ADDRESS_GLOBAL: ClUint = 0x119B;
pub const CL_KERNEL_ARG_ADDRESS_LOCAL: ClUint = 0x119C;
pub const CL_KERNEL_ARG_ADDRESS_CONSTANT: ClUint = 0x119D;
pub const CL_KERNEL_ARG_ADDRESS_PRIVATE: ClUint = 0x119E;
pub const CL_KERNEL_WORK_GROUP_SIZE: ClUint = 0x11B0;
pub const CL_KERNEL_COMPILE_WORK_GROUP_SIZE: ClUint = 0x11B1;
pub const CL_DEVICE_MAX_WORK_ITEM_SIZES: ClUint = 0x1005;
pub const CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT: ClUint = 0x1065;

pub const CL_EVENT_COMMAND_QUEUE: ClUint = 0x11D0;
pub const CL_EVENT_COMMAND_TYPE: ClUint = 0x11D1;
pub const CL_EVENT_REFERENCE_COUNT: ClUint = 0x11D2;
pub const CL_EVENT_COMMAND_EXECUTION_STATUS: ClUint = 0x11D3;
pub const CL_EVENT_CONTEXT: ClUint = 0x11D4;

pub const CL_COMMAND_NDRANGE_KERNEL: ClUint = 0x11F0;
pub const CL_COMMAND_TASK: ClUint = 0x11F1;
pub const CL_COMMAND_READ_BUFFER: ClUint = 0x11F3;
pub const CL_COMMAND_WRITE_BUFFER: ClUint = 0x11F4;
pub const CL_COMMAND_COPY_BUFFER: ClUint = 0x11F5;
pub const CL_COMMAND_MAP_BUFFER: ClUint = 0x11FB;
pub const CL_COMMAND_UNMAP_MEM_OBJECT: ClUint = 0x11FD;
pub const CL_COMMAND_MARKER: ClUint = 0x11FE;
pub const CL_COMMAND_READ_BUFFER_RECT: ClUint = 0x1201;
pub const CL_COMMAND_WRITE_BUFFER_RECT: ClUint = 0x1202;
pub const CL_COMMAND_COPY_BUFFER_RECT: ClUint = 0x1203;
pub const CL_COMMAND_USER: ClUint = 0x1204;
pub const CL_COMMAND_BARRIER: ClUint = 0x1205;
pub const CL_COMMAND_MIGRATE_MEM_OBJECTS: ClUint = 0x1206;
pub const CL_COMMAND_FILL_BUFFER: ClUint = 0x1207;

pub const CL_COMPLETE: ClInt = 0;
pub const CL_RUNNING: ClInt = 1;
pub const CL_SUBMITTED: ClInt = 2;
pub const CL_QUEUED: ClInt = 3;

pub const CL_PROFILING_COMMAND_QUEUED: ClUint = 0x1280;
pub const CL_PROFILING_COMMAND_SUBMIT: ClUint = 0x1281;
pub const CL_PROFILING_COMMAND_START: ClUint = 0x1282;
pub const CL_PROFILING_COMMAND_END: ClUint = 0x1283;
pub const CL_PROFILING_COMMAND_COMPLETE: ClUint = 0x1284;

pub const CL_IMAGE_FORMAT_MISMATCH: ClInt = -9;
pub const CL_INVALID_IMAGE_FORMAT_DESCRIPTOR: ClInt = -39;
pub const CL_INVALID_IMAGE_SIZE: ClInt = -40;
pub const CL_INVALID_IMAGE_DESCRIPTOR: ClInt = -65;
pub const CL_INVALID_SAMPLER: ClInt = -41;

pub const CL_MEM_OBJECT_IMAGE2D: ClUint = 0x10F1;
pub const CL_MEM_OBJECT_IMAGE3D: ClUint = 0x10F2;
pub const CL_MEM_OBJECT_IMAGE2D_ARRAY: ClUint = 0x10F3;
pub const CL_MEM_OBJECT_IMAGE1D: ClUint = 0x10F4;
pub const CL_MEM_OBJECT_IMAGE1D_ARRAY: ClUint = 0x10F5;
pub const CL_MEM_OBJECT_IMAGE1D_BUFFER: ClUint = 0x10F6;

pub const CL_IMAGE_FORMAT: ClUint = 0x1110;
pub const CL_IMAGE_ELEMENT_SIZE: ClUint = 0x1111;
pub const CL_IMAGE_ROW_PITCH: ClUint = 0x1112;
pub const CL_IMAGE_SLICE_PITCH: ClUint = 0x1113;
pub const CL_IMAGE_WIDTH: ClUint = 0x1114;
pub const CL_IMAGE_HEIGHT: ClUint = 0x1115;
pub const CL_IMAGE_DEPTH: ClUint = 0x1116;
pub const CL_IMAGE_ARRAY_SIZE: ClUint = 0x1117;
pub const CL_IMAGE_BUFFER: ClUint = 0x1118;
pub const CL_IMAGE_NUM_MIP_LEVELS: ClUint = 0x1119;
pub const CL_IMAGE_NUM_SAMPLES: ClUint = 0x111A;

pub const CL_SAMPLER_REFERENCE_COUNT: ClUint = 0x1150;
pub const CL_SAMPLER_CONTEXT: ClUint = 0x1151;
pub const CL_SAMPLER_NORMALIZED_COORDS: ClUint = 0x1152;
pub const CL_SAMPLER_ADDRESSING_MODE: ClUint = 0x1153;
pub const CL_SAMPLER_FILTER_MODE: ClUint = 0x1154;
pub const CL_SAMPLER_PROPERTIES: ClUint = 0x1158;
pub const CL_ADDRESS_CLAMP: ClUint = 0x1132;
pub const CL_FILTER_NEAREST: ClUint = 0x1140;

pub const CL_COMMAND_READ_IMAGE: ClUint = 0x11F6;
pub const CL_COMMAND_WRITE_IMAGE: ClUint = 0x11F7;
pub const CL_COMMAND_COPY_IMAGE: ClUint = 0x11F8;
pub const CL_COMMAND_COPY_IMAGE_TO_BUFFER: ClUint = 0x11F9;
pub const CL_COMMAND_COPY_BUFFER_TO_IMAGE: ClUint = 0x11FA;
pub const CL_COMMAND_MAP_IMAGE: ClUint = 0x11FC;
pub const CL_COMMAND_FILL_IMAGE: ClUint = 0x1208;

/// Bytes per pixel of an image format (`cl_channel_order`, `cl_channel_type`), `None` for
/// an unknown or invalid pair (OpenCL 1.2, section 5.3.1.1).
pub fn image_element_size(order: ClUint, channel_type: ClUint) -> Option<u64> {
    let channels: u64 = match order {
        0x10B0 | 0x10B1 | 0x10B8 | 0x10B9 | 0x10BA => 1, // R, A, INTENSITY, LUMINANCE, Rx
        0x10B2 | 0x10B3 | 0x10BB => 2,                   // RG, RA, RGx
        0x10B4 | 0x10BC => 3,                            // RGB, RGBx
        0x10B5..=0x10B7 => 4,                            // RGBA, BGRA, ARGB
        _ => return None,
    };
    Some(match channel_type {
        // UNORM_SHORT_565, UNORM_SHORT_555: one 16-bit value per pixel (RGB, RGBx)
        0x10D4 | 0x10D5 if channels == 3 => 2,
        // UNORM_INT_101010: one 32-bit value per pixel (RGB, RGBx)
        0x10D6 if channels == 3 => 4,
        0x10D4..=0x10D6 => return None,
        // RGB and RGBx take only the packed types above.
        _ if channels == 3 => return None,
        // SNORM_INT8, UNORM_INT8, SIGNED_INT8, UNSIGNED_INT8
        0x10D0 | 0x10D2 | 0x10D7 | 0x10DA => channels,
        // SNORM_INT16, UNORM_INT16, SIGNED_INT16, UNSIGNED_INT16, HALF_FLOAT
        0x10D1 | 0x10D3 | 0x10D8 | 0x10DB | 0x10DD => 2 * channels,
        // SIGNED_INT32, UNSIGNED_INT32, FLOAT
        0x10D9 | 0x10DC | 0x10DE => 4 * channels,
        _ => return None,
    })
}

/// Width, rows and slices of an image of `image_type` given as `[width, height, depth,
/// array size]`: 1 where the type has no such dimension (the rows of a 1D array are its
/// layers, the slices of a 2D array its layers); `None` for a type that is not an image
/// type. A 1D image on a buffer (`CL_MEM_OBJECT_IMAGE1D_BUFFER`) is a 1D image whose
/// storage is the buffer's.
pub fn image_dims(
    image_type: ClUint,
    [width, height, depth, layers]: [u64; 4],
) -> Option<[u64; 3]> {
    Some(match image_type {
        CL_MEM_OBJECT_IMAGE1D | CL_MEM_OBJECT_IMAGE1D_BUFFER => [width, 1, 1],
        CL_MEM_OBJECT_IMAGE1D_ARRAY => [width, layers, 1],
        CL_MEM_OBJECT_IMAGE2D => [width, height, 1],
        CL_MEM_OBJECT_IMAGE2D_ARRAY => [width, height, layers],
        CL_MEM_OBJECT_IMAGE3D => [width, height, depth],
        _ => return None,
    })
}

/// The tightly packed bytes of `region` (pixels) at `origin` in an image of `dims` with
/// `elem` bytes per pixel; `None` if the region is empty in some dimension, leaves the
/// image or does not fit in `u64`. The whole image: `origin` 0, `region` = `dims`.
pub fn image_region_bytes(
    elem: u64,
    dims: [u64; 3],
    origin: [u64; 3],
    region: [u64; 3],
) -> Option<u64> {
    let mut bytes = elem;
    for i in 0..3 {
        let end = origin[i].checked_add(region[i])?;
        if region[i] == 0 || end > dims[i] {
            return None;
        }
        bytes = bytes.checked_mul(region[i])?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_element_sizes_follow_the_format() {
        const RGBA: ClUint = 0x10B5;
        const R: ClUint = 0x10B0;
        const RGB: ClUint = 0x10B4;
        assert_eq!(image_element_size(RGBA, 0x10D2), Some(4)); // UNORM_INT8
        assert_eq!(image_element_size(RGBA, 0x10DE), Some(16)); // FLOAT
        assert_eq!(image_element_size(R, 0x10DE), Some(4));
        assert_eq!(image_element_size(R, 0x10DD), Some(2)); // HALF_FLOAT
        assert_eq!(image_element_size(0x10B2, 0x10D8), Some(4)); // RG, SIGNED_INT16
        assert_eq!(image_element_size(RGB, 0x10D4), Some(2)); // UNORM_SHORT_565
        assert_eq!(image_element_size(RGB, 0x10D6), Some(4)); // UNORM_INT_101010
        assert_eq!(image_element_size(RGB, 0x10D2), None);
        assert_eq!(image_element_size(RGBA, 0x10D4), None);
        assert_eq!(image_element_size(0x1234, 0x10D2), None);
        assert_eq!(image_element_size(RGBA, 0x1234), None);
    }

    #[test]
    fn image_shapes_and_regions() {
        let shape = [8, 4, 3, 5];
        assert_eq!(image_dims(CL_MEM_OBJECT_IMAGE1D, shape), Some([8, 1, 1]));
        assert_eq!(
            image_dims(CL_MEM_OBJECT_IMAGE1D_ARRAY, shape),
            Some([8, 5, 1])
        );
        assert_eq!(image_dims(CL_MEM_OBJECT_IMAGE2D, shape), Some([8, 4, 1]));
        assert_eq!(
            image_dims(CL_MEM_OBJECT_IMAGE2D_ARRAY, shape),
            Some([8, 4, 5])
        );
        assert_eq!(image_dims(CL_MEM_OBJECT_IMAGE3D, shape), Some([8, 4, 3]));
        assert_eq!(
            image_dims(CL_MEM_OBJECT_IMAGE1D_BUFFER, shape),
            Some([8, 1, 1])
        );
        assert_eq!(image_dims(CL_MEM_OBJECT_BUFFER, shape), None);
        let dims = [8, 4, 1];
        assert_eq!(image_region_bytes(4, dims, [0; 3], dims), Some(128));
        assert_eq!(image_region_bytes(4, dims, [2, 1, 0], [6, 3, 1]), Some(72));
        assert_eq!(image_region_bytes(4, dims, [3, 0, 0], [6, 1, 1]), None);
        assert_eq!(image_region_bytes(4, dims, [0; 3], [1, 0, 1]), None);
        assert_eq!(image_region_bytes(4, [8, 0, 1], [0; 3], [8, 0, 1]), None);
        assert_eq!(
            image_region_bytes(4, dims, [u64::MAX, 0, 0], [1, 1, 1]),
            None
        );
        let huge = [u64::MAX, 2, 2];
        assert_eq!(image_region_bytes(4, huge, [0; 3], huge), None);
    }
}
