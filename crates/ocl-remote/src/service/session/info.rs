//! The info queries of a session (`clGet*Info`): answered by the runtime, except that
//! the platform and devices are presented as OpenCL 3.0 (see [`crate::service::presented`])
//! and a program's binaries are given only where generating them is safe.

use super::objects::{Image, Kernel, Program};
use super::{Answer, Session};
use crate::cl;
use crate::ffi::info_bytes;
use crate::proto::Request;
use crate::service::{presented, INFO_BYTES_MAX};

impl Session<'_> {
    /// Answers an info query, routed here by `Session::control`.
    pub(super) fn info(&self, request: Request<'_>) -> Answer {
        let api = &self.shared.runtime.api;
        match request {
            Request::GetPlatformInfo { platform, param } => self.platform_info(platform, param),
            Request::GetDeviceInfo { device, param } => self.device_info(device, param),
            Request::GetProgramInfo { program, param } => self.program_info(program, param),
            Request::GetImageInfo { image, param } => {
                let raw = self.objects.get::<Image>(image)?.real.handle();
                // SAFETY: valid image handle.
                info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetImageInfo)(raw, param, s, b, r)
                })
            }
            Request::GetProgramBuildInfo {
                program,
                device,
                param,
            } => {
                let program = self.objects.get::<Program>(program)?;
                let raw = program.real.handle();
                let dev = self.device(device)?.raw.0;
                // SAFETY: valid handles and buffers.
                info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetProgramBuildInfo)(raw, dev, param, s, b, r)
                })
            }
            Request::GetKernelInfo { kernel, param } => {
                let raw = self.objects.get::<Kernel>(kernel)?.real.handle();
                // SAFETY: valid kernel handle and buffers.
                info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetKernelInfo)(raw, param, s, b, r)
                })
            }
            Request::GetKernelWorkGroupInfo {
                kernel,
                device,
                param,
            } => {
                let raw = self.objects.get::<Kernel>(kernel)?.real.handle();
                let dev = self.device(device)?.raw.0;
                // SAFETY: valid handles and buffers.
                info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetKernelWorkGroupInfo)(raw, dev, param, s, b, r)
                })
            }
            Request::GetKernelArgInfo {
                kernel,
                index,
                param,
            } => {
                let raw = self.objects.get::<Kernel>(kernel)?.real.handle();
                // SAFETY: valid kernel handle and buffers.
                info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
                    (api.clGetKernelArgInfo)(raw, index, param, s, b, r)
                })
            }
            _ => unreachable!("control routes only info queries here"),
        }
    }

    /// Answers as the OpenCL 3.0 platform presented (see `presented`).
    fn platform_info(&self, platform: u32, param: u32) -> Answer {
        let api = &self.shared.runtime.api;
        let raw = self.shared.runtime.platform(platform)?.raw.0;
        if let Some(answer) = presented::fixed_platform_info(param) {
            return Ok(answer);
        }
        // SAFETY: `raw` is a platform of the runtime; info_bytes passes valid buffers.
        info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
            (api.clGetPlatformInfo)(raw, param, s, b, r)
        })
        .map(|answer| presented::platform_info(param, answer))
    }

    /// Answers as the OpenCL 3.0 device presented (see `presented`).
    fn device_info(&self, device: u32, param: u32) -> Answer {
        let api = &self.shared.runtime.api;
        let entry = self.device(device)?;
        if let Some(answer) = presented::fixed_device_info(param) {
            return Ok(answer);
        }
        let raw = entry.raw.0;
        // SAFETY: as above, for a device.
        info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
            (api.clGetDeviceInfo)(raw, param, s, b, r)
        })
        .map(|answer| presented::device_info(param, answer, &entry.memory, &entry.c_features))
    }

    fn program_info(&self, program: u64, param: u32) -> Answer {
        let api = &self.shared.runtime.api;
        let raw = self.objects.get::<Program>(program)?.real.handle();
        let binaries = [cl::CL_PROGRAM_BINARIES, cl::CL_PROGRAM_BINARY_SIZES];
        if binaries.contains(&param) && !self.code_generation_safe(raw) {
            return Err(cl::CL_OUT_OF_RESOURCES);
        }
        if param == cl::CL_PROGRAM_BINARIES {
            return self.program_binaries(raw);
        }
        // SAFETY: valid program handle and buffers.
        info_bytes(INFO_BYTES_MAX, &mut |s, b, r| unsafe {
            (api.clGetProgramInfo)(raw, param, s, b, r)
        })
    }
}
