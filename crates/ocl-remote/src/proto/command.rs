//! The commands an `Enqueue` request carries: buffer and image transfers, kernel
//! launches, markers and barriers, each with its queue and event.

use super::wire::{put_bytes, put_u32, put_u64, put_u8, Reader};
use super::ProtoError;

/// Maximum work dimensions of an NDRange (OpenCL 1.2 devices have 3).
pub const WORK_DIM_MAX: usize = 3;

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

pub(super) mod tag {
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

pub(super) fn decode_command<'a>(r: &mut Reader<'a>) -> Result<Command<'a>, ProtoError> {
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
}
