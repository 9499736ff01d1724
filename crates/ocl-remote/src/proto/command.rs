//! The commands an `Enqueue` request carries: buffer and image transfers, kernel
//! launches, markers and barriers, each with its queue and event, declared once each
//! (a tag byte, then the fields in order), and each behind the list of client events it
//! waits for ([`Queued`]).

use super::wire::{messages, put_u32, put_u64, put_u8, wire_struct, Reader, Wire};
use super::ProtoError;

/// Maximum work dimensions of an NDRange (OpenCL 1.2 devices have 3).
pub const WORK_DIM_MAX: usize = 3;

wire_struct! {
    /// One item of an `Enqueue`: the client events the command waits for (its
    /// `event_wait_list`, by event id), then the command. The node makes the runtime
    /// wait for the commands of the same task that produce those events, on any of the
    /// client's queues; events of earlier tasks have completed before a task runs, and
    /// user events are the ICD's (it holds a task back until they are set, and names one
    /// set to an error in a [`Command::UserEvent`]).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Queued<'a> {
        pub wait: Vec<u64>,
        pub command: Command<'a>,
    }
}

/// A command that waits for nothing.
impl<'a> From<Command<'a>> for Queued<'a> {
    fn from(command: Command<'a>) -> Self {
        Queued {
            wait: Vec::new(),
            command,
        }
    }
}

messages! {
    /// One enqueued command inside an `Enqueue` frame. `queue` and `event` are client
    /// ids; `event` is 0 when the program asked for no event.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Command<'a>: u8, numbers in tag {
        Write = WRITE(1) { queue: u64, event: u64, buffer: u64, offset: u64, data: &'a [u8] },
        Read = READ(2) {
            queue: u64,
            event: u64,
            buffer: u64,
            offset: u64,
            size: u64,
            token: u64,
        },
        Copy = COPY(3) {
            queue: u64,
            event: u64,
            src: u64,
            dst: u64,
            src_offset: u64,
            dst_offset: u64,
            size: u64,
        },
        Fill = FILL(4) {
            queue: u64,
            event: u64,
            buffer: u64,
            pattern: &'a [u8],
            offset: u64,
            size: u64,
        },
        Marker = MARKER(6) { queue: u64, event: u64 },
        Barrier = BARRIER(7) { queue: u64, event: u64 },
        /// No command: the client's user event `event` was set to the error `status`
        /// while commands of the open task waited for it. Those commands, and what waits
        /// for them, fail unrun (wherever in the task this stands: the ICD learns of the
        /// error after it enqueued them). `queue` is one of theirs.
        UserEvent = USER_EVENT(9) { queue: u64, event: u64, status: i32 },
    }
    wrapping {
        NdRange = ND_RANGE(5) (NdRange<'a>),
        Image = IMAGE(8) (ImageCmd<'a>),
    }
}

messages! {
    /// The value of one kernel argument.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum KernelArg<'a>: u8, numbers in arg_tag {
        /// Never set by the program; the device reports `CL_INVALID_KERNEL_ARGS`.
        Unset = UNSET(0),
        NullMem = NULL_MEM(2),
    }
    wrapping {
        Mem = MEM(1) (u64),
        Local = LOCAL(3) (u64),
        Bytes = BYTES(4) (&'a [u8]),
        /// A sampler object (client id).
        Sampler = SAMPLER(5) (u64),
    }
}

/// An enqueued command: its tag, then its fields.
impl<'a> Wire<'a> for Command<'a> {
    /// The smallest command, a marker: tag, queue, event.
    const LEN_MIN: usize = 1 + 8 + 8;
    fn put(&self, out: &mut Vec<u8>) {
        put_u8(out, self.kind());
        self.put_fields(out);
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        let tag = r.u8()?;
        Self::read_fields(tag, r)?.ok_or(ProtoError::BadTag(tag))
    }
}

/// A kernel argument: its tag, then its value.
impl<'a> Wire<'a> for KernelArg<'a> {
    const LEN_MIN: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        put_u8(out, self.kind());
        self.put_fields(out);
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        let tag = r.u8()?;
        Self::read_fields(tag, r)?.ok_or(ProtoError::BadTag(tag))
    }
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

impl Wire<'_> for ImageOp {
    const LEN_MIN: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        put_u8(out, *self as u8);
    }
    fn read(r: &mut Reader<'_>) -> Result<Self, ProtoError> {
        Ok(match r.u8()? {
            0 => ImageOp::Read,
            1 => ImageOp::Write,
            2 => ImageOp::Copy,
            3 => ImageOp::ToBuffer,
            4 => ImageOp::FromBuffer,
            5 => ImageOp::Fill,
            other => return Err(ProtoError::BadTag(other)),
        })
    }
}

wire_struct! {
    /// A command on images (`clEnqueueReadImage`, `…WriteImage`, `…CopyImage`,
    /// `…CopyImageToBuffer`, `…CopyBufferToImage`, `…FillImage`). Origins and region are
    /// in pixels (rows, slices); the fields an operation does not use are 0 or empty.
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

/// Only the first `work_dim` values of offset, global and local sizes travel, and the
/// local size only if there is one (a flag byte says).
impl<'a> Wire<'a> for NdRange<'a> {
    const LEN_MIN: usize = 8 + 8 + 8 + 1;
    fn put(&self, out: &mut Vec<u8>) {
        for v in [self.queue, self.event, self.kernel] {
            put_u64(out, v);
        }
        put_u8(out, self.work_dim);
        let dims = usize::from(self.work_dim);
        for v in self.offset[..dims].iter().chain(&self.global[..dims]) {
            put_u64(out, *v);
        }
        match &self.local {
            None => put_u8(out, 0),
            Some(local) => {
                put_u8(out, 1);
                for v in &local[..dims] {
                    put_u64(out, *v);
                }
            }
        }
        self.args.put(out);
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        let queue = r.u64()?;
        let event = r.u64()?;
        let kernel = r.u64()?;
        let work_dim = r.u8()?;
        if work_dim == 0 || usize::from(work_dim) > WORK_DIM_MAX {
            return Err(ProtoError::BadWorkDim(work_dim));
        }
        let dims = usize::from(work_dim);
        let offset = read_dims(r, dims)?;
        let global = read_dims(r, dims)?;
        let local = match r.u8()? {
            0 => None,
            1 => Some(read_dims(r, dims)?),
            other => return Err(ProtoError::BadTag(other)),
        };
        Ok(NdRange {
            queue,
            event,
            kernel,
            work_dim,
            offset,
            global,
            local,
            args: Vec::read(r)?,
        })
    }
}

/// The first `dims` values of a size, the others 0.
fn read_dims(r: &mut Reader<'_>, dims: usize) -> Result<[u64; WORK_DIM_MAX], ProtoError> {
    let mut v = [0u64; WORK_DIM_MAX];
    for slot in v.iter_mut().take(dims) {
        *slot = r.u64()?;
    }
    Ok(v)
}

impl Command<'_> {
    /// Appends the command as one item of an `Enqueue` ([`Queued`]) that waits for the
    /// events `wait`, except the bytes of a write's data, which it returns: they belong
    /// right after what was appended (empty for other commands). For senders that write
    /// the data from where it is instead of copying it.
    pub fn encode_split(&self, wait: &[u64], out: &mut Vec<u8>) -> &[u8] {
        put_u32(out, u32::try_from(wait.len()).expect("wait list fits u32"));
        for event in wait {
            put_u64(out, *event);
        }
        match self {
            Command::Write {
                queue,
                event,
                buffer,
                offset,
                data,
            } => {
                // The same write without data, then the real length: the data's length
                // prefix ends the encoding, as the data is the last field.
                Command::Write {
                    queue: *queue,
                    event: *event,
                    buffer: *buffer,
                    offset: *offset,
                    data: &[],
                }
                .put(out);
                let len = u32::try_from(data.len()).expect("byte string fits u32");
                let at = out.len() - 4;
                out[at..].copy_from_slice(&len.to_le_bytes());
                data
            }
            other => {
                other.put(out);
                &[]
            }
        }
    }

    /// The client queue id the command was enqueued on.
    pub fn queue(&self) -> u64 {
        self.queue_and_event().0
    }

    /// The client event id of the command, 0 for none.
    pub fn event(&self) -> u64 {
        self.queue_and_event().1
    }

    fn queue_and_event(&self) -> (u64, u64) {
        match self {
            Command::Write { queue, event, .. }
            | Command::Read { queue, event, .. }
            | Command::Copy { queue, event, .. }
            | Command::Fill { queue, event, .. }
            | Command::Marker { queue, event }
            | Command::Barrier { queue, event }
            | Command::UserEvent { queue, event, .. } => (*queue, *event),
            Command::NdRange(nd) => (nd.queue, nd.event),
            Command::Image(c) => (c.queue, c.event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{decode_frame, Decoded, Request, HEADER_LEN};

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
        Queued {
            wait: vec![5, 6],
            command: write.clone(),
        }
        .put(&mut whole);
        let tail = write.encode_split(&[5, 6], &mut split);
        split.extend_from_slice(tail);
        assert_eq!(split, whole);
        let marker = Command::Marker { queue: 1, event: 2 };
        let (mut whole, mut split) = (Vec::new(), Vec::new());
        Queued::from(marker.clone()).put(&mut whole);
        assert!(marker.encode_split(&[], &mut split).is_empty());
        assert_eq!(split, whole);
    }

    #[test]
    fn an_unknown_image_operation_is_an_error() {
        let mut out = Vec::new();
        Request::Enqueue {
            commands: vec![Queued::from(Command::Image(ImageCmd {
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
            }))],
        }
        .encode(1, &mut out);
        // The operation byte follows the 4-byte count, the empty wait list, tag, queue
        // and event.
        let at = HEADER_LEN + 4 + 4 + 1 + 16;
        assert_eq!(out[at], ImageOp::Fill as u8);
        out[at] = 6;
        let Decoded::Complete((h, body), _) = decode_frame(&out, u32::MAX).unwrap() else {
            panic!("partial")
        };
        assert_eq!(Request::decode(h.kind, body), Err(ProtoError::BadTag(6)));
    }
}
