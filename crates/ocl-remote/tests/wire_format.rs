//! The bytes of one message of each kind, as the ICD and the node exchanged them before
//! messages were declared from their field lists (protocol version 1), with each
//! enqueued command behind its wait list since version 2. A declaration whose fields
//! were reordered would still decode what it encodes, but would no longer talk to an
//! older node or ICD: these vectors say what must not change.

use ocl_remote::proto::{
    Command, EventDone, HelloInfo, ImageCmd, ImageOp, KernelArg, NdRange, Queued, Request, Response,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_request_keeps_its_bytes() {
    let vectors: Vec<(Request<'_>, &str)> = vec![
        (
            Request::Hello {
                version: 1,
                host_id: b"abc",
                tenant: b"t",
                token: b"k",
            },
            "1500000001000000070000000000000001000000030000006162630100000074010000006b",
        ),
        (
            Request::GetPlatformInfo {
                platform: 1,
                param: 2,
            },
            "080000000200000007000000000000000100000002000000",
        ),
        (
            Request::GetDeviceInfo {
                device: 1,
                param: 2,
            },
            "080000000300000007000000000000000100000002000000",
        ),
        (
            Request::CreateContext {
                id: 7,
                devices: vec![0, 3],
            },
            concat!(
                "1400000004000000070000000000000007000000000000000200000000000000",
                "03000000",
            ),
        ),
        (
            Request::CreateQueue {
                id: 1,
                context: 2,
                device: 3,
                properties: 4,
            },
            concat!(
                "1c00000005000000070000000000000001000000000000000200000000000000",
                "030000000400000000000000",
            ),
        ),
        (
            Request::CreateBuffer {
                id: 9,
                context: 7,
                flags: 1,
                size: 3,
                data: &[1, 2, 3],
            },
            concat!(
                "2700000006000000070000000000000009000000000000000700000000000000",
                "0100000000000000030000000000000003000000010203",
            ),
        ),
        (
            Request::CreateProgramWithSource {
                id: 1,
                context: 2,
                source: b"kernel",
            },
            concat!(
                "1a00000007000000070000000000000001000000000000000200000000000000",
                "060000006b65726e656c",
            ),
        ),
        (
            Request::CreateProgramWithBinary {
                id: 1,
                context: 2,
                binaries: vec![(0, b"bin"), (1, b"")],
            },
            concat!(
                "2700000008000000070000000000000001000000000000000200000000000000",
                "02000000000000000300000062696e0100000000000000",
            ),
        ),
        (
            Request::BuildProgram {
                program: 1,
                devices: vec![1],
                options: b"-O2",
            },
            concat!(
                "1700000009000000070000000000000001000000000000000100000001000000",
                "030000002d4f32",
            ),
        ),
        (
            Request::CompileProgram {
                program: 1,
                devices: vec![0],
                options: b"-DX",
                headers: vec![(4, b"a.h")],
            },
            concat!(
                "2a00000014000000070000000000000001000000000000000100000000000000",
                "030000002d445801000000040000000000000003000000612e68",
            ),
        ),
        (
            Request::LinkProgram {
                id: 9,
                context: 2,
                devices: vec![],
                options: b"",
                inputs: vec![1, 3],
            },
            concat!(
                "2c00000015000000070000000000000009000000000000000200000000000000",
                "00000000000000000200000001000000000000000300000000000000",
            ),
        ),
        (
            Request::GetProgramInfo {
                program: 1,
                param: 2,
            },
            "0c0000000a0000000700000000000000010000000000000002000000",
        ),
        (
            Request::GetProgramBuildInfo {
                program: 1,
                device: 2,
                param: 3,
            },
            "100000000b000000070000000000000001000000000000000200000003000000",
        ),
        (
            Request::CreateKernel {
                id: 1,
                program: 2,
                name: b"k",
            },
            concat!(
                "150000000c000000070000000000000001000000000000000200000000000000",
                "010000006b",
            ),
        ),
        (
            Request::GetKernelWorkGroupInfo {
                kernel: 1,
                device: 2,
                param: 3,
            },
            "100000000d000000070000000000000001000000000000000200000003000000",
        ),
        (
            Request::GetKernelArgInfo {
                kernel: 5,
                index: 2,
                param: 0x1196,
            },
            "100000000e000000070000000000000005000000000000000200000096110000",
        ),
        (
            Request::GetKernelInfo {
                kernel: 5,
                param: 2,
            },
            "0c0000000f0000000700000000000000050000000000000002000000",
        ),
        (
            Request::Release { id: 5 },
            "080000001000000007000000000000000500000000000000",
        ),
        (Request::Flush, "00000000120000000700000000000000"),
        (
            Request::CreateSubBuffer {
                id: 9,
                parent: 3,
                flags: 1,
                offset: 128,
                size: 64,
            },
            concat!(
                "2800000013000000070000000000000009000000000000000300000000000000",
                "010000000000000080000000000000004000000000000000",
            ),
        ),
        (
            Request::CreateImage {
                id: 11,
                context: 7,
                flags: 4,
                format: [0x10B5, 0x10D2],
                desc: [0x10F1, 2, 1, 0, 0],
                data: &[9; 8],
            },
            concat!(
                "540000001600000007000000000000000b000000000000000700000000000000",
                "0400000000000000b5100000d2100000f1100000000000000200000000000000",
                "0100000000000000000000000000000000000000000000000800000009090909",
                "09090909",
            ),
        ),
        (
            Request::GetImageInfo {
                image: 11,
                param: 0x1114,
            },
            "0c0000001700000007000000000000000b0000000000000014110000",
        ),
        (
            Request::GetSupportedImageFormats {
                context: 7,
                flags: 1,
                image_type: 0x10F1,
            },
            concat!(
                "1400000018000000070000000000000007000000000000000100000000000000",
                "f1100000",
            ),
        ),
        (
            Request::CreateSampler {
                id: 12,
                context: 7,
                normalized: 0,
                addressing: 0x1131,
                filter: 0x1140,
            },
            concat!(
                "1c0000001900000007000000000000000c000000000000000700000000000000",
                "000000003111000040110000",
            ),
        ),
        (
            Request::enqueue(vec![Command::Write {
                queue: 1,
                event: 0,
                buffer: 2,
                offset: 3,
                data: b"hi",
            }]),
            concat!(
                "2f00000011000000070000000000000001000000000000000101000000000000",
                "00000000000000000002000000000000000300000000000000020000006869",
            ),
        ),
        (
            Request::enqueue(vec![Command::Read {
                queue: 1,
                event: 9,
                buffer: 2,
                offset: 4,
                size: 8,
                token: 3,
            }]),
            concat!(
                "3900000011000000070000000000000001000000000000000201000000000000",
                "0009000000000000000200000000000000040000000000000008000000000000",
                "000300000000000000",
            ),
        ),
        (
            Request::enqueue(vec![Command::Copy {
                queue: 1,
                event: 0,
                src: 2,
                dst: 3,
                src_offset: 0,
                dst_offset: 8,
                size: 8,
            }]),
            concat!(
                "4100000011000000070000000000000001000000000000000301000000000000",
                "0000000000000000000200000000000000030000000000000000000000000000",
                "0008000000000000000800000000000000",
            ),
        ),
        (
            Request::enqueue(vec![Command::Fill {
                queue: 1,
                event: 0,
                buffer: 2,
                pattern: &[0, 1],
                offset: 0,
                size: 8,
            }]),
            concat!(
                "3700000011000000070000000000000001000000000000000401000000000000",
                "0000000000000000000200000000000000020000000001000000000000000008",
                "00000000000000",
            ),
        ),
        (
            Request::enqueue(vec![Command::NdRange(NdRange {
                queue: 1,
                event: 4,
                kernel: 5,
                work_dim: 2,
                offset: [0, 1, 0],
                global: [64, 32, 0],
                local: Some([8, 8, 0]),
                args: vec![
                    KernelArg::Mem(2),
                    KernelArg::NullMem,
                    KernelArg::Local(256),
                    KernelArg::Bytes(&[1, 0]),
                    KernelArg::Unset,
                    KernelArg::Sampler(6),
                ],
            })]),
            concat!(
                "7b00000011000000070000000000000001000000000000000501000000000000",
                "0004000000000000000500000000000000020000000000000000010000000000",
                "0000400000000000000020000000000000000108000000000000000800000000",
                "0000000600000001020000000000000002030001000000000000040200000001",
                "0000050600000000000000",
            ),
        ),
        (
            Request::enqueue(vec![Command::NdRange(NdRange {
                queue: 1,
                event: 0,
                kernel: 5,
                work_dim: 1,
                offset: [0; 3],
                global: [4, 0, 0],
                local: None,
                args: vec![],
            })]),
            concat!(
                "3700000011000000070000000000000001000000000000000501000000000000",
                "0000000000000000000500000000000000010000000000000000040000000000",
                "00000000000000",
            ),
        ),
        (
            Request::enqueue(vec![
                Command::Marker {
                    queue: 1,
                    event: 10,
                },
                Command::Barrier { queue: 1, event: 0 },
            ]),
            concat!(
                "2e00000011000000070000000000000002000000000000000601000000000000",
                "000a00000000000000000000000701000000000000000000000000000000",
            ),
        ),
        (
            Request::enqueue(vec![Command::Image(ImageCmd {
                queue: 1,
                event: 2,
                op: ImageOp::Write,
                src: 0,
                dst: 13,
                src_origin: [0; 3],
                dst_origin: [0, 3, 0],
                region: [1, 1, 1],
                offset: 0,
                token: 0,
                data: &[7; 4],
            })]),
            concat!(
                "8a00000011000000070000000000000001000000000000000801000000000000",
                "0002000000000000000100000000000000000d00000000000000000000000000",
                "0000000000000000000000000000000000000000000000000000030000000000",
                "0000000000000000000001000000000000000100000000000000010000000000",
                "0000000000000000000000000000000000000400000007070707",
            ),
        ),
        (
            Request::enqueue(vec![Command::Image(ImageCmd {
                queue: 1,
                event: 0,
                op: ImageOp::ToBuffer,
                src: 11,
                dst: 13,
                src_origin: [1, 2, 0],
                dst_origin: [0; 3],
                region: [4, 5, 1],
                offset: 64,
                token: 0,
                data: &[],
            })]),
            concat!(
                "8600000011000000070000000000000001000000000000000801000000000000",
                "000000000000000000030b000000000000000d00000000000000010000000000",
                "0000020000000000000000000000000000000000000000000000000000000000",
                "0000000000000000000004000000000000000500000000000000010000000000",
                "00004000000000000000000000000000000000000000",
            ),
        ),
        (
            Request::Enqueue {
                commands: vec![Queued {
                    wait: vec![5, 6],
                    command: Command::Marker {
                        queue: 1,
                        event: 10,
                    },
                }],
            },
            concat!(
                "29000000110000000700000000000000",
                "01000000",
                "02000000",
                "0500000000000000",
                "0600000000000000",
                "06",
                "0100000000000000",
                "0a00000000000000",
            ),
        ),
    ];
    for (request, expected) in vectors {
        let mut out = Vec::new();
        request.encode(7, &mut out);
        assert_eq!(hex(&out), expected, "{request:?}");
        let body = &out[ocl_remote::proto::HEADER_LEN..];
        assert_eq!(Request::decode(request.kind(), body).as_ref(), Ok(&request));
    }
}

#[test]
fn every_response_keeps_its_bytes() {
    let vectors: Vec<(Response<'_>, &str)> = vec![
        (
            Response::Reply {
                status: -5,
                payload: b"xyz",
            },
            "07000000640000000800000000000000fbffffff78797a",
        ),
        (
            Response::TaskDone {
                status: 0,
                events: vec![EventDone {
                    event: 3,
                    status: -5,
                    profile: [1, 2, 3, 4],
                }],
            },
            concat!(
                "3400000065000000080000000000000000000000010000000300000000000000",
                "fbffffff01000000000000000200000000000000030000000000000004000000",
                "00000000",
            ),
        ),
        (
            Response::ReadData {
                token: 5,
                offset: 1 << 20,
                data: b"data",
            },
            concat!(
                "1800000066000000080000000000000005000000000000000000100000000000",
                "0400000064617461",
            ),
        ),
    ];
    for (response, expected) in vectors {
        let mut out = Vec::new();
        response.encode(8, &mut out);
        assert_eq!(hex(&out), expected, "{response:?}");
        let body = &out[ocl_remote::proto::HEADER_LEN..];
        assert_eq!(
            Response::decode(response.kind(), body).as_ref(),
            Ok(&response)
        );
    }
    let info = HelloInfo {
        host_id: b"host",
        platforms: vec![vec![0, 1], vec![2]],
        local_socket: b"sock",
    };
    let mut out = Vec::new();
    info.encode(&mut out);
    assert_eq!(
        hex(&out),
        concat!(
            "04000000686f7374020000000200000000000000010000000100000002000000",
            "04000000736f636b",
        )
    );
}
