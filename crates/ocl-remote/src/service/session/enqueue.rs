//! The enqueue side of a session: each command's ids resolved against the client's
//! table into a task command, the open task, and its flush into a device's FIFO.

use std::sync::Arc;
use std::time::Instant;

use super::objects::{Image, Kernel, Mem, Queue, Sampler};
use super::Session;
use crate::cl::{self, ClInt};
use crate::proto::{self, Command, ImageCmd, KernelArg, Queued};
use crate::service::bodies::Body;
use crate::service::task::{
    Arg, Cmd, Finished, FrameBytes, ImageWork, Op, SetOnDrop, Task, TaskQueue,
};
use crate::service::turns::Flow;
use crate::service::Real;

impl Session<'_> {
    /// A buffer and its size.
    fn mem(&self, id: u64) -> Result<(Arc<Real>, u64), ClInt> {
        let mem = self.objects.get::<Mem>(id)?;
        Ok((Arc::clone(&mem.real), mem.size))
    }

    /// An image, and the bytes of the tightly packed `region` at `origin` in it (which
    /// must lie inside the image).
    fn image_region(
        &self,
        id: u64,
        origin: &[u64; 3],
        region: &[u64; 3],
    ) -> Result<(Arc<Real>, usize), ClInt> {
        let image = self.objects.get::<Image>(id)?;
        let bytes = cl::image_region_bytes(image.elem, image.dims, *origin, *region)
            .ok_or(cl::CL_INVALID_VALUE)?;
        Ok((Arc::clone(&image.real), bytes as usize))
    }

    /// `CL_INVALID_OPERATION` for a host read (or write) of buffer or image `id` that
    /// its `CL_MEM_HOST_*` flag forbids: the ICD checks too, but a client need not be
    /// the ICD, nor a runtime check.
    fn host_access(&self, id: u64, write: bool) -> Result<(), ClInt> {
        let host = match self.objects.get::<Mem>(id) {
            Ok(mem) => mem.host,
            Err(_) => self.objects.get::<Image>(id)?.host,
        };
        let allowed = if write {
            cl::host_may_write(host)
        } else {
            cl::host_may_read(host)
        };
        allowed.then_some(()).ok_or(cl::CL_INVALID_OPERATION)
    }

    pub(super) fn in_bounds(offset: u64, size: u64, mem_size: u64) -> Result<(), ClInt> {
        match offset.checked_add(size) {
            Some(end) if end <= mem_size => Ok(()),
            _ => Err(cl::CL_INVALID_VALUE),
        }
    }

    /// Resolves one command's ids against this client's table. Failures become the
    /// command's status instead of failing the connection.
    fn resolve(&self, command: &Command<'_>, frame: &Arc<Body>) -> Result<Op, ClInt> {
        Ok(match command {
            Command::Write {
                buffer,
                offset,
                data,
                ..
            } => {
                let (mem, size) = self.mem(*buffer)?;
                Self::in_bounds(*offset, data.len() as u64, size)?;
                self.host_access(*buffer, true)?;
                Op::Write {
                    mem,
                    offset: *offset as usize,
                    data: FrameBytes::new(frame, data),
                }
            }
            Command::Read {
                buffer,
                offset,
                size,
                token,
                ..
            } => {
                let (mem, mem_size) = self.mem(*buffer)?;
                Self::in_bounds(*offset, *size, mem_size)?;
                self.host_access(*buffer, false)?;
                Op::Read {
                    mem,
                    offset: *offset as usize,
                    size: *size as usize,
                    token: *token,
                }
            }
            Command::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                size,
                ..
            } => self.resolve_copy([*src, *dst], [*src_offset, *dst_offset], *size)?,
            Command::Fill {
                buffer,
                pattern,
                offset,
                size,
                ..
            } => {
                let (mem, mem_size) = self.mem(*buffer)?;
                Self::in_bounds(*offset, *size, mem_size)?;
                Op::Fill {
                    mem,
                    pattern: pattern.to_vec(),
                    offset: *offset as usize,
                    size: *size as usize,
                }
            }
            Command::NdRange(nd) => self.resolve_nd_range(nd)?,
            Command::Image(c) => self.resolve_image(c, frame)?,
            Command::Marker { .. } => Op::Marker,
            Command::UserEvent { status, .. } if *status < 0 => Op::UserEvent(*status),
            Command::UserEvent { .. } => return Err(cl::CL_INVALID_VALUE),
            Command::Barrier { .. } => Op::Barrier,
        })
    }

    /// Resolves a copy of `size` bytes between buffers `[src, dst]`, at `[src_offset,
    /// dst_offset]` in each.
    fn resolve_copy(&self, ids: [u64; 2], offsets: [u64; 2], size: u64) -> Result<Op, ClInt> {
        let (src, src_size) = self.mem(ids[0])?;
        let (dst, dst_size) = self.mem(ids[1])?;
        Self::in_bounds(offsets[0], size, src_size)?;
        Self::in_bounds(offsets[1], size, dst_size)?;
        Ok(Op::Copy {
            src,
            dst,
            src_offset: offsets[0] as usize,
            dst_offset: offsets[1] as usize,
            size: size as usize,
        })
    }

    /// Resolves a kernel launch: the kernel, and each argument's object.
    fn resolve_nd_range(&self, nd: &proto::NdRange<'_>) -> Result<Op, ClInt> {
        let kernel = self.objects.get::<Kernel>(nd.kernel)?;
        if !kernel.launchable {
            return Err(cl::CL_OUT_OF_RESOURCES);
        }
        let mut args = Vec::with_capacity(nd.args.len());
        for a in &nd.args {
            args.push(match a {
                KernelArg::Unset => Arg::Unset,
                KernelArg::Mem(id) => Arg::Mem(Arc::clone(
                    self.objects
                        .mem_object(*id)
                        .map_err(|_| cl::CL_INVALID_ARG_VALUE)?,
                )),
                KernelArg::Sampler(id) => {
                    Arg::Sampler(Arc::clone(&self.objects.get::<Sampler>(*id)?.real))
                }
                KernelArg::NullMem => Arg::NullMem,
                KernelArg::Local(size) => Arg::Local(*size as usize),
                KernelArg::Bytes(b) => Arg::Bytes(b.to_vec()),
            });
        }
        let dims = |v: &[u64; 3]| v.map(|x| x as usize);
        Ok(Op::NdRange {
            kernel: Arc::clone(&kernel.real),
            work_dim: u32::from(nd.work_dim),
            offset: dims(&nd.offset),
            global: dims(&nd.global),
            local: nd.local.as_ref().map(dims),
            args,
        })
    }

    fn resolve_image(&self, c: &ImageCmd<'_>, frame: &Arc<Body>) -> Result<Op, ClInt> {
        let dims = |v: &[u64; 3]| v.map(|x| x as usize);
        let mut op = ImageWork {
            op: c.op,
            src: None,
            dst: None,
            src_origin: dims(&c.src_origin),
            dst_origin: dims(&c.dst_origin),
            region: dims(&c.region),
            offset: c.offset as usize,
            token: c.token,
            size: 0,
            data: None,
        };
        match c.op {
            proto::ImageOp::Read => {
                let (image, size) = self.image_region(c.src, &c.src_origin, &c.region)?;
                self.host_access(c.src, false)?;
                op.src = Some(image);
                op.size = size;
            }
            proto::ImageOp::Write => {
                let (image, size) = self.image_region(c.dst, &c.dst_origin, &c.region)?;
                self.host_access(c.dst, true)?;
                if c.data.len() != size {
                    return Err(cl::CL_INVALID_VALUE);
                }
                op.dst = Some(image);
                op.data = Some(FrameBytes::new(frame, c.data));
            }
            proto::ImageOp::Fill => {
                let (image, _) = self.image_region(c.dst, &c.dst_origin, &c.region)?;
                // A fill colour is a float4, int4 or uint4.
                if c.data.len() != 16 {
                    return Err(cl::CL_INVALID_VALUE);
                }
                op.dst = Some(image);
                op.data = Some(FrameBytes::new(frame, c.data));
            }
            // The runtime checks copies (no host memory is involved).
            proto::ImageOp::Copy => {
                op.src = Some(self.image_region(c.src, &c.src_origin, &c.region)?.0);
                op.dst = Some(self.image_region(c.dst, &c.dst_origin, &c.region)?.0);
            }
            proto::ImageOp::ToBuffer => {
                op.src = Some(self.image_region(c.src, &c.src_origin, &c.region)?.0);
                op.dst = Some(self.mem(c.dst)?.0);
            }
            proto::ImageOp::FromBuffer => {
                op.src = Some(self.mem(c.src)?.0);
                op.dst = Some(self.image_region(c.dst, &c.dst_origin, &c.region)?.0);
            }
        }
        Ok(Op::Image(Box::new(op)))
    }

    /// Adds commands to the open task. The task's memory counts against
    /// `pending_bytes_max`: frames holding writes whole (the commands keep them), and
    /// every command's own state (its entry, wait list, fill pattern and kernel
    /// arguments). Past the bound the task's remaining commands fail with
    /// `CL_OUT_OF_RESOURCES` and keep nothing but their event id, and once those ids
    /// take the bound again not even that: their events then take the task's status.
    pub(super) fn enqueue(&mut self, commands: Vec<Queued<'_>>, frame: &Arc<Body>) {
        let bound = self.shared.config.pending_bytes_max;
        // Writes keep the whole frame alive, so the whole frame counts against the bound.
        if commands
            .iter()
            .any(|c| matches!(c.command, Command::Write { .. }))
        {
            self.open_bytes = self.open_bytes.saturating_add(frame.len() as u64);
        }
        for Queued { wait, command } in commands {
            if !self.open_overflow {
                self.open_bytes = self
                    .open_bytes
                    .saturating_add(command_bytes(&wait, &command));
                self.open_overflow = self.open_bytes > bound;
            }
            if self.open_overflow {
                let entry = std::mem::size_of::<Cmd>() as u64;
                if command.event() != 0 && self.open_failed_bytes + entry <= bound {
                    self.open_failed_bytes += entry;
                    self.open.push(Cmd {
                        queue: None,
                        event: command.event(),
                        wait: Vec::new(),
                        op: Op::Failed(cl::CL_OUT_OF_RESOURCES),
                    });
                }
                continue;
            }
            let queue = self
                .objects
                .get::<Queue>(command.queue())
                .ok()
                .map(|q| TaskQueue {
                    real: Arc::clone(&q.real),
                    device: q.device,
                    context: Arc::clone(&q.context),
                });
            let op = match &queue {
                None => Op::Failed(cl::CL_INVALID_COMMAND_QUEUE),
                Some(_) => self.resolve(&command, frame).unwrap_or_else(Op::Failed),
            };
            self.open.push(Cmd {
                queue,
                event: command.event(),
                wait,
                op,
            });
        }
    }

    /// Whose share of a device the session's tasks take: its tenant's (all the
    /// tenant's sessions together), or without a tenant its own.
    fn flow(&self) -> Flow {
        match &self.admission {
            Some(a) => Flow::Tenant(Arc::from(a.tenant.as_str())),
            None => Flow::Session(self.number),
        }
    }

    pub(super) fn flush(&mut self, id: u64) {
        let mut cmds = std::mem::take(&mut self.open);
        self.open_bytes = 0;
        self.open_failed_bytes = 0;
        if std::mem::take(&mut self.open_overflow) {
            // The task fails whole, also when its failed commands were not recorded.
            cmds.push(Cmd {
                queue: None,
                event: 0,
                wait: Vec::new(),
                op: Op::Failed(cl::CL_OUT_OF_RESOURCES),
            });
        }
        // The lowest device's FIFO runs the task; it holds the others while it runs.
        let mut devices: Vec<u32> = cmds
            .iter()
            .filter_map(|c| c.queue.as_ref().map(|q| q.device))
            .collect();
        devices.sort_unstable();
        devices.dedup();
        let device = devices.first().copied();
        // A client's tasks run in the order it flushed them (its later commands may use
        // what earlier ones computed, ordered by events that never reach the node). The
        // FIFO of a device keeps that order among the tasks on it; a task for another
        // device waits here until the previous task is over, holding this connection
        // back meanwhile, as a full FIFO does.
        if let Some((last_device, finished)) = &self.last_task {
            if *last_device != device || device.is_none() {
                finished.wait();
            }
        }
        let finished = Finished::default();
        self.last_task = Some((device, finished.clone()));
        let task = Task {
            id,
            cmds,
            writer: Arc::clone(&self.writer),
            flushed_at: Instant::now(),
            _finished: SetOnDrop(finished),
            other_devices: devices.get(1..).unwrap_or_default().to_vec(),
            flow: self.flow(),
        };
        match device {
            // A full FIFO blocks this client's connection only: back-pressure.
            Some(d) => self.shared.devices[d as usize].submit(
                self.shared,
                d as usize,
                crate::service::worker::Job::Task(task),
            ),
            // Nothing runnable (empty, every queue id invalid, or over the byte bound):
            // answer at once, with the first failure.
            None => {
                let code = task
                    .cmds
                    .iter()
                    .find_map(|c| match c.op {
                        Op::Failed(e) => Some(e),
                        _ => None,
                    })
                    .unwrap_or(cl::CL_INVALID_COMMAND_QUEUE);
                crate::service::worker::fail_task(task, code)
            }
        }
    }
}

/// The memory a command takes in the open task besides the frame it came in: its entry,
/// its wait list, and what it copies out of the frame (a fill's pattern, a kernel's
/// argument values).
fn command_bytes(wait: &[u64], command: &Command<'_>) -> u64 {
    let copied = match command {
        Command::Fill { pattern, .. } => pattern.len(),
        Command::NdRange(nd) => nd
            .args
            .iter()
            .map(|a| {
                std::mem::size_of::<Arg>()
                    + match a {
                        KernelArg::Bytes(b) => b.len(),
                        _ => 0,
                    }
            })
            .sum(),
        _ => 0,
    };
    (std::mem::size_of::<Cmd>() + std::mem::size_of_val(wait) + copied) as u64
}
