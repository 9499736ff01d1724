//! The isolated runtime process: `<program> __netaccel-ocl-runtime session|shared`,
//! started by the node's [`super::Supervisor`] with its control socket as fd 3, the
//! busy page as fd 4 and the metrics page as fd 5.
//!
//! It opens OpenCL, says ready, then serves the client connections the node hands it
//! exactly as the in-process service does (same sessions, same device FIFOs). A
//! `session` process exits once its one client has gone and its tasks are done; a
//! `shared` one serves until the node closes the control socket. Either drains then.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::wire;
use crate::service::busy::BusyPage;
use crate::service::metrics::MetricsPage;
use crate::service::{session, start_shared, Shared};

/// The fds the node hands a runtime process.
pub(crate) const CONTROL_FD: i32 = 3;
pub(crate) const BUSY_FD: i32 = 4;
pub(crate) const METRICS_FD: i32 = 5;

/// Runs the runtime process; `args` are the arguments after the subcommand.
pub fn main(args: &[String]) -> ExitCode {
    let one_session = match args.first().map(String::as_str) {
        Some("session") => true,
        Some("shared") => false,
        _ => {
            eprintln!(
                "{}: started by the node only (session|shared)",
                super::SUBCOMMAND
            );
            return ExitCode::from(2);
        }
    };
    // SAFETY: the node started this process with these three fds open for it (see
    // `Supervisor::start_process`); nothing else in this process owns them.
    let (control, busy, metrics) = unsafe {
        (
            UnixStream::from_raw_fd(CONTROL_FD),
            OwnedFd::from_raw_fd(BUSY_FD),
            OwnedFd::from_raw_fd(METRICS_FD),
        )
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        eprintln!("ocl-remote runtime process: {what}: {e}");
        ExitCode::FAILURE
    };
    let busy = match BusyPage::from_fd(busy) {
        Ok(b) => b,
        Err(e) => return fail("busy page", &e),
    };
    let metrics = match MetricsPage::from_fd(metrics) {
        Ok(m) => std::sync::Arc::new(m),
        Err(e) => return fail("metrics page", &e),
    };
    let (config, local_socket) = match wire::read_frame(&control)
        .map_err(|e| e.to_string())
        .and_then(|b| wire::decode_config(&b))
    {
        Ok(c) => c,
        Err(e) => return fail("configuration", &e),
    };
    // The node renders the metrics this process keeps in its page.
    let shared = match start_shared(config, metrics, local_socket, Some(busy)) {
        Ok(s) => s,
        Err(e) => return fail("OpenCL", &e),
    };
    warm_up(&shared);
    if let Err(e) = wire::write_frame(&control, ready_message(&shared).as_bytes()) {
        return fail("ready", &e);
    }
    serve_clients(&control, &shared, one_session)
}

/// What a ready process tells the node: its platforms' devices, then one line per
/// device with its name.
fn ready_message(shared: &Shared) -> String {
    let platforms: Vec<Vec<u32>> = shared
        .runtime
        .platforms
        .iter()
        .map(|p| p.devices.clone())
        .collect();
    std::iter::once(super::greet::encode_platforms(&platforms))
        .chain(
            shared
                .runtime
                .devices
                .iter()
                .map(|d| d.name.replace('\n', " ")),
        )
        .collect::<Vec<_>>()
        .join("\n")
}

/// Serves each client the node hands over on `control` on a thread of its own
/// (`one_session`: exits when that client's session is drained) until the node closes
/// it; returns only when a client thread cannot be started.
fn serve_clients(control: &UnixStream, shared: &Arc<Shared>, one_session: bool) -> ExitCode {
    loop {
        match wire::recv_client(control) {
            Ok(Some((stream, record))) => {
                let shared = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("ocl-client".to_string())
                    .spawn(move || {
                        let served = Arc::clone(&shared);
                        session::serve_greeted(
                            served,
                            stream,
                            record.refuse,
                            record.greeted,
                            session::Entry::Admitted(record.admission),
                        );
                        if one_session {
                            exit_when_drained(&shared);
                        }
                    });
                if let Err(e) = spawned {
                    eprintln!("ocl-remote runtime process: client thread: {e}");
                    return ExitCode::FAILURE;
                }
            }
            // The node closed the control socket (it drains, or it died): end the
            // sessions, let the queued tasks answer, leave.
            Ok(None) | Err(_) => {
                shared.end_sessions();
                exit_when_drained(shared);
            }
        }
    }
}

/// Waits until no session and no task is left, then ends the process without running
/// the runtime's exit handlers: the vendor runtime's teardown has nothing left to
/// release that the kernel does not, and some runtimes hang or abort in it. Sessions
/// unlinked their shared-memory regions when they ended.
fn exit_when_drained(shared: &Shared) -> ! {
    while !shared.drained() {
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: _exit ends the process at once; nothing of ours needs to run first.
    unsafe { libc::_exit(0) }
}

/// Builds a one-line program on each device before saying ready. A runtime's first
/// build in a process is slow whatever the program (PoCL loads and initialises its
/// compiler: 100–250 ms on the machine of docs/benchmarks.md, natively too), and a
/// spare process pays it here, before a client waits for it.
fn warm_up(shared: &Shared) {
    const SOURCE: &std::ffi::CStr =
        c"__kernel void netaccel_warm_up(__global int *v) { v[0] = 1; }";
    let api = &shared.runtime.api;
    for device in &shared.runtime.devices {
        let mut rc = 0;
        let raw = device.raw.0;
        // SAFETY: a valid device handle; every object made here is released here.
        unsafe {
            let context = (api.clCreateContext)(
                std::ptr::null(),
                1,
                &raw,
                std::ptr::null(),
                std::ptr::null_mut(),
                &mut rc,
            );
            if context.is_null() {
                continue;
            }
            let source = SOURCE.as_ptr();
            let program =
                (api.clCreateProgramWithSource)(context, 1, &source, std::ptr::null(), &mut rc);
            if !program.is_null() {
                if (api.clBuildProgram)(
                    program,
                    1,
                    &raw,
                    std::ptr::null(),
                    std::ptr::null(),
                    std::ptr::null_mut(),
                ) == crate::cl::CL_SUCCESS
                {
                    let kernel =
                        (api.clCreateKernel)(program, c"netaccel_warm_up".as_ptr(), &mut rc);
                    if !kernel.is_null() {
                        (api.clReleaseKernel)(kernel);
                    }
                }
                (api.clReleaseProgram)(program);
            }
            (api.clReleaseContext)(context);
        }
    }
}
