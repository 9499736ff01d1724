//! The dispatch core: what happens to a whole call between a front end and a device.
//! No sockets, no whole configuration and no clock of its own: each module takes the
//! bounds it needs as a section of its own and reads time from the [`clock::Clock`] it
//! is given, so the core can be driven without a network and under a virtual clock
//! (the slot tests do both).
//!
//! | module | what |
//! | --- | --- |
//! | [`batch`] | the batcher's decisions: which queued calls of a model join one run, and when |
//! | [`clock`] | the time the core reads and the simulated device sleeps on: the host's, or a virtual one |
//! | [`deadline`] | a call's deadline, from `X-Netaccel-Deadline-Us` / RAC `deadline_us` |
//! | [`tenant`] | identities (tokens, certificates, `anonymous`) and policies (`tenant::auth`), per-tenant bounds and gates |
//! | [`quota`] | per-tenant quotas: calls/s, bytes/s, concurrent calls, object bytes |
//! | `fair_queue` | a slot's tenant-fair queue |
//! | [`slot`] | a slot: its queue, inline runs, its worker thread, a call's execution |
//! | [`dispatch`] | picking a slot (round robin, join-shortest-queue), admission, refusals |
//! | [`ensemble`] | ensembles: a pipeline of models run step by step through the dispatcher |
//! | [`sequence`] | a stateful model's sequences: correlation id → slot, START/END, idle release |
//! | [`watchdog`] | the thread that looks for calls past `kernel_timeout_ms` |
//! | [`memory`] | the HTTP body budget, the RAC reassembly pool |
//! | [`objects`] | named objects served without a slot |
//! | [`shm`] | shared memory regions clients registered, read and written bounds-checked |
//!
//! The core may use the devices and telemetry; it never uses a front end or the
//! network layer.

pub mod batch;
pub mod clock;
pub mod deadline;
pub mod dispatch;
pub mod ensemble;
pub(crate) mod fair_queue;
pub mod memory;
pub mod objects;
pub mod quota;
pub mod sequence;
pub mod shm;
pub mod slot;
pub mod tenant;
pub mod watchdog;
