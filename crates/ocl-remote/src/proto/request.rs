//! Requests: what a client (the ICD) asks of the node, declared once each: the kind
//! number, the fields in wire order. A new call is one line here and its handling in the
//! service's session.

use super::command::{Command, Queued};
use super::frame::encode_frame;
use super::wire::{messages, Reader};
use super::ProtoError;

messages! {
    /// A request from a client (the ICD) to the node.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Request<'a>: u16, numbers in kind {
        /// The session's first message. `tenant` and `token` (UTF-8, empty: none) are
        /// the client's credential, checked by the node before anything else.
        Hello = HELLO(1) { version: u32, host_id: &'a [u8], tenant: &'a [u8], token: &'a [u8] },
        GetPlatformInfo = GET_PLATFORM_INFO(2) { platform: u32, param: u32 },
        GetDeviceInfo = GET_DEVICE_INFO(3) { device: u32, param: u32 },
        CreateContext = CREATE_CONTEXT(4) { id: u64, devices: Vec<u32> },
        CreateQueue = CREATE_QUEUE(5) { id: u64, context: u64, device: u32, properties: u64 },
        CreateBuffer = CREATE_BUFFER(6) {
            id: u64,
            context: u64,
            flags: u64,
            size: u64,
            data: &'a [u8],
        },
        CreateProgramWithSource = CREATE_PROGRAM_WITH_SOURCE(7) {
            id: u64,
            context: u64,
            source: &'a [u8],
        },
        /// `binaries` are (device, binary) pairs.
        CreateProgramWithBinary = CREATE_PROGRAM_WITH_BINARY(8) {
            id: u64,
            context: u64,
            binaries: Vec<(u32, &'a [u8])>,
        },
        BuildProgram = BUILD_PROGRAM(9) { program: u64, devices: Vec<u32>, options: &'a [u8] },
        GetProgramInfo = GET_PROGRAM_INFO(10) { program: u64, param: u32 },
        GetProgramBuildInfo = GET_PROGRAM_BUILD_INFO(11) { program: u64, device: u32, param: u32 },
        CreateKernel = CREATE_KERNEL(12) { id: u64, program: u64, name: &'a [u8] },
        GetKernelWorkGroupInfo = GET_KERNEL_WORK_GROUP_INFO(13) {
            kernel: u64,
            device: u32,
            param: u32,
        },
        GetKernelArgInfo = GET_KERNEL_ARG_INFO(14) { kernel: u64, index: u32, param: u32 },
        GetKernelInfo = GET_KERNEL_INFO(15) { kernel: u64, param: u32 },
        Release = RELEASE(16) { id: u64 },
        Enqueue = ENQUEUE(17) { commands: Vec<Queued<'a>> },
        Flush = FLUSH(18),
        CreateSubBuffer = CREATE_SUB_BUFFER(19) {
            id: u64,
            parent: u64,
            flags: u64,
            offset: u64,
            size: u64,
        },
        /// `clCompileProgram`: `headers` are (program id, include name) pairs.
        CompileProgram = COMPILE_PROGRAM(20) {
            program: u64,
            devices: Vec<u32>,
            options: &'a [u8],
            headers: Vec<(u64, &'a [u8])>,
        },
        /// `clLinkProgram`: creates program `id` in `context` from compiled `inputs`.
        LinkProgram = LINK_PROGRAM(21) {
            id: u64,
            context: u64,
            devices: Vec<u32>,
            options: &'a [u8],
            inputs: Vec<u64>,
        },
        /// `clCreateImage`: `format` is (channel order, channel type), `desc` is (image
        /// type, width, height, depth, array size); `data` (may be empty) is tightly
        /// packed: rows of `width` pixels, slices of `height` rows. For a 1D image on a
        /// buffer (`CL_MEM_OBJECT_IMAGE1D_BUFFER`, which has no array size) the last
        /// entry of `desc` is the buffer's id, and `data` is empty.
        CreateImage = CREATE_IMAGE(22) {
            id: u64,
            context: u64,
            flags: u64,
            format: [u32; 2],
            desc: [u64; 5],
            data: &'a [u8],
        },
        GetImageInfo = GET_IMAGE_INFO(23) { image: u64, param: u32 },
        /// Answered with the formats as `cl_image_format` pairs of `u32`.
        GetSupportedImageFormats = GET_SUPPORTED_IMAGE_FORMATS(24) {
            context: u64,
            flags: u64,
            image_type: u32,
        },
        CreateSampler = CREATE_SAMPLER(25) {
            id: u64,
            context: u64,
            normalized: u32,
            addressing: u32,
            filter: u32,
        },
    }
}

impl<'a> Request<'a> {
    /// An `Enqueue` of `commands` that wait for no event.
    pub fn enqueue(commands: Vec<Command<'a>>) -> Request<'a> {
        Request::Enqueue {
            commands: commands.into_iter().map(Queued::from).collect(),
        }
    }

    /// Appends the request as one frame with request id `id`.
    pub fn encode(&self, id: u64, out: &mut Vec<u8>) {
        encode_frame(out, self.kind(), id, |out| self.put_fields(out));
    }

    /// Decodes the body of a request frame of kind `kind`.
    pub fn decode(kind: u16, body: &'a [u8]) -> Result<Request<'a>, ProtoError> {
        let mut r = Reader::new(body);
        let request = Self::read_fields(kind, &mut r)?.ok_or(ProtoError::UnknownKind(kind))?;
        r.finish()?;
        Ok(request)
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
            tenant: b"team-a",
            token: b"secret",
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
        roundtrip(Request::enqueue(vec![
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
            Command::UserEvent {
                queue: 1,
                event: 11,
                status: -1,
            },
        ]));
        roundtrip(Request::Enqueue {
            commands: vec![
                Queued {
                    wait: vec![3, 9, 3],
                    command: Command::Barrier { queue: 1, event: 0 },
                },
                Queued {
                    wait: vec![],
                    command: Command::Marker { queue: 2, event: 4 },
                },
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
        roundtrip(Request::enqueue(
            ops.iter()
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
        ));
    }
}
