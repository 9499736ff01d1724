//! The dispatch core: what happens to a whole call between a front end and a device.
//! No sockets and no whole configuration: each module takes the bounds it needs as a
//! section of its own, so the core can be driven without a network (the slot tests do).
//!
//! | module | what |
//! | --- | --- |
//! | [`deadline`] | a call's deadline, from `X-Netaccel-Deadline-Us` / RAC `deadline_us` |
//! | [`tenant`] | identities, per-tenant bounds and gates, constant-time token comparison |
//! | [`fair_queue`] | a slot's tenant-fair queue |
//! | [`slot`] | a slot: its queue, inline runs, its worker thread, a call's execution |
//! | [`dispatch`] | picking a slot (round robin, join-shortest-queue), admission, refusals |
//! | [`watchdog`] | the thread that looks for calls past `kernel_timeout_ms` |
//! | [`memory`] | the HTTP body budget, the RAC reassembly pool |
//! | [`objects`] | named objects served without a slot |
//!
//! The core may use the devices and telemetry; it never uses a front end or the
//! network layer.

pub mod deadline;
pub mod dispatch;
pub(crate) mod fair_queue;
pub mod memory;
pub mod objects;
pub mod slot;
pub mod tenant;
pub mod watchdog;
