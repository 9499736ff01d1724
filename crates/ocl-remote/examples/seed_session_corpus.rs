//! Writes the seed inputs of the `session` fuzz target (`fuzz/corpus/session/seed-*`):
//! whole client conversations, from the ordinary to the ones that once hurt a node; and
//! of the `decode` target (`fuzz/corpus/decode/seed-*`): each of their messages alone.
//! Also the `session` target's regressions (`regression-*`): the inputs a campaign
//! found that aborted the service, written out again so that they stay readable.
//!
//! `cargo run -p ocl-remote --example seed_session_corpus`

use std::path::Path;

use ocl_remote::cl;
use ocl_remote::fuzzing::records;
use ocl_remote::proto::{Command, ImageCmd, ImageOp, KernelArg, NdRange, Queued, Request};

/// Touches no memory: a fuzzed launch must not write outside its buffers (see
/// `ocl_remote::fuzzing`).
const SRC: &[u8] = b"__kernel void k(__global int *v, int n) { }";

fn setup(source: &[u8], kernel: &'static [u8]) -> Vec<Request<'static>> {
    let source: &'static [u8] = Box::leak(source.to_vec().into_boxed_slice());
    vec![
        Request::CreateContext {
            id: 1,
            devices: vec![0],
        },
        Request::CreateQueue {
            id: 2,
            context: 1,
            device: 0,
            properties: 0,
        },
        Request::CreateBuffer {
            id: 3,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: 64,
            data: &[7; 64],
        },
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source,
        },
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"-cl-fast-relaxed-math",
        },
        Request::CreateKernel {
            id: 5,
            program: 4,
            name: kernel,
        },
    ]
}

fn launch(global: u64, local: Option<[u64; 3]>) -> Command<'static> {
    Command::NdRange(NdRange {
        queue: 2,
        event: 10,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [global, 0, 0],
        local,
        args: vec![KernelArg::Mem(3), KernelArg::Bytes(&[1, 0, 0, 0])],
    })
}

fn with(mut head: Vec<Request<'static>>, tail: Vec<Request<'static>>) -> Vec<Request<'static>> {
    head.extend(tail);
    head
}

/// Every buffer transfer, a marker and a barrier, each waiting for the one before.
fn transfers() -> Vec<Request<'static>> {
    vec![
        Request::Enqueue {
            // Each command waits for the one before it (the read also for an id that
            // names no event).
            commands: [
                Command::Write {
                    queue: 2,
                    event: 11,
                    buffer: 3,
                    offset: 8,
                    data: &[1, 2, 3, 4],
                },
                Command::Copy {
                    queue: 2,
                    event: 12,
                    src: 3,
                    dst: 3,
                    src_offset: 0,
                    dst_offset: 32,
                    size: 16,
                },
                Command::Fill {
                    queue: 2,
                    event: 13,
                    buffer: 3,
                    pattern: &[9, 9],
                    offset: 0,
                    size: 8,
                },
                Command::Marker {
                    queue: 2,
                    event: 14,
                },
                Command::Barrier {
                    queue: 2,
                    event: 15,
                },
                Command::Read {
                    queue: 2,
                    event: 16,
                    buffer: 3,
                    offset: 0,
                    size: 64,
                    token: 1,
                },
            ]
            .into_iter()
            .zip([
                vec![],
                vec![11],
                vec![12],
                vec![11, 13],
                vec![14],
                vec![15, 99],
            ])
            .map(|(command, wait)| Queued { wait, command })
            .collect(),
        },
        Request::Flush,
    ]
}

/// A launch and a read of its buffer.
fn launch_read() -> Vec<Request<'static>> {
    vec![
        Request::enqueue(vec![
            launch(16, None),
            Command::Read {
                queue: 2,
                event: 0,
                buffer: 3,
                offset: 0,
                size: 64,
                token: 7,
            },
        ]),
        Request::Flush,
    ]
}

/// The binaries of a program whose kernel's name is long, and a launch of it.
fn long_kernel_name_calls() -> Vec<Request<'static>> {
    vec![
        Request::GetProgramInfo {
            program: 4,
            param: cl::CL_PROGRAM_BINARY_SIZES,
        },
        Request::GetProgramInfo {
            program: 4,
            param: cl::CL_PROGRAM_BINARIES,
        },
        Request::enqueue(vec![launch(16, None)]),
        Request::Flush,
    ]
}

/// An info query of each kind.
fn infos() -> Vec<Request<'static>> {
    vec![
        Request::GetPlatformInfo {
            platform: 0,
            param: 0x0902,
        },
        Request::GetDeviceInfo {
            device: 0,
            param: 0x1010,
        },
        Request::GetProgramBuildInfo {
            program: 4,
            device: 0,
            param: 0x1183,
        },
        Request::GetKernelInfo {
            kernel: 5,
            param: cl::CL_KERNEL_FUNCTION_NAME,
        },
        Request::GetKernelWorkGroupInfo {
            kernel: 5,
            device: 0,
            param: 0x11B0,
        },
        Request::GetKernelArgInfo {
            kernel: 5,
            index: 0,
            param: 0x1196,
        },
    ]
}

/// A sub-buffer, and objects released while a launch still uses them.
fn sub_buffer_release_in_use() -> Vec<Request<'static>> {
    vec![
        Request::CreateSubBuffer {
            id: 6,
            parent: 3,
            flags: cl::CL_MEM_READ_WRITE,
            offset: 0,
            size: 32,
        },
        Request::enqueue(vec![launch(16, None)]),
        Request::Release { id: 3 },
        Request::Release { id: 5 },
        Request::Release { id: 1 },
        Request::Flush,
        Request::Release { id: 6 },
    ]
}

/// A compile with a header, a link, and a program from a binary that is not one.
fn compile_link_binary() -> Vec<Request<'static>> {
    vec![
        Request::CreateProgramWithSource {
            id: 7,
            context: 1,
            source: SRC,
        },
        Request::CompileProgram {
            program: 7,
            devices: vec![],
            options: b"",
            headers: vec![(4, b"h.h")],
        },
        Request::LinkProgram {
            id: 8,
            context: 1,
            devices: vec![],
            options: b"",
            inputs: vec![7],
        },
        Request::CreateProgramWithBinary {
            id: 9,
            context: 1,
            binaries: vec![(0, b"\x7fELF not really")],
        },
        Request::BuildProgram {
            program: 9,
            devices: vec![0],
            options: b"",
        },
    ]
}

/// An image, its info, a sampler, and a fill of the image.
fn images() -> Vec<Request<'static>> {
    vec![
        Request::GetSupportedImageFormats {
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            image_type: 0x10F1,
        },
        Request::CreateImage {
            id: 20,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            format: [0x10B5, 0x10D2],
            desc: [0x10F1, 4, 4, 1, 1],
            data: &[],
        },
        Request::GetImageInfo {
            image: 20,
            param: 0x1114,
        },
        Request::CreateSampler {
            id: 21,
            context: 1,
            normalized: 0,
            addressing: 0x1131,
            filter: 0x1140,
        },
        Request::enqueue(vec![Command::Image(ImageCmd {
            queue: 2,
            event: 0,
            op: ImageOp::Fill,
            src: 0,
            dst: 20,
            src_origin: [0; 3],
            dst_origin: [0; 3],
            region: [4, 4, 1],
            offset: 0,
            token: 0,
            data: &[0; 16],
        })]),
        Request::Flush,
    ]
}

/// The session target's seeds: a name, whether the client is on the node's host, and
/// the conversation.
fn seeds() -> Vec<(&'static str, bool, Vec<Request<'static>>)> {
    let long: &'static [u8] = Box::leak("k".repeat(300).into_bytes().into_boxed_slice());
    let long_src = format!(
        "__kernel void {}(__global int *v, int n) {{ }}",
        String::from_utf8_lossy(long)
    );
    let same_host_launch = vec![
        Request::enqueue(vec![launch(64, Some([16, 0, 0]))]),
        Request::Flush,
    ];
    vec![
        ("launch-read", false, with(setup(SRC, b"k"), launch_read())),
        (
            "launch-same-host",
            true,
            with(setup(SRC, b"k"), same_host_launch),
        ),
        ("transfers", false, with(setup(SRC, b"k"), transfers())),
        (
            "transfers-same-host",
            true,
            with(setup(SRC, b"k"), transfers()),
        ),
        (
            "long-kernel-name",
            false,
            with(setup(long_src.as_bytes(), long), long_kernel_name_calls()),
        ),
        ("infos", false, with(setup(SRC, b"k"), infos())),
        (
            "sub-buffer-release-in-use",
            false,
            with(setup(SRC, b"k"), sub_buffer_release_in_use()),
        ),
        (
            "compile-link-binary",
            false,
            with(setup(SRC, b"k"), compile_link_binary()),
        ),
        ("images", false, with(setup(SRC, b"k"), images())),
    ]
}

/// Conversations that once aborted the service, each now refused (the name says what
/// it was; `tests/hostile_runtime.rs` has the test).
fn regressions() -> Vec<(&'static str, bool, Vec<Request<'static>>)> {
    vec![(
        // PoCL asserted `source_len > 0` building a source with nothing before its
        // first NUL under options clang refuses.
        "program-source-without-text",
        false,
        vec![
            Request::CreateContext {
                id: 1,
                devices: vec![0],
            },
            Request::CreateProgramWithSource {
                id: 4,
                context: 1,
                source: b"\0__kernel void k() {}",
            },
            Request::BuildProgram {
                program: 4,
                devices: vec![],
                options: b"-cl-std=",
            },
        ],
    )]
}

fn main() {
    let seeds = seeds();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let (session, decode) = (corpus.join("session"), corpus.join("decode"));
    for dir in [&session, &decode] {
        std::fs::create_dir_all(dir).expect("corpus directory");
    }
    let mut messages = std::collections::BTreeSet::new();
    for (name, same_host, requests) in seeds {
        std::fs::write(
            session.join(format!("seed-{name}")),
            records(same_host, &requests),
        )
        .expect("write seed");
        for request in &requests {
            let mut frame = Vec::new();
            request.encode(0, &mut frame);
            // The decode target's input: the kind (2 bytes), then the body.
            messages.insert([&frame[4..6], &frame[ocl_remote::proto::HEADER_LEN..]].concat());
        }
    }
    for (name, same_host, requests) in regressions() {
        std::fs::write(
            session.join(format!("regression-{name}")),
            records(same_host, &requests),
        )
        .expect("write regression");
    }
    for (i, message) in messages.iter().enumerate() {
        std::fs::write(decode.join(format!("seed-{i:02}")), message).expect("write seed");
    }
}
