//! What a kernel declares, learned from the node once and kept with the kernel: the
//! kind and size of each argument (for `clSetKernelArg`) and its work-group limits on
//! each device (for `clEnqueueNDRangeKernel`).
//!
//! Argument values are kept in the ICD and launches are asynchronous, so without these
//! a wrong size or work-group shape would reach the runtime only when the task runs,
//! and the error would come back as an event status instead of the return value the
//! program checks. Each costs a round trip the first time: per argument at its first
//! `clSetKernelArg`, per device at the kernel's first launch there. When the node
//! cannot tell (a program built from a binary without argument information, say), the
//! check is left to the runtime as before.

use std::collections::HashMap;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{Request, WORK_DIM_MAX};

use crate::object::*;

use super::platform::device_info;
use super::{reply, trim_nul};

/// What an argument is, by its declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgDecl {
    /// The node could not say (no argument information).
    Unknown,
    /// A `__local` pointer: set with a size and a NULL value.
    Local,
    /// A `__global` or `__constant` pointer: a buffer, or NULL.
    Buffer,
    /// An image type (`image2d_t`, ...).
    Image,
    /// `sampler_t`.
    Sampler,
    /// Passed by value, of this many bytes if the type is a built-in one.
    Value(Option<usize>),
}

/// The work-group limits of a kernel on one device.
#[derive(Clone, Debug)]
pub struct GroupLimits {
    /// `CL_KERNEL_WORK_GROUP_SIZE`.
    kernel_max: usize,
    /// `CL_KERNEL_COMPILE_WORK_GROUP_SIZE` (`reqd_work_group_size`; zeros: none).
    compile: [usize; 3],
    /// `CL_DEVICE_MAX_WORK_ITEM_SIZES`.
    item_max: Vec<usize>,
    /// `CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT` (OpenCL 3.0): global sizes need not
    /// be multiples of the local ones.
    non_uniform: bool,
}

/// What the kernel keeps of its declaration.
#[derive(Default)]
pub struct Declared {
    args: HashMap<u32, ArgDecl>,
    /// By device handle; `None` when the node could not tell.
    groups: HashMap<H, Option<GroupLimits>>,
}

fn kernel_arg_info(k: &Obj<Kernel>, index: u32, param: u32) -> Result<Vec<u8>, ClInt> {
    reply(k.v.node.call(&Request::GetKernelArgInfo {
        kernel: k.v.id,
        index,
        param,
    }))
}

/// The declaration of argument `index` (< the kernel's argument count).
pub fn arg_decl(k: &Obj<Kernel>, index: u32) -> ArgDecl {
    let mut declared = k.v.declared.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = declared.args.get(&index) {
        return *d;
    }
    let address = kernel_arg_info(k, index, cl::CL_KERNEL_ARG_ADDRESS_QUALIFIER)
        .ok()
        .and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?)));
    let type_name = kernel_arg_info(k, index, cl::CL_KERNEL_ARG_TYPE_NAME)
        .ok()
        .map(|b| String::from_utf8_lossy(&trim_nul(b)).trim().to_string());
    let decl = classify(address, type_name.as_deref());
    declared.args.insert(index, decl);
    decl
}

/// An argument's kind from its address qualifier and type name (either may be unknown).
fn classify(address: Option<u32>, type_name: Option<&str>) -> ArgDecl {
    let pointer = type_name.is_some_and(|t| t.ends_with('*'));
    match (address, type_name) {
        (_, Some(t)) if t.starts_with("image") && t.ends_with("_t") && !pointer => ArgDecl::Image,
        (_, Some("sampler_t")) => ArgDecl::Sampler,
        (Some(cl::CL_KERNEL_ARG_ADDRESS_LOCAL), _) => ArgDecl::Local,
        (Some(cl::CL_KERNEL_ARG_ADDRESS_GLOBAL | cl::CL_KERNEL_ARG_ADDRESS_CONSTANT), _) => {
            ArgDecl::Buffer
        }
        (Some(cl::CL_KERNEL_ARG_ADDRESS_PRIVATE), Some(t)) if !pointer => {
            ArgDecl::Value(value_size(t))
        }
        _ => ArgDecl::Unknown,
    }
}

/// The size of a built-in scalar or vector type of OpenCL C by name (`float4`, `uint`,
/// `unsigned char`); `None` for other types (structs, typedefs).
fn value_size(type_name: &str) -> Option<usize> {
    let name = type_name
        .strip_prefix("unsigned ")
        .map(|rest| format!("u{rest}"))
        .unwrap_or_else(|| type_name.to_string());
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (base, lanes) = name.split_at(name.len() - digits);
    let scalar = match base {
        "char" | "uchar" => 1,
        "short" | "ushort" | "half" => 2,
        "int" | "uint" | "float" => 4,
        "long" | "ulong" | "double" => 8,
        _ => return None,
    };
    let lanes = match lanes {
        "" => 1,
        // A 3-component vector takes the room of a 4-component one.
        "3" => 4,
        "2" | "4" | "8" | "16" => lanes.parse().ok()?,
        _ => return None,
    };
    Some(scalar * lanes)
}

fn group_limits(k: &Obj<Kernel>, q: &Obj<Queue>) -> Option<GroupLimits> {
    let mut declared = k.v.declared.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(limits) = declared.groups.get(&q.v.device) {
        return limits.clone();
    }
    let limits = query_group_limits(k, q);
    declared.groups.insert(q.v.device, limits.clone());
    limits
}

fn words(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks_exact(std::mem::size_of::<usize>())
        .map(|c| usize::from_ne_bytes(c.try_into().expect("word")))
        .collect()
}

fn query_group_limits(k: &Obj<Kernel>, q: &Obj<Queue>) -> Option<GroupLimits> {
    let device = get::<Device>(q.v.device as Handle).ok()?;
    let kernel_info = |param| {
        reply(k.v.node.call(&Request::GetKernelWorkGroupInfo {
            kernel: k.v.id,
            device: device.v.remote,
            param,
        }))
        .ok()
    };
    let kernel_max = *words(&kernel_info(cl::CL_KERNEL_WORK_GROUP_SIZE)?).first()?;
    let compile = words(&kernel_info(cl::CL_KERNEL_COMPILE_WORK_GROUP_SIZE)?);
    let item_max = words(&device_info(device, cl::CL_DEVICE_MAX_WORK_ITEM_SIZES).ok()?);
    // Absent before OpenCL 3.0: then work groups are uniform.
    let non_uniform = device_info(device, cl::CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT)
        .is_ok_and(|b| b.iter().any(|&x| x != 0));
    Some(GroupLimits {
        kernel_max,
        compile: [*compile.first()?, *compile.get(1)?, *compile.get(2)?],
        item_max,
        non_uniform,
    })
}

/// Checks a launch's work-group shape against what the kernel and device allow (OpenCL
/// 1.2, `clEnqueueNDRangeKernel`), as far as the node can tell.
pub fn check_work_groups(
    k: &Obj<Kernel>,
    q: &Obj<Queue>,
    dims: usize,
    global: &[u64; WORK_DIM_MAX],
    local: Option<&[u64; WORK_DIM_MAX]>,
) -> Result<(), ClInt> {
    let Some(limits) = group_limits(k, q) else {
        return Ok(());
    };
    check_against(&limits, dims, global, local)
}

fn check_against(
    limits: &GroupLimits,
    dims: usize,
    global: &[u64; WORK_DIM_MAX],
    local: Option<&[u64; WORK_DIM_MAX]>,
) -> Result<(), ClInt> {
    let required = limits.compile != [0; 3];
    let Some(local) = local else {
        // A kernel that requires a work-group size must be given it.
        return if required {
            Err(cl::CL_INVALID_WORK_GROUP_SIZE)
        } else {
            Ok(())
        };
    };
    let local = &local[..dims];
    if local.contains(&0) {
        return Err(cl::CL_INVALID_WORK_GROUP_SIZE);
    }
    let over_item_max = local
        .iter()
        .zip(&limits.item_max)
        .any(|(&l, &max)| l > max as u64);
    if over_item_max {
        return Err(cl::CL_INVALID_WORK_ITEM_SIZE);
    }
    let total = local
        .iter()
        .try_fold(1u64, |acc, &l| acc.checked_mul(l))
        .unwrap_or(u64::MAX);
    if total > limits.kernel_max as u64 {
        return Err(cl::CL_INVALID_WORK_GROUP_SIZE);
    }
    if required
        && (0..WORK_DIM_MAX).any(|i| {
            let given = if i < dims { local[i] } else { 1 };
            given != limits.compile[i] as u64
        })
    {
        return Err(cl::CL_INVALID_WORK_GROUP_SIZE);
    }
    if !limits.non_uniform && global[..dims].iter().zip(local).any(|(&g, &l)| g % l != 0) {
        return Err(cl::CL_INVALID_WORK_GROUP_SIZE);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_types_have_their_sizes_and_others_none() {
        assert_eq!(value_size("int"), Some(4));
        assert_eq!(value_size("uint"), Some(4));
        assert_eq!(value_size("unsigned int"), Some(4));
        assert_eq!(value_size("float4"), Some(16));
        assert_eq!(value_size("char3"), Some(4));
        assert_eq!(value_size("double16"), Some(128));
        assert_eq!(value_size("half"), Some(2));
        assert_eq!(value_size("float5"), None);
        assert_eq!(value_size("struct pair"), None);
        assert_eq!(value_size("my_t"), None);
    }

    #[test]
    fn arguments_are_classified_by_address_space_and_type() {
        let global = Some(cl::CL_KERNEL_ARG_ADDRESS_GLOBAL);
        let private = Some(cl::CL_KERNEL_ARG_ADDRESS_PRIVATE);
        assert_eq!(classify(global, Some("float*")), ArgDecl::Buffer);
        assert_eq!(
            classify(Some(cl::CL_KERNEL_ARG_ADDRESS_CONSTANT), Some("int*")),
            ArgDecl::Buffer
        );
        assert_eq!(
            classify(Some(cl::CL_KERNEL_ARG_ADDRESS_LOCAL), Some("int*")),
            ArgDecl::Local
        );
        assert_eq!(classify(global, Some("image2d_t")), ArgDecl::Image);
        assert_eq!(classify(private, Some("image3d_t")), ArgDecl::Image);
        assert_eq!(classify(private, Some("sampler_t")), ArgDecl::Sampler);
        assert_eq!(classify(private, Some("int2")), ArgDecl::Value(Some(8)));
        assert_eq!(classify(private, Some("struct s")), ArgDecl::Value(None));
        assert_eq!(classify(None, None), ArgDecl::Unknown);
        assert_eq!(classify(private, None), ArgDecl::Unknown);
    }

    fn limits(non_uniform: bool, compile: [usize; 3]) -> GroupLimits {
        GroupLimits {
            kernel_max: 256,
            compile,
            item_max: vec![128, 64, 32],
            non_uniform,
        }
    }

    #[test]
    fn work_groups_follow_the_rules_of_opencl_1_2() {
        let free = limits(false, [0; 3]);
        let g = [64, 64, 1];
        assert_eq!(check_against(&free, 2, &g, None), Ok(()));
        assert_eq!(check_against(&free, 2, &g, Some(&[8, 8, 0])), Ok(()));
        let wg = Err(cl::CL_INVALID_WORK_GROUP_SIZE);
        assert_eq!(check_against(&free, 2, &g, Some(&[0, 8, 0])), wg);
        assert_eq!(
            check_against(&free, 1, &[256, 1, 1], Some(&[256, 0, 0])),
            Err(cl::CL_INVALID_WORK_ITEM_SIZE)
        );
        assert_eq!(check_against(&free, 2, &g, Some(&[64, 8, 0])), wg);
        assert_eq!(check_against(&free, 1, &[3, 1, 1], Some(&[2, 0, 0])), wg);
        let open = limits(true, [0; 3]);
        assert_eq!(
            check_against(&open, 1, &[3, 1, 1], Some(&[2, 0, 0])),
            Ok(())
        );
        let required = limits(false, [4, 2, 1]);
        assert_eq!(check_against(&required, 2, &g, None), wg);
        assert_eq!(check_against(&required, 2, &g, Some(&[4, 2, 0])), Ok(()));
        assert_eq!(check_against(&required, 2, &g, Some(&[2, 4, 0])), wg);
        assert_eq!(
            check_against(&required, 3, &[4, 2, 2], Some(&[4, 2, 2])),
            wg
        );
    }
}
