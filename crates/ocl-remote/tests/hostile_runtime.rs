//! Client input that makes the vendor runtime abort must not reach it: the runtime lives
//! in the node's process, so an abort there would end every client's session. Needs an
//! OpenCL runtime with a device (PoCL); without one the tests say so and pass.

mod common;

use common::{inc, read_cmd, service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Request};
use ocl_remote::service::ServiceConfig;

fn long_kernel_source(name: &str) -> Vec<u8> {
    format!("__kernel void {name}(__global int *v) {{ v[get_global_id(0)] += 1; }}").into_bytes()
}

/// Context 1, queue 2, a 64-byte buffer 3, program 4 with one kernel called `name`,
/// built, and kernel 5 made from it.
fn program_with_kernel(c: &mut Client, name: &str) {
    let device = c.info.1[0][0];
    let source = long_kernel_source(name);
    for request in [
        Request::CreateContext {
            id: 1,
            devices: vec![device],
        },
        Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0,
        },
        Request::CreateBuffer {
            id: 3,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: 64,
            data: &[0; 64],
        },
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source: &source,
        },
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
        Request::CreateKernel {
            id: 5,
            program: 4,
            name: name.as_bytes(),
        },
    ] {
        assert_eq!(c.call(&request).0, cl::CL_SUCCESS, "{request:?}");
    }
}

fn launch(c: &mut Client) -> i32 {
    let (status, _, _) = c.task(vec![Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [16, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(3)],
    })]);
    status
}

fn binary_sizes(c: &mut Client) -> i32 {
    c.call(&Request::GetProgramInfo {
        program: 4,
        param: cl::CL_PROGRAM_BINARY_SIZES,
    })
    .0
}

#[test]
fn a_kernel_name_the_runtime_cannot_take_fails_only_that_call() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let limit = ServiceConfig::default().kernel_name_bytes_max;
    let mut other = Client::connect(svc.local_addr()).unwrap();
    other.setup(0x20);

    // PoCL aborts the process generating code for this name (natively too): at the
    // program cache's binary query after the build, at a binary query, at a launch.
    let mut hostile = Client::connect(svc.local_addr()).unwrap();
    program_with_kernel(&mut hostile, &"k".repeat(300));
    assert_eq!(binary_sizes(&mut hostile), cl::CL_OUT_OF_RESOURCES);
    assert_ne!(launch(&mut hostile), cl::CL_SUCCESS);
    // The kernel is still an ordinary kernel for every query that makes no code.
    assert_eq!(
        hostile
            .call(&Request::GetKernelInfo {
                kernel: 5,
                param: cl::CL_KERNEL_NUM_ARGS
            })
            .0,
        cl::CL_SUCCESS
    );

    // The longest name allowed works in full.
    let mut edge = Client::connect(svc.local_addr()).unwrap();
    program_with_kernel(&mut edge, &"e".repeat(limit));
    assert_eq!(binary_sizes(&mut edge), cl::CL_SUCCESS);
    assert_eq!(launch(&mut edge), cl::CL_SUCCESS);

    // The other client's work is untouched, and the service takes new clients.
    let (status, _, reads) = other.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    let want: Vec<u8> = (0..16)
        .flat_map(|_| (0x2020_2020i32 + 1).to_le_bytes())
        .collect();
    assert_eq!(reads[0].1, want);
    assert!(Client::connect(svc.local_addr()).is_ok());
}

/// The program cache hands a second client an executable loaded from binaries; the
/// runtime must still see a source program wherever it reads source (PoCL read a
/// header's missing source through a null pointer and took the node down).
#[test]
fn a_program_built_from_the_cache_still_compiles_and_serves_as_a_header() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let source = b"int twice(int x) { return 2 * x; }\n__kernel void k(__global int *v) { v[0] = twice(v[0]); }";
    let header_user =
        b"#include \"twice.h\"\n__kernel void j(__global int *v) { v[0] = twice(v[0]); }";
    let build = |c: &mut Client, options: &'static [u8]| {
        let device = c.info.1[0][0];
        for request in [
            Request::CreateContext {
                id: 1,
                devices: vec![device],
            },
            Request::CreateProgramWithSource {
                id: 4,
                context: 1,
                source,
            },
            Request::BuildProgram {
                program: 4,
                devices: vec![],
                options,
            },
        ] {
            assert_eq!(c.call(&request).0, cl::CL_SUCCESS, "{request:?}");
        }
    };
    // The first client's build fills the cache; the second's is a hit.
    build(&mut Client::connect(svc.local_addr()).unwrap(), b"-DA=1");
    let mut c = Client::connect(svc.local_addr()).unwrap();
    build(&mut c, b"-DA=1");
    let compile = |c: &mut Client, program: u64, headers: Vec<(u64, &'static [u8])>| {
        c.call(&Request::CompileProgram {
            program,
            devices: vec![],
            options: b"",
            headers,
        })
        .0
    };
    assert_eq!(
        c.call(&Request::CreateProgramWithSource {
            id: 6,
            context: 1,
            source: header_user,
        })
        .0,
        cl::CL_SUCCESS
    );
    assert_eq!(compile(&mut c, 6, vec![(4, b"twice.h")]), cl::CL_SUCCESS);
    assert_eq!(compile(&mut c, 4, vec![]), cl::CL_SUCCESS);

    // A program made from binaries has no source: it neither compiles nor serves as a
    // header.
    let (status, binaries) = c.call(&Request::GetProgramInfo {
        program: 6,
        param: cl::CL_PROGRAM_BINARIES,
    });
    assert_eq!(status, cl::CL_SUCCESS);
    let mut reader = ocl_remote::proto::Reader::new(&binaries);
    assert_eq!(reader.count(4).unwrap(), 1);
    let binary = reader.bytes().unwrap();
    assert_eq!(
        c.call(&Request::CreateProgramWithBinary {
            id: 7,
            context: 1,
            binaries: vec![(c.info.1[0][0], binary)],
        })
        .0,
        cl::CL_SUCCESS
    );
    assert_eq!(compile(&mut c, 7, vec![]), cl::CL_INVALID_OPERATION);
    assert_eq!(
        compile(&mut c, 6, vec![(7, b"twice.h")]),
        cl::CL_INVALID_OPERATION
    );
    assert!(Client::connect(svc.local_addr()).is_ok());
}

/// PoCL asserts (aborting the node) when a link input holds no compiled object; the
/// node answers `CL_INVALID_OPERATION` as OpenCL 1.2 specifies, and links good inputs.
#[test]
fn a_link_of_inputs_that_did_not_compile_is_refused() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut c = Client::connect(svc.local_addr()).unwrap();
    let device = c.info.1[0][0];
    let sources: [&[u8]; 3] = [
        b"__kernel void k(__global int *v) { v[0] = 1; }",
        b"__kernel void k(__global int *v) { this is not C; }",
        b"__kernel void j(__global int *v) { v[0] = 2; }",
    ];
    assert_eq!(
        c.call(&Request::CreateContext {
            id: 1,
            devices: vec![device]
        })
        .0,
        cl::CL_SUCCESS
    );
    for (id, source) in (10..).zip(sources) {
        let request = Request::CreateProgramWithSource {
            id,
            context: 1,
            source,
        };
        assert_eq!(c.call(&request).0, cl::CL_SUCCESS);
    }
    let compile = |c: &mut Client, program| {
        c.call(&Request::CompileProgram {
            program,
            devices: vec![],
            options: b"",
            headers: vec![],
        })
        .0
    };
    assert_eq!(compile(&mut c, 10), cl::CL_SUCCESS);
    assert_ne!(compile(&mut c, 11), cl::CL_SUCCESS);
    let link = |c: &mut Client, id, inputs| {
        c.call(&Request::LinkProgram {
            id,
            context: 1,
            devices: vec![],
            options: b"",
            inputs,
        })
        .0
    };
    // A failed compile, and a program never compiled.
    assert_eq!(link(&mut c, 20, vec![10, 11]), cl::CL_INVALID_OPERATION);
    assert_eq!(link(&mut c, 21, vec![12]), cl::CL_INVALID_OPERATION);
    assert_eq!(link(&mut c, 22, vec![10]), cl::CL_SUCCESS);
    assert!(Client::connect(svc.local_addr()).is_ok());
}

/// Options whose last word is `-D` or `-I` (an option without its argument) crash PoCL
/// 3.1 in build, compile and link alike (natively too): the node refuses them and
/// serves on; the same option with its argument is used as given.
#[test]
fn options_without_their_argument_are_refused() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut c = Client::connect(svc.local_addr()).unwrap();
    c.setup_context();
    let source = long_kernel_source("k");
    let program = Request::CreateProgramWithSource {
        id: 4,
        context: 1,
        source: &source,
    };
    assert_eq!(c.call(&program).0, cl::CL_SUCCESS);
    let build = |c: &mut Client, options| {
        c.call(&Request::BuildProgram {
            program: 4,
            devices: vec![],
            options,
        })
        .0
    };
    let compile = |c: &mut Client, options| {
        c.call(&Request::CompileProgram {
            program: 4,
            devices: vec![],
            options,
            headers: vec![],
        })
        .0
    };
    for options in [&b"-D"[..], b"-DX=1 -I ", b"-cl-std=CL1.2 -D\0"] {
        let shown = String::from_utf8_lossy(options);
        assert_eq!(
            build(&mut c, options),
            cl::CL_INVALID_BUILD_OPTIONS,
            "{shown}"
        );
        assert_eq!(
            compile(&mut c, options),
            cl::CL_INVALID_COMPILER_OPTIONS,
            "{shown}"
        );
    }
    assert_eq!(compile(&mut c, b"-DX=1 -D Y"), cl::CL_SUCCESS);
    let link = Request::LinkProgram {
        id: 6,
        context: 1,
        devices: vec![],
        options: b"-I",
        inputs: vec![4],
    };
    assert_eq!(c.call(&link).0, cl::CL_INVALID_LINKER_OPTIONS);
    assert_eq!(build(&mut c, b"-D Y"), cl::CL_SUCCESS);
    assert!(Client::connect(svc.local_addr()).is_ok());
}

/// A program source with nothing before its first NUL (an empty one included: OpenCL
/// reads a length of 0 as "up to the first NUL", past the message) aborted the node:
/// PoCL 3.1 asserts `source_len > 0` in `build_program_compute_hash` when a build's
/// options fail clang (`-cl-std=`). Found by the `session` fuzz target. The node
/// refuses such a source with `CL_INVALID_VALUE`, and serves on; a real source with
/// the same options fails its build and nothing more.
#[test]
fn a_program_source_without_text_is_refused() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut c = Client::connect(svc.local_addr()).unwrap();
    c.setup_context();
    let create = |c: &mut Client, id, source| {
        c.call(&Request::CreateProgramWithSource {
            id,
            context: 1,
            source,
        })
        .0
    };
    let build = |c: &mut Client, program, options| {
        c.call(&Request::BuildProgram {
            program,
            devices: vec![],
            options,
        })
        .0
    };
    for (id, source) in (4..).zip([&b""[..], b"\0", b"\0__kernel void k() {}"]) {
        assert_eq!(
            create(&mut c, id, source),
            cl::CL_INVALID_VALUE,
            "{source:?}"
        );
        // Had it been made, this build is what aborted the node.
        assert_ne!(build(&mut c, id, b"-cl-std="), cl::CL_SUCCESS);
    }
    // The session and the service go on.
    let source = long_kernel_source("k");
    assert_eq!(create(&mut c, 10, &source), cl::CL_SUCCESS);
    assert_ne!(build(&mut c, 10, b"-cl-std="), cl::CL_SUCCESS);
    assert_eq!(build(&mut c, 10, b""), cl::CL_SUCCESS);
    // Text before a NUL is the source, as the runtime reads it.
    let mut with_nul = source.clone();
    with_nul.extend_from_slice(b"\0 not C");
    assert_eq!(create(&mut c, 11, &with_nul), cl::CL_SUCCESS);
    assert_eq!(build(&mut c, 11, b""), cl::CL_SUCCESS);
    assert!(Client::connect(svc.local_addr()).is_ok());
}
