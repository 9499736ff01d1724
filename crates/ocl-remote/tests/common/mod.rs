//! The helpers the service tests share: a service on loopback, a minimal blocking
//! protocol client, and how a test reacts to a missing prerequisite.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ocl_remote::cl;
use ocl_remote::proto::{
    self, Command, Decoded, EventDone, HelloInfo, KernelArg, NdRange, Queued, Request, Response,
};
use ocl_remote::service::{spawn, ServiceConfig, ServiceHandle};
use prometheus_client::registry::Registry;

pub const SRC: &[u8] = b"__kernel void inc(__global int *v) { v[get_global_id(0)] += 1; }";

/// A prerequisite of the calling test is missing (`what` names it: an OpenCL runtime,
/// a device, a second device). In CI (`CI=true`), where every prerequisite is installed,
/// that is a failure; elsewhere the test is skipped, and says why on the terminal
/// (written past the test harness's capture of `eprintln!`, which would hide it for a
/// test that passes).
pub fn missing_prerequisite(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and a prerequisite of this test is missing: {what}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIP: {what} (with CI=true this is a failure)"
    );
}

/// A service on a free loopback port; `None` (see [`missing_prerequisite`]) without an
/// OpenCL runtime that has a device.
pub fn service(config: ServiceConfig) -> Option<(ServiceHandle, Registry)> {
    let mut registry = Registry::default();
    match spawn("127.0.0.1:0".parse().unwrap(), config, &mut registry) {
        Ok(s) if !s.device_names().is_empty() => Some((s, registry)),
        Ok(_) => {
            missing_prerequisite("the OpenCL runtime has no device");
            None
        }
        Err(e) => {
            missing_prerequisite(&format!("no OpenCL runtime: {e}"));
            None
        }
    }
}

/// A blocking protocol client: one request at a time.
pub struct Client {
    pub stream: TcpStream,
    next_id: u64,
    pub info: (Vec<u8>, Vec<Vec<u32>>),
}

/// Status, event results and `(token, data)` reads of one task.
pub type TaskResult = (i32, Vec<EventDone>, Vec<(u64, Vec<u8>)>);

pub enum Frame {
    Reply(i32, Vec<u8>),
    TaskDone(i32, Vec<EventDone>),
    ReadData(u64, Vec<u8>),
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Result<Client, i32> {
        Client::connect_with(addr, b"")
    }

    /// Connects and greets the service as a client on the host `host_id` names (the
    /// service's own host id makes it a same-host client with shared-memory buffers).
    pub fn connect_with(addr: SocketAddr, host_id: &[u8]) -> Result<Client, i32> {
        Client::connect_as(addr, host_id, "", "").map_err(|(status, _)| status)
    }

    /// [`Client::connect_with`] with a tenant's name and token in `Hello` (empty:
    /// none); a refusal is its status and the node's reason.
    pub fn connect_as(
        addr: SocketAddr,
        host_id: &[u8],
        tenant: &str,
        token: &str,
    ) -> Result<Client, (i32, String)> {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        // A task is several small frames: with Nagle on, each round would wait for
        // the service's delayed ACK (40 ms), as the ICD's own socket does not.
        stream.set_nodelay(true).unwrap();
        let mut c = Client {
            stream,
            next_id: 1,
            info: (Vec::new(), Vec::new()),
        };
        let (status, payload) = c.call(&Request::Hello {
            version: proto::PROTOCOL_VERSION,
            host_id,
            tenant: tenant.as_bytes(),
            token: token.as_bytes(),
        });
        if status != cl::CL_SUCCESS {
            return Err((status, String::from_utf8_lossy(&payload).into_owned()));
        }
        let info = HelloInfo::decode(&payload).unwrap();
        c.info = (info.host_id.to_vec(), info.platforms);
        Ok(c)
    }

    pub fn send(&mut self, request: &Request<'_>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        request.encode(id, &mut out);
        self.stream.write_all(&out).unwrap();
        id
    }

    pub fn read_frame(&mut self) -> (u64, Frame) {
        let mut head = [0u8; proto::HEADER_LEN];
        self.stream.read_exact(&mut head).unwrap();
        let Decoded::Complete(h, _) = proto::decode_header(&head, u32::MAX).unwrap() else {
            unreachable!()
        };
        let mut body = vec![0u8; h.body_len as usize];
        self.stream.read_exact(&mut body).unwrap();
        let frame = match Response::decode(h.kind, &body).unwrap() {
            Response::Reply { status, payload } => Frame::Reply(status, payload.to_vec()),
            Response::TaskDone { status, events } => Frame::TaskDone(status, events),
            Response::ReadData { token, data, .. } => Frame::ReadData(token, data.to_vec()),
        };
        (h.id, frame)
    }

    pub fn call(&mut self, request: &Request<'_>) -> (i32, Vec<u8>) {
        let id = self.send(request);
        match self.read_frame() {
            (got, Frame::Reply(status, payload)) if got == id => (status, payload),
            _ => panic!("expected the reply to {id}"),
        }
    }

    /// Sends commands as one task and returns its status, event results and read data.
    pub fn task(&mut self, commands: Vec<Command<'_>>) -> TaskResult {
        self.task_waiting(commands.into_iter().map(Queued::from).collect())
    }

    /// [`Client::task`] for commands with wait lists.
    pub fn task_waiting(&mut self, commands: Vec<Queued<'_>>) -> TaskResult {
        self.send(&Request::Enqueue { commands });
        let id = self.send(&Request::Flush);
        let mut reads = Vec::new();
        loop {
            match self.read_frame() {
                (got, Frame::ReadData(token, data)) if got == id => reads.push((token, data)),
                (got, Frame::TaskDone(status, events)) if got == id => {
                    return (status, events, reads)
                }
                _ => panic!("unexpected frame"),
            }
        }
    }

    /// Context 1 on the first device.
    pub fn setup_context(&mut self) {
        let device = self.info.1[0][0];
        assert_eq!(
            self.call(&Request::CreateContext {
                id: 1,
                devices: vec![device]
            })
            .0,
            0
        );
    }

    /// An uninitialised read-write buffer `id` of `size` bytes in context 1: the
    /// status.
    pub fn create_buffer(&mut self, id: u64, size: u64) -> i32 {
        self.call(&Request::CreateBuffer {
            id,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size,
            data: &[],
        })
        .0
    }

    /// Context 1, queue 2, a 64-byte buffer 3 holding `fill`, program 4, kernel 5.
    pub fn setup(&mut self, fill: u8) {
        let device = self.info.1[0][0];
        self.setup_context();
        assert_eq!(
            self.call(&Request::CreateQueue {
                id: 2,
                context: 1,
                device,
                properties: 0
            })
            .0,
            0
        );
        let data = [fill; 64];
        assert_eq!(
            self.call(&Request::CreateBuffer {
                id: 3,
                context: 1,
                flags: 1,
                size: 64,
                data: &data
            })
            .0,
            0
        );
        assert_eq!(
            self.call(&Request::CreateProgramWithSource {
                id: 4,
                context: 1,
                source: SRC
            })
            .0,
            0
        );
        assert_eq!(
            self.call(&Request::BuildProgram {
                program: 4,
                devices: vec![],
                options: b""
            })
            .0,
            0
        );
        let (status, num_args) = self.call(&Request::CreateKernel {
            id: 5,
            program: 4,
            name: b"inc",
        });
        assert_eq!((status, num_args), (0, 1u32.to_le_bytes().to_vec()));
    }
}

pub fn read_cmd(queue: u64, buffer: u64, event: u64) -> Command<'static> {
    Command::Read {
        queue,
        event,
        buffer,
        offset: 0,
        size: 64,
        token: 7,
    }
}

pub fn inc(queue: u64, kernel: u64, buffer: u64, event: u64) -> Command<'static> {
    Command::NdRange(NdRange {
        queue,
        event,
        kernel,
        work_dim: 1,
        offset: [0; 3],
        global: [16, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(buffer)],
    })
}
