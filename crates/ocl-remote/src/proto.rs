//! The remote OpenCL wire format: frames, requests, replies and enqueued commands.
//!
//! Pure functions over byte slices, no I/O. Decoders borrow from the input (data of
//! writes, sources, binaries are slices of the frame body), check every length against
//! the bytes that remain before allocating, and reject missing or trailing bytes.
//! `docs/opencl.md` describes the format table by table.

use std::fmt;

/// Bytes of the fixed frame header.
pub const HEADER_LEN: usize = 16;
/// Protocol version sent in `Hello`; the node refuses other versions.
pub const PROTOCOL_VERSION: u32 = 1;
/// Maximum work dimensions of an NDRange (OpenCL 1.2 devices have 3).
pub const WORK_DIM_MAX: usize = 3;

/// The fixed 16-byte header in front of every frame body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub body_len: u32,
    pub kind: u16,
    pub flags: u16,
    pub id: u64,
}

/// Result of a decoder that may need more bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// The input ends before the item does; read more and call again.
    Partial,
    /// The item and the number of input bytes it used.
    Complete(T, usize),
}

/// Why bytes are not a valid message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    BodyTooLong { len: u32, max: u32 },
    UnknownKind(u16),
    Truncated,
    TrailingBytes(usize),
    BadTag(u8),
    BadWorkDim(u8),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::BodyTooLong { len, max } => {
                write!(f, "frame body of {len} bytes exceeds the limit of {max}")
            }
            ProtoError::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            ProtoError::Truncated => write!(f, "message body ends early"),
            ProtoError::TrailingBytes(n) => write!(f, "{n} unexpected bytes after message"),
            ProtoError::BadTag(t) => write!(f, "unknown tag {t}"),
            ProtoError::BadWorkDim(d) => write!(f, "work_dim {d} out of range 1..=3"),
        }
    }
}

impl std::error::Error for ProtoError {}

/// Message kinds (the `kind` header field).
pub mod kind {
    pub const HELLO: u16 = 1;
    pub const GET_PLATFORM_INFO: u16 = 2;
    pub const GET_DEVICE_INFO: u16 = 3;
    pub const CREATE_CONTEXT: u16 = 4;
    pub const CREATE_QUEUE: u16 = 5;
    pub const CREATE_BUFFER: u16 = 6;
    pub const CREATE_PROGRAM_WITH_SOURCE: u16 = 7;
    pub const CREATE_PROGRAM_WITH_BINARY: u16 = 8;
    pub const BUILD_PROGRAM: u16 = 9;
    pub const GET_PROGRAM_INFO: u16 = 10;
    pub const GET_PROGRAM_BUILD_INFO: u16 = 11;
    pub const CREATE_KERNEL: u16 = 12;
    pub const GET_KERNEL_WORK_GROUP_INFO: u16 = 13;
    pub const GET_KERNEL_ARG_INFO: u16 = 14;
    pub const GET_KERNEL_INFO: u16 = 15;
    pub const RELEASE: u16 = 16;
    pub const ENQUEUE: u16 = 17;
    pub const FLUSH: u16 = 18;
    pub const CREATE_SUB_BUFFER: u16 = 19;
    pub const COMPILE_PROGRAM: u16 = 20;
    pub const LINK_PROGRAM: u16 = 21;
    pub const CREATE_IMAGE: u16 = 22;
    pub const GET_IMAGE_INFO: u16 = 23;
    pub const GET_SUPPORTED_IMAGE_FORMATS: u16 = 24;
    pub const CREATE_SAMPLER: u16 = 25;

    pub const REPLY: u16 = 100;
    pub const TASK_DONE: u16 = 101;
    pub const READ_DATA: u16 = 102;
}

/// Decodes a frame header. `body_max` bounds the body length a peer may announce.
pub fn decode_header(buf: &[u8], body_max: u32) -> Result<Decoded<Header>, ProtoError> {
    if buf.len() < HEADER_LEN {
        return Ok(Decoded::Partial);
    }
    let header = Header {
        body_len: u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")),
        kind: u16::from_le_bytes(buf[4..6].try_into().expect("2 bytes")),
        flags: u16::from_le_bytes(buf[6..8].try_into().expect("2 bytes")),
        id: u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
    };
    if header.body_len > body_max {
        return Err(ProtoError::BodyTooLong {
            len: header.body_len,
            max: body_max,
        });
    }
    Ok(Decoded::Complete(header, HEADER_LEN))
}

/// Decodes a whole frame: header and a borrowed body.
pub fn decode_frame(buf: &[u8], body_max: u32) -> Result<Decoded<(Header, &[u8])>, ProtoError> {
    let header = match decode_header(buf, body_max)? {
        Decoded::Partial => return Ok(Decoded::Partial),
        Decoded::Complete(h, _) => h,
    };
    let end = HEADER_LEN + header.body_len as usize;
    if buf.len() < end {
        return Ok(Decoded::Partial);
    }
    Ok(Decoded::Complete((header, &buf[HEADER_LEN..end]), end))
}

/// Appends a frame header; `body_len` must be the exact number of body bytes that follow.
pub fn encode_header(out: &mut Vec<u8>, kind: u16, id: u64, body_len: usize) {
    let body_len = u32::try_from(body_len).expect("frame body fits u32");
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
}

/// Appends a whole frame whose body is built by `body`.
pub fn encode_frame(out: &mut Vec<u8>, kind: u16, id: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    encode_header(out, kind, id, 0);
    body(out);
    let body_len = u32::try_from(out.len() - start - HEADER_LEN).expect("frame body fits u32");
    out[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
}

/// Little-endian reader over a body slice; every read checks the remaining length.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn i32(&mut self) -> Result<i32, ProtoError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A `u32` length followed by that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A `u32` item count, checked against the bytes left given each item's minimum size,
    /// so that a hostile count cannot make the caller allocate.
    pub fn count(&mut self, item_len_min: usize) -> Result<usize, ProtoError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_len_min.max(1)) > self.buf.len() {
            return Err(ProtoError::Truncated);
        }
        Ok(n)
    }
    /// A counted list ([`Reader::count`] with each item's minimum size), each item read
    /// by `item`.
    pub fn list<T>(
        &mut self,
        item_len_min: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let n = self.count(item_len_min)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(item(self)?);
        }
        Ok(items)
    }
    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes(self.buf.len()))
        }
    }
}

pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    put_u32(out, u32::try_from(v.len()).expect("byte string fits u32"));
    out.extend_from_slice(v);
}

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

/// What an [`ImageCmd`] does with its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ImageOp {
    /// Image `src` to the client (token); data tightly packed.
    Read = 0,
    /// `data` (tightly packed) to image `dst`.
    Write = 1,
    /// Image `src` to image `dst`.
    Copy = 2,
    /// Image `src` to buffer `dst` at `offset`.
    ToBuffer = 3,
    /// Buffer `src` at `offset` to image `dst`.
    FromBuffer = 4,
    /// Image `dst` filled with the colour `data` (16 bytes).
    Fill = 5,
}

/// A command on images (`clEnqueueReadImage`, `…WriteImage`, `…CopyImage`,
/// `…CopyImageToBuffer`, `…CopyBufferToImage`, `…FillImage`). Origins and region are in
/// pixels (rows, slices); the fields an operation does not use are 0 or empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageCmd<'a> {
    pub queue: u64,
    pub event: u64,
    pub op: ImageOp,
    pub src: u64,
    pub dst: u64,
    pub src_origin: [u64; 3],
    pub dst_origin: [u64; 3],
    pub region: [u64; 3],
    pub offset: u64,
    pub token: u64,
    pub data: &'a [u8],
}

/// One enqueued command inside an `Enqueue` frame. `queue` and `event` are client ids;
/// `event` is 0 when the program asked for no event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    Write {
        queue: u64,
        event: u64,
        buffer: u64,
        offset: u64,
        data: &'a [u8],
    },
    Read {
        queue: u64,
        event: u64,
        buffer: u64,
        offset: u64,
        size: u64,
        token: u64,
    },
    Copy {
        queue: u64,
        event: u64,
        src: u64,
        dst: u64,
        src_offset: u64,
        dst_offset: u64,
        size: u64,
    },
    Fill {
        queue: u64,
        event: u64,
        buffer: u64,
        pattern: &'a [u8],
        offset: u64,
        size: u64,
    },
    NdRange(NdRange<'a>),
    Marker {
        queue: u64,
        event: u64,
    },
    Barrier {
        queue: u64,
        event: u64,
    },
    Image(ImageCmd<'a>),
}

/// A kernel launch with the snapshot of all its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NdRange<'a> {
    pub queue: u64,
    pub event: u64,
    pub kernel: u64,
    pub work_dim: u8,
    pub offset: [u64; WORK_DIM_MAX],
    pub global: [u64; WORK_DIM_MAX],
    pub local: Option<[u64; WORK_DIM_MAX]>,
    pub args: Vec<KernelArg<'a>>,
}

/// The value of one kernel argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelArg<'a> {
    /// Never set by the program; the device reports `CL_INVALID_KERNEL_ARGS`.
    Unset,
    Mem(u64),
    NullMem,
    Local(u64),
    Bytes(&'a [u8]),
    /// A sampler object (client id).
    Sampler(u64),
}

mod tag {
    pub const WRITE: u8 = 1;
    pub const READ: u8 = 2;
    pub const COPY: u8 = 3;
    pub const FILL: u8 = 4;
    pub const ND_RANGE: u8 = 5;
    pub const MARKER: u8 = 6;
    pub const BARRIER: u8 = 7;
    pub const IMAGE: u8 = 8;

    pub const ARG_UNSET: u8 = 0;
    pub const ARG_MEM: u8 = 1;
    pub const ARG_NULL_MEM: u8 = 2;
    pub const ARG_LOCAL: u8 = 3;
    pub const ARG_BYTES: u8 = 4;
    pub const ARG_SAMPLER: u8 = 5;
}

/// A write command up to its data: tag, queue, event, buffer, offset, data length.
fn put_write_head(out: &mut Vec<u8>, ids: [u64; 4], len: usize) {
    put_u8(out, tag::WRITE);
    for v in ids {
        put_u64(out, v);
    }
    put_u32(out, u32::try_from(len).expect("byte string fits u32"));
}

impl Command<'_> {
    /// Appends the command's encoding except the bytes of a write's data, which it
    /// returns: they belong right after what was appended (empty for other commands).
    /// For senders that write the data from where it is instead of copying it.
    pub fn encode_split(&self, out: &mut Vec<u8>) -> &[u8] {
        match self {
            Command::Write {
                queue,
                event,
                buffer,
                offset,
                data,
            } => {
                put_write_head(out, [*queue, *event, *buffer, *offset], data.len());
                data
            }
            other => {
                other.encode(out);
                &[]
            }
        }
    }

    /// Appends the command's encoding (as one item of an `Enqueue` body).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Command::Write { .. } => {
                let data = self.encode_split(out);
                out.extend_from_slice(data);
            }
            Command::Read {
                queue,
                event,
                buffer,
                offset,
                size,
                token,
            } => {
                put_u8(out, tag::READ);
                for v in [*queue, *event, *buffer, *offset, *size, *token] {
                    put_u64(out, v);
                }
            }
            Command::Copy {
                queue,
                event,
                src,
                dst,
                src_offset,
                dst_offset,
                size,
            } => {
                put_u8(out, tag::COPY);
                for v in [*queue, *event, *src, *dst, *src_offset, *dst_offset, *size] {
                    put_u64(out, v);
                }
            }
            Command::Fill {
                queue,
                event,
                buffer,
                pattern,
                offset,
                size,
            } => {
                put_u8(out, tag::FILL);
                put_u64(out, *queue);
                put_u64(out, *event);
                put_u64(out, *buffer);
                put_bytes(out, pattern);
                put_u64(out, *offset);
                put_u64(out, *size);
            }
            Command::NdRange(nd) => {
                put_u8(out, tag::ND_RANGE);
                put_u64(out, nd.queue);
                put_u64(out, nd.event);
                put_u64(out, nd.kernel);
                put_u8(out, nd.work_dim);
                let dims = usize::from(nd.work_dim);
                for v in &nd.offset[..dims] {
                    put_u64(out, *v);
                }
                for v in &nd.global[..dims] {
                    put_u64(out, *v);
                }
                match &nd.local {
                    None => put_u8(out, 0),
                    Some(local) => {
                        put_u8(out, 1);
                        for v in &local[..dims] {
                            put_u64(out, *v);
                        }
                    }
                }
                put_u32(
                    out,
                    u32::try_from(nd.args.len()).expect("arg count fits u32"),
                );
                for arg in &nd.args {
                    match arg {
                        KernelArg::Unset => put_u8(out, tag::ARG_UNSET),
                        KernelArg::Mem(id) => {
                            put_u8(out, tag::ARG_MEM);
                            put_u64(out, *id);
                        }
                        KernelArg::NullMem => put_u8(out, tag::ARG_NULL_MEM),
                        KernelArg::Local(size) => {
                            put_u8(out, tag::ARG_LOCAL);
                            put_u64(out, *size);
                        }
                        KernelArg::Bytes(b) => {
                            put_u8(out, tag::ARG_BYTES);
                            put_bytes(out, b);
                        }
                        KernelArg::Sampler(id) => {
                            put_u8(out, tag::ARG_SAMPLER);
                            put_u64(out, *id);
                        }
                    }
                }
            }
            Command::Marker { queue, event } => {
                put_u8(out, tag::MARKER);
                put_u64(out, *queue);
                put_u64(out, *event);
            }
            Command::Barrier { queue, event } => {
                put_u8(out, tag::BARRIER);
                put_u64(out, *queue);
                put_u64(out, *event);
            }
            Command::Image(c) => {
                put_u8(out, tag::IMAGE);
                put_u64(out, c.queue);
                put_u64(out, c.event);
                put_u8(out, c.op as u8);
                put_u64(out, c.src);
                put_u64(out, c.dst);
                for v in c.src_origin.iter().chain(&c.dst_origin).chain(&c.region) {
                    put_u64(out, *v);
                }
                put_u64(out, c.offset);
                put_u64(out, c.token);
                put_bytes(out, c.data);
            }
        }
    }

    /// The client queue id the command was enqueued on.
    pub fn queue(&self) -> u64 {
        match self {
            Command::Write { queue, .. }
            | Command::Read { queue, .. }
            | Command::Copy { queue, .. }
            | Command::Fill { queue, .. }
            | Command::Marker { queue, .. }
            | Command::Barrier { queue, .. } => *queue,
            Command::NdRange(nd) => nd.queue,
            Command::Image(c) => c.queue,
        }
    }

    /// The client event id of the command, 0 for none.
    pub fn event(&self) -> u64 {
        match self {
            Command::Write { event, .. }
            | Command::Read { event, .. }
            | Command::Copy { event, .. }
            | Command::Fill { event, .. }
            | Command::Marker { event, .. }
            | Command::Barrier { event, .. } => *event,
            Command::NdRange(nd) => nd.event,
            Command::Image(c) => c.event,
        }
    }
}

fn decode_dims(r: &mut Reader<'_>, dims: usize) -> Result<[u64; WORK_DIM_MAX], ProtoError> {
    let mut v = [0u64; WORK_DIM_MAX];
    for slot in v.iter_mut().take(dims) {
        *slot = r.u64()?;
    }
    Ok(v)
}

fn decode_command<'a>(r: &mut Reader<'a>) -> Result<Command<'a>, ProtoError> {
    let t = r.u8()?;
    Ok(match t {
        tag::WRITE => Command::Write {
            queue: r.u64()?,
            event: r.u64()?,
            buffer: r.u64()?,
            offset: r.u64()?,
            data: r.bytes()?,
        },
        tag::READ => Command::Read {
            queue: r.u64()?,
            event: r.u64()?,
            buffer: r.u64()?,
            offset: r.u64()?,
            size: r.u64()?,
            token: r.u64()?,
        },
        tag::COPY => Command::Copy {
            queue: r.u64()?,
            event: r.u64()?,
            src: r.u64()?,
            dst: r.u64()?,
            src_offset: r.u64()?,
            dst_offset: r.u64()?,
            size: r.u64()?,
        },
        tag::FILL => Command::Fill {
            queue: r.u64()?,
            event: r.u64()?,
            buffer: r.u64()?,
            pattern: r.bytes()?,
            offset: r.u64()?,
            size: r.u64()?,
        },
        tag::ND_RANGE => {
            let queue = r.u64()?;
            let event = r.u64()?;
            let kernel = r.u64()?;
            let work_dim = r.u8()?;
            if work_dim == 0 || usize::from(work_dim) > WORK_DIM_MAX {
                return Err(ProtoError::BadWorkDim(work_dim));
            }
            let dims = usize::from(work_dim);
            let offset = decode_dims(r, dims)?;
            let global = decode_dims(r, dims)?;
            let local = match r.u8()? {
                0 => None,
                1 => Some(decode_dims(r, dims)?),
                other => return Err(ProtoError::BadTag(other)),
            };
            let args = r.list(1, |r| {
                Ok(match r.u8()? {
                    tag::ARG_UNSET => KernelArg::Unset,
                    tag::ARG_MEM => KernelArg::Mem(r.u64()?),
                    tag::ARG_NULL_MEM => KernelArg::NullMem,
                    tag::ARG_LOCAL => KernelArg::Local(r.u64()?),
                    tag::ARG_BYTES => KernelArg::Bytes(r.bytes()?),
                    tag::ARG_SAMPLER => KernelArg::Sampler(r.u64()?),
                    other => return Err(ProtoError::BadTag(other)),
                })
            })?;
            Command::NdRange(NdRange {
                queue,
                event,
                kernel,
                work_dim,
                offset,
                global,
                local,
                args,
            })
        }
        tag::MARKER => Command::Marker {
            queue: r.u64()?,
            event: r.u64()?,
        },
        tag::BARRIER => Command::Barrier {
            queue: r.u64()?,
            event: r.u64()?,
        },
        tag::IMAGE => {
            let queue = r.u64()?;
            let event = r.u64()?;
            let op = match r.u8()? {
                0 => ImageOp::Read,
                1 => ImageOp::Write,
                2 => ImageOp::Copy,
                3 => ImageOp::ToBuffer,
                4 => ImageOp::FromBuffer,
                5 => ImageOp::Fill,
                other => return Err(ProtoError::BadTag(other)),
            };
            let src = r.u64()?;
            let dst = r.u64()?;
            let src_origin = decode_dims(r, 3)?;
            let dst_origin = decode_dims(r, 3)?;
            let region = decode_dims(r, 3)?;
            Command::Image(ImageCmd {
                queue,
                event,
                op,
                src,
                dst,
                src_origin,
                dst_origin,
                region,
                offset: r.u64()?,
                token: r.u64()?,
                data: r.bytes()?,
            })
        }
        other => return Err(ProtoError::BadTag(other)),
    })
}

/// The item count of a list, written before its items.
fn put_count(out: &mut Vec<u8>, n: usize) {
    put_u32(out, u32::try_from(n).expect("list fits u32"));
}

fn put_u32_list(out: &mut Vec<u8>, v: &[u32]) {
    put_count(out, v.len());
    for x in v {
        put_u32(out, *x);
    }
}

fn u32_list(r: &mut Reader<'_>) -> Result<Vec<u32>, ProtoError> {
    r.list(4, Reader::u32)
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

/// Completion of one event of a task: status (`CL_COMPLETE` or a negative error) and
/// the profiling counters queued, submit, start, end in device nanoseconds (0 when the
/// queue has no profiling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventDone {
    pub event: u64,
    pub status: i32,
    pub profile: [u64; 4],
}

/// A message from the node to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response<'a> {
    Reply {
        status: i32,
        payload: &'a [u8],
    },
    TaskDone {
        status: i32,
        events: Vec<EventDone>,
    },
    ReadData {
        token: u64,
        offset: u64,
        data: &'a [u8],
    },
}

impl<'a> Response<'a> {
    /// Appends the response as one frame with id `id`.
    pub fn encode(&self, id: u64, out: &mut Vec<u8>) {
        match self {
            Response::Reply { status, payload } => encode_frame(out, kind::REPLY, id, |out| {
                put_i32(out, *status);
                out.extend_from_slice(payload);
            }),
            Response::TaskDone { status, events } => {
                encode_frame(out, kind::TASK_DONE, id, |out| {
                    put_i32(out, *status);
                    put_count(out, events.len());
                    for e in events {
                        put_u64(out, e.event);
                        put_i32(out, e.status);
                        for p in e.profile {
                            put_u64(out, p);
                        }
                    }
                })
            }
            Response::ReadData {
                token,
                offset,
                data,
            } => {
                encode_read_data_header(out, id, *token, *offset, data.len());
                out.extend_from_slice(data);
            }
        }
    }

    /// Decodes the body of a response frame of kind `kind`.
    pub fn decode(kind: u16, body: &'a [u8]) -> Result<Response<'a>, ProtoError> {
        let mut r = Reader::new(body);
        let resp = match kind {
            kind::REPLY => {
                let status = r.i32()?;
                return Ok(Response::Reply {
                    status,
                    payload: &body[4..],
                });
            }
            kind::TASK_DONE => {
                let status = r.i32()?;
                let events = r.list(44, |r| {
                    let event = r.u64()?;
                    let status = r.i32()?;
                    let mut profile = [0u64; 4];
                    for p in profile.iter_mut() {
                        *p = r.u64()?;
                    }
                    Ok(EventDone {
                        event,
                        status,
                        profile,
                    })
                })?;
                Response::TaskDone { status, events }
            }
            kind::READ_DATA => Response::ReadData {
                token: r.u64()?,
                offset: r.u64()?,
                data: r.bytes()?,
            },
            other => return Err(ProtoError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(resp)
    }
}

/// Appends the header part of a `ReadData` frame carrying `len` data bytes, so that a
/// sender can write the data itself straight from device memory without a copy.
pub fn encode_read_data_header(out: &mut Vec<u8>, id: u64, token: u64, offset: u64, len: usize) {
    encode_header(out, kind::READ_DATA, id, 8 + 8 + 4 + len);
    put_u64(out, token);
    put_u64(out, offset);
    put_u32(out, u32::try_from(len).expect("read chunk fits u32"));
}

/// The payload of the `Hello` reply: the node's host id (for the shared-memory path),
/// its platforms, each with the node-wide indices of its devices, and, for a client on
/// the node's host, the abstract Unix socket it may reconnect to (empty otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloInfo<'a> {
    pub host_id: &'a [u8],
    pub platforms: Vec<Vec<u32>>,
    pub local_socket: &'a [u8],
}

impl<'a> HelloInfo<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_bytes(out, self.host_id);
        put_count(out, self.platforms.len());
        for devices in &self.platforms {
            put_u32_list(out, devices);
        }
        put_bytes(out, self.local_socket);
    }

    pub fn decode(payload: &'a [u8]) -> Result<HelloInfo<'a>, ProtoError> {
        let mut r = Reader::new(payload);
        let host_id = r.bytes()?;
        let platforms = r.list(4, u32_list)?;
        let local_socket = r.bytes()?;
        r.finish()?;
        Ok(HelloInfo {
            host_id,
            platforms,
            local_socket,
        })
    }
}

/// Fuzz entry point (see `fuzz/`): the first two bytes pick a message kind, the rest is
/// a body. Every decoder must return without panicking, and whatever decodes must encode
/// back to the same message.
pub fn fuzz_one(data: &[u8]) {
    let _ = decode_frame(data, 1 << 20);
    let _ = HelloInfo::decode(data);
    if data.len() < 2 {
        return;
    }
    let kind = u16::from_le_bytes([data[0], data[1]]) % 128;
    let body = &data[2..];
    if let Ok(req) = Request::decode(kind, body) {
        let mut out = Vec::new();
        req.encode(1, &mut out);
        let Ok(Decoded::Complete((h, again), _)) = decode_frame(&out, u32::MAX) else {
            panic!("re-encoded request does not frame")
        };
        assert_eq!(Request::decode(h.kind, again).as_ref(), Ok(&req));
    }
    if let Ok(resp) = Response::decode(kind, body) {
        let mut out = Vec::new();
        resp.encode(1, &mut out);
        let Ok(Decoded::Complete((h, again), _)) = decode_frame(&out, u32::MAX) else {
            panic!("re-encoded response does not frame")
        };
        assert_eq!(Response::decode(h.kind, again).as_ref(), Ok(&resp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_write_encodes_as_the_whole_one() {
        let data: Vec<u8> = (0..=255).collect();
        let write = Command::Write {
            queue: 1,
            event: 2,
            buffer: 3,
            offset: 4,
            data: &data,
        };
        let (mut whole, mut split) = (Vec::new(), Vec::new());
        write.encode(&mut whole);
        let tail = write.encode_split(&mut split);
        split.extend_from_slice(tail);
        assert_eq!(split, whole);
        let marker = Command::Marker { queue: 1, event: 2 };
        let (mut whole, mut split) = (Vec::new(), Vec::new());
        marker.encode(&mut whole);
        assert!(marker.encode_split(&mut split).is_empty());
        assert_eq!(split, whole);
    }

    /// A cheap stand-in for the fuzzer in every test run: random and mutated messages.
    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut valid = Vec::new();
        Request::Enqueue {
            commands: vec![
                Command::Write {
                    queue: 1,
                    event: 2,
                    buffer: 3,
                    offset: 0,
                    data: b"abc",
                },
                Command::NdRange(NdRange {
                    queue: 1,
                    event: 0,
                    kernel: 5,
                    work_dim: 1,
                    offset: [0; 3],
                    global: [8, 0, 0],
                    local: Some([4, 0, 0]),
                    args: vec![KernelArg::Bytes(b"xy"), KernelArg::Local(16)],
                }),
            ],
        }
        .encode(0, &mut valid);
        let body = valid[HEADER_LEN..].to_vec();
        for i in 0..20_000 {
            let mut data = vec![(kind::ENQUEUE & 0xff) as u8, 0];
            data.extend_from_slice(&body);
            // Flip, truncate or replace a few bytes of a valid message.
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % data.len();
                data[at] = next() as u8;
            }
            if i % 3 == 0 {
                data.truncate((next() as usize) % (data.len() + 1));
            }
            fuzz_one(&data);
            let random: Vec<u8> = (0..(next() % 64)).map(|_| next() as u8).collect();
            fuzz_one(&random);
        }
    }

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

    #[test]
    fn an_unknown_image_operation_is_an_error() {
        let mut out = Vec::new();
        Request::Enqueue {
            commands: vec![Command::Image(ImageCmd {
                queue: 1,
                event: 0,
                op: ImageOp::Fill,
                src: 0,
                dst: 1,
                src_origin: [0; 3],
                dst_origin: [0; 3],
                region: [1; 3],
                offset: 0,
                token: 0,
                data: &[0; 16],
            })],
        }
        .encode(1, &mut out);
        // The operation byte follows the 4-byte count, tag, queue and event.
        let at = HEADER_LEN + 4 + 1 + 16;
        assert_eq!(out[at], ImageOp::Fill as u8);
        out[at] = 6;
        let Decoded::Complete((h, body), _) = decode_frame(&out, u32::MAX).unwrap() else {
            panic!("partial")
        };
        assert_eq!(Request::decode(h.kind, body), Err(ProtoError::BadTag(6)));
    }

    #[test]
    fn responses_roundtrip() {
        let cases = [
            Response::Reply {
                status: -5,
                payload: b"xyz",
            },
            Response::TaskDone {
                status: 0,
                events: vec![EventDone {
                    event: 3,
                    status: 0,
                    profile: [1, 2, 3, 4],
                }],
            },
            Response::ReadData {
                token: 5,
                offset: 1 << 20,
                data: b"data",
            },
        ];
        for resp in cases {
            let mut out = Vec::new();
            resp.encode(8, &mut out);
            let Decoded::Complete((h, body), _) = decode_frame(&out, u32::MAX).unwrap() else {
                panic!("partial")
            };
            assert_eq!(Response::decode(h.kind, body).unwrap(), resp);
        }
    }

    #[test]
    fn hostile_input_is_rejected() {
        let mut out = Vec::new();
        encode_header(&mut out, kind::FLUSH, 1, 1000);
        assert_eq!(
            decode_frame(&out, 100),
            Err(ProtoError::BodyTooLong {
                len: 1000,
                max: 100
            })
        );
        // A count of 2^32-1 commands in a tiny body fails before allocating.
        let body = u32::MAX.to_le_bytes();
        assert_eq!(
            Request::decode(kind::ENQUEUE, &body),
            Err(ProtoError::Truncated)
        );
        assert_eq!(Request::decode(999, &[]), Err(ProtoError::UnknownKind(999)));
        assert_eq!(
            Request::decode(kind::RELEASE, &[0; 9]),
            Err(ProtoError::TrailingBytes(1))
        );
        let mut nd = vec![];
        put_u32(&mut nd, 1);
        put_u8(&mut nd, tag::ND_RANGE);
        nd.extend_from_slice(&[0; 24]);
        put_u8(&mut nd, 4);
        assert_eq!(
            Request::decode(kind::ENQUEUE, &nd),
            Err(ProtoError::BadWorkDim(4))
        );
    }

    #[test]
    fn hello_info_roundtrip() {
        let info = HelloInfo {
            host_id: b"host",
            platforms: vec![vec![0, 1], vec![2]],
            local_socket: b"netaccel-ocl-1-9500",
        };
        let mut out = Vec::new();
        info.encode(&mut out);
        assert_eq!(HelloInfo::decode(&out).unwrap(), info);
    }
}
