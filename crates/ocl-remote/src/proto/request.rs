//! Requests: what a client (the ICD) asks of the node.

use super::command::{decode_command, Command};
use super::frame::encode_frame;
use super::wire::{put_bytes, put_count, put_u32, put_u32_list, put_u64, u32_list, Reader};
use super::{kind, ProtoError};

/// A request from a client (the ICD) to the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        version: u32,
        host_id: &'a [u8],
    },
    GetPlatformInfo {
        platform: u32,
        param: u32,
    },
    GetDeviceInfo {
        device: u32,
        param: u32,
    },
    CreateContext {
        id: u64,
        devices: Vec<u32>,
    },
    CreateQueue {
        id: u64,
        context: u64,
        device: u32,
        properties: u64,
    },
    CreateBuffer {
        id: u64,
        context: u64,
        flags: u64,
        size: u64,
        data: &'a [u8],
    },
    CreateProgramWithSource {
        id: u64,
        context: u64,
        source: &'a [u8],
    },
    CreateProgramWithBinary {
        id: u64,
        context: u64,
        binaries: Vec<(u32, &'a [u8])>,
    },
    BuildProgram {
        program: u64,
        devices: Vec<u32>,
        options: &'a [u8],
    },
    /// `clCompileProgram`: `headers` are (program id, include name) pairs.
    CompileProgram {
        program: u64,
        devices: Vec<u32>,
        options: &'a [u8],
        headers: Vec<(u64, &'a [u8])>,
    },
    /// `clLinkProgram`: creates program `id` in `context` from compiled `inputs`.
    LinkProgram {
        id: u64,
        context: u64,
        devices: Vec<u32>,
        options: &'a [u8],
        inputs: Vec<u64>,
    },
    GetProgramInfo {
        program: u64,
        param: u32,
    },
    GetProgramBuildInfo {
        program: u64,
        device: u32,
        param: u32,
    },
    CreateKernel {
        id: u64,
        program: u64,
        name: &'a [u8],
    },
    GetKernelWorkGroupInfo {
        kernel: u64,
        device: u32,
        param: u32,
    },
    GetKernelArgInfo {
        kernel: u64,
        index: u32,
        param: u32,
    },
    GetKernelInfo {
        kernel: u64,
        param: u32,
    },
    Release {
        id: u64,
    },
    Enqueue {
        commands: Vec<Command<'a>>,
    },
    Flush,
    CreateSubBuffer {
        id: u64,
        parent: u64,
        flags: u64,
        offset: u64,
        size: u64,
    },
    /// `clCreateImage`: `format` is (channel order, channel type), `desc` is (image type,
    /// width, height, depth, array size); `data` (may be empty) is tightly packed: rows
    /// of `width` pixels, slices of `height` rows.
    CreateImage {
        id: u64,
        context: u64,
        flags: u64,
        format: [u32; 2],
        desc: [u64; 5],
        data: &'a [u8],
    },
    GetImageInfo {
        image: u64,
        param: u32,
    },
    /// Answered with the formats as `cl_image_format` pairs of `u32`.
    GetSupportedImageFormats {
        context: u64,
        flags: u64,
        image_type: u32,
    },
    CreateSampler {
        id: u64,
        context: u64,
        normalized: u32,
        addressing: u32,
        filter: u32,
    },
}

impl<'a> Request<'a> {
    /// The header `kind` of this request.
    pub fn kind(&self) -> u16 {
        match self {
            Request::Hello { .. } => kind::HELLO,
            Request::GetPlatformInfo { .. } => kind::GET_PLATFORM_INFO,
            Request::GetDeviceInfo { .. } => kind::GET_DEVICE_INFO,
            Request::CreateContext { .. } => kind::CREATE_CONTEXT,
            Request::CreateQueue { .. } => kind::CREATE_QUEUE,
            Request::CreateBuffer { .. } => kind::CREATE_BUFFER,
            Request::CreateProgramWithSource { .. } => kind::CREATE_PROGRAM_WITH_SOURCE,
            Request::CreateProgramWithBinary { .. } => kind::CREATE_PROGRAM_WITH_BINARY,
            Request::BuildProgram { .. } => kind::BUILD_PROGRAM,
            Request::CompileProgram { .. } => kind::COMPILE_PROGRAM,
            Request::LinkProgram { .. } => kind::LINK_PROGRAM,
            Request::GetProgramInfo { .. } => kind::GET_PROGRAM_INFO,
            Request::GetProgramBuildInfo { .. } => kind::GET_PROGRAM_BUILD_INFO,
            Request::CreateKernel { .. } => kind::CREATE_KERNEL,
            Request::GetKernelWorkGroupInfo { .. } => kind::GET_KERNEL_WORK_GROUP_INFO,
            Request::GetKernelArgInfo { .. } => kind::GET_KERNEL_ARG_INFO,
            Request::GetKernelInfo { .. } => kind::GET_KERNEL_INFO,
            Request::Release { .. } => kind::RELEASE,
            Request::Enqueue { .. } => kind::ENQUEUE,
            Request::Flush => kind::FLUSH,
            Request::CreateSubBuffer { .. } => kind::CREATE_SUB_BUFFER,
            Request::CreateImage { .. } => kind::CREATE_IMAGE,
            Request::GetImageInfo { .. } => kind::GET_IMAGE_INFO,
            Request::GetSupportedImageFormats { .. } => kind::GET_SUPPORTED_IMAGE_FORMATS,
            Request::CreateSampler { .. } => kind::CREATE_SAMPLER,
        }
    }

    /// Appends the request as one frame with request id `id`.
    pub fn encode(&self, id: u64, out: &mut Vec<u8>) {
        encode_frame(out, self.kind(), id, |out| self.encode_body(out));
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        match self {
            Request::Hello { version, host_id } => {
                put_u32(out, *version);
                put_bytes(out, host_id);
            }
            Request::GetPlatformInfo { platform: a, param }
            | Request::GetDeviceInfo { device: a, param } => {
                put_u32(out, *a);
                put_u32(out, *param);
            }
            Request::CreateContext { id, devices } => {
                put_u64(out, *id);
                put_u32_list(out, devices);
            }
            Request::CreateQueue {
                id,
                context,
                device,
                properties,
            } => {
                put_u64(out, *id);
                put_u64(out, *context);
                put_u32(out, *device);
                put_u64(out, *properties);
            }
            Request::CreateBuffer {
                id,
                context,
                flags,
                size,
                data,
            } => {
                put_u64(out, *id);
                put_u64(out, *context);
                put_u64(out, *flags);
                put_u64(out, *size);
                put_bytes(out, data);
            }
            Request::CreateProgramWithSource {
                id,
                context,
                source,
            } => {
                put_u64(out, *id);
                put_u64(out, *context);
                put_bytes(out, source);
            }
            Request::CreateProgramWithBinary {
                id,
                context,
                binaries,
            } => {
                put_u64(out, *id);
                put_u64(out, *context);
                put_count(out, binaries.len());
                for (device, binary) in binaries {
                    put_u32(out, *device);
                    put_bytes(out, binary);
                }
            }
            Request::BuildProgram {
                program,
                devices,
                options,
            } => {
                put_u64(out, *program);
                put_u32_list(out, devices);
                put_bytes(out, options);
            }
            Request::CompileProgram {
                program,
                devices,
                options,
                headers,
            } => {
                put_u64(out, *program);
                put_u32_list(out, devices);
                put_bytes(out, options);
                put_count(out, headers.len());
                for (header, name) in headers {
                    put_u64(out, *header);
                    put_bytes(out, name);
                }
            }
            Request::LinkProgram {
                id,
                context,
                devices,
                options,
                inputs,
            } => {
                put_u64(out, *id);
                put_u64(out, *context);
                put_u32_list(out, devices);
                put_bytes(out, options);
                put_count(out, inputs.len());
                for input in inputs {
                    put_u64(out, *input);
                }
            }
            Request::GetProgramInfo {
                program: obj,
                param,
            }
            | Request::GetKernelInfo { kernel: obj, param } => {
                put_u64(out, *obj);
                put_u32(out, *param);
            }
            Request::GetProgramBuildInfo {
                program: obj,
                device: sub,
                param,
            }
            | Request::GetKernelWorkGroupInfo {
                kernel: obj,
                device: sub,
                param,
            }
            | Request::GetKernelArgInfo {
                kernel: obj,
                index: sub,
                param,
            } => {
                put_u64(out, *obj);
                put_u32(out, *sub);
                put_u32(out, *param);
            }
            Request::CreateKernel { id, program, name } => {
                put_u64(out, *id);
                put_u64(out, *program);
                put_bytes(out, name);
            }
            Request::Release { id } => put_u64(out, *id),
            Request::Enqueue { commands } => {
                put_count(out, commands.len());
                for c in commands {
                    c.encode(out);
                }
            }
            Request::Flush => {}
            Request::CreateSubBuffer {
                id,
                parent,
                flags,
                offset,
                size,
            } => {
                for v in [*id, *parent, *flags, *offset, *size] {
                    put_u64(out, v);
                }
            }
            Request::CreateImage {
                id,
                context,
                flags,
                format,
                desc,
                data,
            } => {
                for v in [*id, *context, *flags] {
                    put_u64(out, v);
                }
                for v in format {
                    put_u32(out, *v);
                }
                for v in desc {
                    put_u64(out, *v);
                }
                put_bytes(out, data);
            }
            Request::GetImageInfo { image, param } => {
                put_u64(out, *image);
                put_u32(out, *param);
            }
            Request::GetSupportedImageFormats {
                context,
                flags,
                image_type,
            } => {
                put_u64(out, *context);
                put_u64(out, *flags);
                put_u32(out, *image_type);
            }
            Request::CreateSampler {
                id,
                context,
                normalized,
                addressing,
                filter,
            } => {
                put_u64(out, *id);
                put_u64(out, *context);
                for v in [*normalized, *addressing, *filter] {
                    put_u32(out, v);
                }
            }
        }
    }

    /// Decodes the body of a request frame of kind `kind`.
    pub fn decode(kind: u16, body: &'a [u8]) -> Result<Request<'a>, ProtoError> {
        let mut r = Reader::new(body);
        let req = match kind {
            kind::HELLO => Request::Hello {
                version: r.u32()?,
                host_id: r.bytes()?,
            },
            kind::GET_PLATFORM_INFO => Request::GetPlatformInfo {
                platform: r.u32()?,
                param: r.u32()?,
            },
            kind::GET_DEVICE_INFO => Request::GetDeviceInfo {
                device: r.u32()?,
                param: r.u32()?,
            },
            kind::CREATE_CONTEXT => Request::CreateContext {
                id: r.u64()?,
                devices: u32_list(&mut r)?,
            },
            kind::CREATE_QUEUE => Request::CreateQueue {
                id: r.u64()?,
                context: r.u64()?,
                device: r.u32()?,
                properties: r.u64()?,
            },
            kind::CREATE_BUFFER => Request::CreateBuffer {
                id: r.u64()?,
                context: r.u64()?,
                flags: r.u64()?,
                size: r.u64()?,
                data: r.bytes()?,
            },
            kind::CREATE_PROGRAM_WITH_SOURCE => Request::CreateProgramWithSource {
                id: r.u64()?,
                context: r.u64()?,
                source: r.bytes()?,
            },
            kind::CREATE_PROGRAM_WITH_BINARY => {
                let id = r.u64()?;
                let context = r.u64()?;
                let binaries = r.list(8, |r| Ok((r.u32()?, r.bytes()?)))?;
                Request::CreateProgramWithBinary {
                    id,
                    context,
                    binaries,
                }
            }
            kind::BUILD_PROGRAM => Request::BuildProgram {
                program: r.u64()?,
                devices: u32_list(&mut r)?,
                options: r.bytes()?,
            },
            kind::COMPILE_PROGRAM => {
                let program = r.u64()?;
                let devices = u32_list(&mut r)?;
                let options = r.bytes()?;
                let headers = r.list(12, |r| Ok((r.u64()?, r.bytes()?)))?;
                Request::CompileProgram {
                    program,
                    devices,
                    options,
                    headers,
                }
            }
            kind::LINK_PROGRAM => {
                let id = r.u64()?;
                let context = r.u64()?;
                let devices = u32_list(&mut r)?;
                let options = r.bytes()?;
                let inputs = r.list(8, Reader::u64)?;
                Request::LinkProgram {
                    id,
                    context,
                    devices,
                    options,
                    inputs,
                }
            }
            kind::GET_PROGRAM_INFO => Request::GetProgramInfo {
                program: r.u64()?,
                param: r.u32()?,
            },
            kind::GET_PROGRAM_BUILD_INFO => Request::GetProgramBuildInfo {
                program: r.u64()?,
                device: r.u32()?,
                param: r.u32()?,
            },
            kind::CREATE_KERNEL => Request::CreateKernel {
                id: r.u64()?,
                program: r.u64()?,
                name: r.bytes()?,
            },
            kind::GET_KERNEL_WORK_GROUP_INFO => Request::GetKernelWorkGroupInfo {
                kernel: r.u64()?,
                device: r.u32()?,
                param: r.u32()?,
            },
            kind::GET_KERNEL_ARG_INFO => Request::GetKernelArgInfo {
                kernel: r.u64()?,
                index: r.u32()?,
                param: r.u32()?,
            },
            kind::GET_KERNEL_INFO => Request::GetKernelInfo {
                kernel: r.u64()?,
                param: r.u32()?,
            },
            kind::RELEASE => Request::Release { id: r.u64()? },
            kind::ENQUEUE => {
                // The smallest command (marker) is 17 bytes.
                let commands = r.list(17, decode_command)?;
                Request::Enqueue { commands }
            }
            kind::FLUSH => Request::Flush,
            kind::CREATE_SUB_BUFFER => Request::CreateSubBuffer {
                id: r.u64()?,
                parent: r.u64()?,
                flags: r.u64()?,
                offset: r.u64()?,
                size: r.u64()?,
            },
            kind::CREATE_IMAGE => Request::CreateImage {
                id: r.u64()?,
                context: r.u64()?,
                flags: r.u64()?,
                format: [r.u32()?, r.u32()?],
                desc: [r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?],
                data: r.bytes()?,
            },
            kind::GET_IMAGE_INFO => Request::GetImageInfo {
                image: r.u64()?,
                param: r.u32()?,
            },
            kind::GET_SUPPORTED_IMAGE_FORMATS => Request::GetSupportedImageFormats {
                context: r.u64()?,
                flags: r.u64()?,
                image_type: r.u32()?,
            },
            kind::CREATE_SAMPLER => Request::CreateSampler {
                id: r.u64()?,
                context: r.u64()?,
                normalized: r.u32()?,
                addressing: r.u32()?,
                filter: r.u32()?,
            },
            other => return Err(ProtoError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{decode_frame, Decoded, ImageCmd, ImageOp, KernelArg, NdRange};

    fn roundtrip(req: Request<'_>) {
        let mut out = Vec::new();
        req.encode(42, &mut out);
        let Decoded::Complete((h, body), used) = decode_frame(&out, u32::MAX).unwrap() else {
            panic!("partial")
        };
        assert_eq!(used, out.len());
        assert_eq!(h.id, 42);
        assert_eq!(Request::decode(h.kind, body).unwrap(), req);
        // Every strict prefix is partial or a decode error, never a panic.
        for cut in 0..out.len() {
            match decode_frame(&out[..cut], u32::MAX).unwrap() {
                Decoded::Partial => {}
                Decoded::Complete(..) => panic!("prefix {cut} decoded as complete"),
            }
        }
        for cut in 0..body.len() {
            assert!(Request::decode(h.kind, &body[..cut]).is_err());
        }
    }

    #[test]
    fn requests_roundtrip() {
        roundtrip(Request::Hello {
            version: 1,
            host_id: b"abc",
        });
        roundtrip(Request::CreateContext {
            id: 7,
            devices: vec![0, 3],
        });
        roundtrip(Request::CreateBuffer {
            id: 9,
            context: 7,
            flags: 1,
            size: 64,
            data: &[1, 2, 3],
        });
        roundtrip(Request::CreateProgramWithBinary {
            id: 1,
            context: 2,
            binaries: vec![(0, b"bin")],
        });
        roundtrip(Request::BuildProgram {
            program: 1,
            devices: vec![],
            options: b"-O2",
        });
        roundtrip(Request::CompileProgram {
            program: 1,
            devices: vec![0],
            options: b"-DX=1",
            headers: vec![(4, b"a/b.h".as_slice()), (5, b"c.h")],
        });
        roundtrip(Request::LinkProgram {
            id: 9,
            context: 2,
            devices: vec![],
            options: b"",
            inputs: vec![1, 3],
        });
        roundtrip(Request::GetKernelArgInfo {
            kernel: 5,
            index: 2,
            param: 0x1196,
        });
        roundtrip(Request::Flush);
        roundtrip(Request::CreateSubBuffer {
            id: 9,
            parent: 3,
            flags: 1,
            offset: 128,
            size: 64,
        });
        roundtrip(Request::Enqueue {
            commands: vec![
                Command::Write {
                    queue: 1,
                    event: 0,
                    buffer: 2,
                    offset: 0,
                    data: b"hello",
                },
                Command::Read {
                    queue: 1,
                    event: 9,
                    buffer: 2,
                    offset: 4,
                    size: 8,
                    token: 3,
                },
                Command::Copy {
                    queue: 1,
                    event: 0,
                    src: 2,
                    dst: 3,
                    src_offset: 0,
                    dst_offset: 8,
                    size: 8,
                },
                Command::Fill {
                    queue: 1,
                    event: 0,
                    buffer: 2,
                    pattern: &[0, 1],
                    offset: 0,
                    size: 8,
                },
                Command::NdRange(NdRange {
                    queue: 1,
                    event: 4,
                    kernel: 5,
                    work_dim: 2,
                    offset: [0, 0, 0],
                    global: [64, 32, 0],
                    local: Some([8, 8, 0]),
                    args: vec![
                        KernelArg::Mem(2),
                        KernelArg::NullMem,
                        KernelArg::Local(256),
                        KernelArg::Bytes(&[1, 0, 0, 0]),
                        KernelArg::Unset,
                        KernelArg::Sampler(6),
                    ],
                }),
                Command::Marker {
                    queue: 1,
                    event: 10,
                },
                Command::Barrier { queue: 1, event: 0 },
            ],
        });
        roundtrip(Request::CreateImage {
            id: 11,
            context: 7,
            flags: 4,
            format: [0x10B5, 0x10D2],
            desc: [0x10F1, 16, 8, 0, 0],
            data: &[9; 12],
        });
        roundtrip(Request::GetImageInfo {
            image: 11,
            param: 0x1114,
        });
        roundtrip(Request::GetSupportedImageFormats {
            context: 7,
            flags: 1,
            image_type: 0x10F1,
        });
        roundtrip(Request::CreateSampler {
            id: 12,
            context: 7,
            normalized: 0,
            addressing: 0x1131,
            filter: 0x1140,
        });
        let ops = [
            ImageOp::Read,
            ImageOp::Write,
            ImageOp::Copy,
            ImageOp::ToBuffer,
            ImageOp::FromBuffer,
            ImageOp::Fill,
        ];
        roundtrip(Request::Enqueue {
            commands: ops
                .iter()
                .enumerate()
                .map(|(i, op)| {
                    Command::Image(ImageCmd {
                        queue: 1,
                        event: i as u64,
                        op: *op,
                        src: 11,
                        dst: 13,
                        src_origin: [1, 2, 0],
                        dst_origin: [0, 3, 0],
                        region: [4, 5, 1],
                        offset: 64,
                        token: 8,
                        data: if *op == ImageOp::Read { &[] } else { &[7; 16] },
                    })
                })
                .collect(),
        });
    }
}
