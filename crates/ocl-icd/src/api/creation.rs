//! Initial data of buffers and images that does not fit their create request.
//!
//! Initial data (`CL_MEM_COPY_HOST_PTR`, `CL_MEM_USE_HOST_PTR`) of up to
//! [`CREATE_DATA_INLINE_MAX`] bytes travels in the `CreateBuffer`/`CreateImage` request.
//! Larger data would make one frame as large as the object, and the node closes a
//! connection whose frames pass its `frame_body_max` (64 MiB): such an object is created
//! empty and its data follows (a buffer in shared memory is simply copied into). It
//! travels as write commands of at most `WRITE_CHUNK_MAX` bytes on the context's
//! creation queue (see [`Context::creation_queue`]), flushed at once, so they run before
//! anything the application enqueues later, and the create call waits for them.
//!
//! An object the host may not write (`CL_MEM_HOST_READ_ONLY`, `CL_MEM_HOST_NO_ACCESS`)
//! refuses write commands, at the node and in the runtime: its data goes through a
//! scratch buffer of one piece's size, each piece written there and copied on (a copy
//! is no host access).

use std::sync::Arc;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{Command, ImageCmd, ImageOp, Request};

use crate::node::{Node, WRITE_CHUNK_MAX};
use crate::object::*;

use super::context::creation_queue;
use super::image::{image_cmd, wide};
use super::reply;

/// Initial data up to this size travels in the create request itself.
pub(super) const CREATE_DATA_INLINE_MAX: usize = 1 << 20;

/// The initial data of an object just created empty, on its way as commands on the
/// context's creation queue.
pub(super) struct CreationData<'a> {
    node: &'a Arc<Node>,
    queue: u64,
    /// The scratch buffer pieces go through, for an object the host may not write.
    scratch: Option<u64>,
    events: Vec<EventRef>,
}

impl<'a> CreationData<'a> {
    /// For an object of context `c` created with `flags`, whose data is `size` bytes.
    pub fn new(c: &'a Obj<Context>, flags: u64, size: usize) -> Result<CreationData<'a>, ClInt> {
        let node = &c.v.node;
        let queue = creation_queue(c)?;
        let scratch = if cl::host_may_write(flags) {
            None
        } else {
            let id = node.next_id();
            reply(node.call(&Request::CreateBuffer {
                id,
                context: c.v.id,
                flags: cl::CL_MEM_READ_WRITE,
                size: size.min(WRITE_CHUNK_MAX) as u64,
                data: &[],
            }))?;
            Some(id)
        };
        Ok(CreationData {
            node,
            queue,
            scratch,
            events: Vec::new(),
        })
    }

    /// `data` (at most `WRITE_CHUNK_MAX` bytes) into buffer `buffer` at `offset`.
    pub fn write_buffer(&mut self, buffer: u64, offset: usize, data: &[u8]) {
        let queue = self.queue;
        let Some(scratch) = self.scratch else {
            return self.send(|event| Command::Write {
                queue,
                event,
                buffer,
                offset: offset as u64,
                data,
            });
        };
        self.write_scratch(scratch, data);
        self.send(|event| Command::Copy {
            queue,
            event,
            src: scratch,
            dst: buffer,
            src_offset: 0,
            dst_offset: offset as u64,
            size: data.len() as u64,
        });
    }

    /// `data` (tightly packed, at most `WRITE_CHUNK_MAX` bytes) into `region` of image
    /// `image` at `origin`.
    pub fn write_image(&mut self, image: u64, origin: [usize; 3], region: [usize; 3], data: &[u8]) {
        let queue = self.queue;
        let Some(scratch) = self.scratch else {
            return self.send(|event| {
                Command::Image(ImageCmd {
                    dst: image,
                    dst_origin: wide(origin),
                    region: wide(region),
                    data,
                    ..image_cmd(queue, event, ImageOp::Write)
                })
            });
        };
        self.write_scratch(scratch, data);
        self.send(|event| {
            Command::Image(ImageCmd {
                src: scratch,
                dst: image,
                dst_origin: wide(origin),
                region: wide(region),
                ..image_cmd(queue, event, ImageOp::FromBuffer)
            })
        });
    }

    fn write_scratch(&mut self, scratch: u64, data: &[u8]) {
        let queue = self.queue;
        self.send(|event| Command::Write {
            queue,
            event,
            buffer: scratch,
            offset: 0,
            data,
        });
    }

    /// Enqueues the command `make(event)` makes; its event is internal (the application
    /// never sees it) and tells [`CreationData::finish`] how it went.
    fn send<'c>(&mut self, make: impl FnOnce(u64) -> Command<'c>) {
        let h = new_handle(Event::new(
            Arc::clone(self.node),
            0,
            0,
            cl::CL_COMMAND_WRITE_BUFFER,
        ));
        let (ours, task) = (EventRef::new(h), EventRef::new(h));
        release::<Event>(h);
        // The creation queue is in order: the commands need no wait list.
        self.node.enqueue(&make(ours.id()), &[], Some(task), None);
        self.events.push(ours);
    }

    /// Sends the commands and waits until they have run, as a native runtime copies the
    /// data before it returns, so that a failure is the creation's error. They wait for
    /// nothing the application enqueued, so user events never hold them back.
    pub fn finish(self) -> Result<(), ClInt> {
        if let Some(scratch) = self.scratch {
            // Behind the commands, which hold the buffer until they have run.
            self.node.release(scratch);
        }
        self.node.flush();
        for e in &self.events {
            self.node.wait_event(e);
            if e.status() < cl::CL_COMPLETE {
                return Err(cl::CL_MEM_OBJECT_ALLOCATION_FAILURE);
            }
        }
        Ok(())
    }
}
