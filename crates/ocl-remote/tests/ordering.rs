//! What orders the commands of one task: their wait lists, markers and barriers, on
//! in-order and out-of-order queues and across queues. The node enqueues a task's
//! commands on the client's real queues (created with the client's properties, so an
//! out-of-order queue is out of order in the runtime too); only the wait lists it
//! passes to the runtime keep a command behind the one whose result it uses.
//!
//! Each check makes the command that must come first slow (a kernel looping on one
//! work item) and the one that depends on it fast, so a dependency the runtime does not
//! see shows as a wrong value, not as a rare race.

mod common;

use common::{service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, EventDone, KernelArg, NdRange, Queued, Request};
use ocl_remote::service::ServiceConfig;

const SRC: &[u8] = b"
__kernel void slow_set(__global int *v, int n, int value) {
    float a = 0.0f;
    for (int i = 0; i < n; i++) a = a * 0.999f + 1.0f;
    v[0] = value + (a < 0.0f);
}
__kernel void twice_plus_one(__global int *v) { v[0] = v[0] * 2 + 1; }";

/// Rounds of the slow kernel: some milliseconds on a CPU device.
const SLOW_ROUNDS: i32 = 4_000_000;

const CONTEXT: u64 = 1;
const IN_ORDER: u64 = 2;
const OUT_OF_ORDER: u64 = 3;
const OTHER_QUEUE: u64 = 4;
/// Out of order, with profiling.
const PROFILED: u64 = 9;
const BUFFER: u64 = 5;
const SLOW_SET: u64 = 7;
const TWICE_PLUS_ONE: u64 = 8;

fn ok(c: &mut Client, request: Request<'_>) {
    assert_eq!(c.call(&request).0, cl::CL_SUCCESS, "{request:?}");
}

/// A service and a client with an in-order queue, an out-of-order queue, a second
/// in-order queue, an int buffer and the two kernels; `None` without OpenCL.
fn client() -> Option<(ocl_remote::service::ServiceHandle, Client)> {
    let (svc, _registry) = service(ServiceConfig::default())?;
    let mut c = Client::connect(svc.local_addr()).unwrap();
    let device = c.info.1[0][0];
    ok(
        &mut c,
        Request::CreateContext {
            id: CONTEXT,
            devices: vec![device],
        },
    );
    for (id, properties) in [
        (IN_ORDER, 0),
        (OUT_OF_ORDER, cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE),
        (OTHER_QUEUE, 0),
        (
            PROFILED,
            cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | cl::CL_QUEUE_PROFILING_ENABLE,
        ),
    ] {
        ok(
            &mut c,
            Request::CreateQueue {
                id,
                context: CONTEXT,
                device,
                properties,
            },
        );
    }
    ok(
        &mut c,
        Request::CreateBuffer {
            id: BUFFER,
            context: CONTEXT,
            flags: cl::CL_MEM_READ_WRITE,
            size: 4,
            data: &[0; 4],
        },
    );
    ok(
        &mut c,
        Request::CreateProgramWithSource {
            id: 6,
            context: CONTEXT,
            source: SRC,
        },
    );
    ok(
        &mut c,
        Request::BuildProgram {
            program: 6,
            devices: vec![],
            options: b"",
        },
    );
    for (id, name) in [
        (SLOW_SET, &b"slow_set"[..]),
        (TWICE_PLUS_ONE, b"twice_plus_one"),
    ] {
        ok(
            &mut c,
            Request::CreateKernel {
                id,
                program: 6,
                name,
            },
        );
    }
    Some((svc, c))
}

fn slow_set(queue: u64, event: u64, value: i32) -> Command<'static> {
    let rounds: &'static [u8] = Box::leak(Box::new(SLOW_ROUNDS.to_le_bytes()));
    let value: &'static [u8] = Box::leak(Box::new(value.to_le_bytes()));
    Command::NdRange(NdRange {
        queue,
        event,
        kernel: SLOW_SET,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![
            KernelArg::Mem(BUFFER),
            KernelArg::Bytes(rounds),
            KernelArg::Bytes(value),
        ],
    })
}

fn twice_plus_one(queue: u64, event: u64) -> Command<'static> {
    Command::NdRange(NdRange {
        queue,
        event,
        kernel: TWICE_PLUS_ONE,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(BUFFER)],
    })
}

fn read(queue: u64, event: u64) -> Command<'static> {
    Command::Read {
        queue,
        event,
        buffer: BUFFER,
        offset: 0,
        size: 4,
        token: 1,
    }
}

fn after<'a>(wait: &[u64], command: Command<'a>) -> Queued<'a> {
    Queued {
        wait: wait.to_vec(),
        command,
    }
}

/// Runs the task and returns the value its read found; every command must succeed.
fn value_of(c: &mut Client, commands: Vec<Queued<'_>>) -> i32 {
    let (status, events, reads) = c.task_waiting(commands);
    assert_eq!(status, cl::CL_SUCCESS, "{events:?}");
    assert!(
        events.iter().all(|e| e.status == cl::CL_COMPLETE),
        "{events:?}"
    );
    let (_, data) = reads.last().expect("the task reads");
    i32::from_le_bytes(data[..4].try_into().unwrap())
}

#[test]
fn wait_lists_order_commands_on_an_out_of_order_queue() {
    let Some((_svc, mut c)) = client() else {
        return;
    };
    for round in 0..3 {
        let value = value_of(
            &mut c,
            vec![
                after(&[], slow_set(OUT_OF_ORDER, 10, round)),
                after(&[10], twice_plus_one(OUT_OF_ORDER, 11)),
                after(&[11], read(OUT_OF_ORDER, 0)),
            ],
        );
        assert_eq!(value, round * 2 + 1, "round {round}");
    }
}

#[test]
fn wait_lists_order_commands_across_queues_in_one_task() {
    let Some((_svc, mut c)) = client() else {
        return;
    };
    // Two in-order queues: nothing but the wait list keeps the second queue's kernel
    // behind the first queue's.
    for round in 0..3 {
        let value = value_of(
            &mut c,
            vec![
                after(&[], slow_set(IN_ORDER, 10, round)),
                after(&[10], twice_plus_one(OTHER_QUEUE, 0)),
                after(&[], read(OTHER_QUEUE, 0)),
            ],
        );
        assert_eq!(value, round * 2 + 1, "round {round}");
    }
}

#[test]
fn markers_and_barriers_follow_the_specification_on_an_out_of_order_queue() {
    let Some((_svc, mut c)) = client() else {
        return;
    };
    // A marker without a wait list completes after every command enqueued before it.
    let value = value_of(
        &mut c,
        vec![
            after(&[], slow_set(OUT_OF_ORDER, 0, 3)),
            after(
                &[],
                Command::Marker {
                    queue: OUT_OF_ORDER,
                    event: 10,
                },
            ),
            after(&[10], twice_plus_one(OUT_OF_ORDER, 11)),
            after(&[11], read(OUT_OF_ORDER, 0)),
        ],
    );
    assert_eq!(value, 7);
    // A barrier without a wait list keeps every later command of its queue behind
    // every earlier one.
    let value = value_of(
        &mut c,
        vec![
            after(&[], slow_set(OUT_OF_ORDER, 0, 4)),
            after(
                &[],
                Command::Barrier {
                    queue: OUT_OF_ORDER,
                    event: 0,
                },
            ),
            after(&[], twice_plus_one(OUT_OF_ORDER, 0)),
            after(
                &[],
                Command::Barrier {
                    queue: OUT_OF_ORDER,
                    event: 0,
                },
            ),
            after(&[], read(OUT_OF_ORDER, 0)),
        ],
    );
    assert_eq!(value, 9);
    // A barrier with a wait list naming another queue's command keeps this queue's
    // later commands behind that command.
    let value = value_of(
        &mut c,
        vec![
            after(&[], slow_set(IN_ORDER, 10, 5)),
            after(
                &[10],
                Command::Barrier {
                    queue: OUT_OF_ORDER,
                    event: 0,
                },
            ),
            after(&[], twice_plus_one(OUT_OF_ORDER, 11)),
            after(&[11], read(OUT_OF_ORDER, 0)),
        ],
    );
    assert_eq!(value, 11);
    // A marker whose wait list names only events that completed in an earlier task
    // waits for nothing (the node gives it a completed event to wait for: an empty list
    // would make it wait for the kernel before it). PoCL runs the commands of a queue
    // one at a time, so the order of the ends cannot show it; the marker must complete.
    let (status, events, _) = c.task_waiting(vec![after(&[], read(PROFILED, 20))]);
    assert_eq!(
        (status, events[0].status),
        (cl::CL_SUCCESS, cl::CL_COMPLETE)
    );
    let (status, events, _) = c.task_waiting(vec![
        after(&[], slow_set(PROFILED, 30, 6)),
        after(
            &[20],
            Command::Marker {
                queue: PROFILED,
                event: 31,
            },
        ),
    ]);
    assert_eq!(status, cl::CL_SUCCESS);
    let statuses: Vec<(u64, i32)> = events.iter().map(|e| (e.event, e.status)).collect();
    assert_eq!(statuses, [(30, cl::CL_COMPLETE), (31, cl::CL_COMPLETE)]);
}

#[test]
fn a_command_waiting_for_a_failed_command_fails_too() {
    let Some((_svc, mut c)) = client() else {
        return;
    };
    let missing_kernel = Command::NdRange(NdRange {
        queue: OUT_OF_ORDER,
        event: 10,
        kernel: 99,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![],
    });
    let (status, events, _) = c.task_waiting(vec![
        after(&[], missing_kernel),
        after(&[10], twice_plus_one(OUT_OF_ORDER, 11)),
        after(&[], read(OUT_OF_ORDER, 12)),
    ]);
    assert_eq!(status, cl::CL_INVALID_KERNEL);
    let statuses: Vec<(u64, i32)> = events.iter().map(|e| (e.event, e.status)).collect();
    assert_eq!(
        statuses,
        [
            (10, cl::CL_INVALID_KERNEL),
            (11, cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST),
            (12, cl::CL_COMPLETE)
        ]
    );
}

/// A user event of the client set to an error arrives after the commands that wait for
/// it (the client learns of the error last): they fail unrun all the same, and what
/// waits for them; the rest of the task runs. It is no command: no event result of its
/// own, and it is no failure of the task.
#[test]
fn commands_waiting_for_a_user_event_set_to_an_error_fail_unrun() {
    let Some((_svc, mut c)) = client() else {
        return;
    };
    let set = |event| after(&[], slow_set(IN_ORDER, event, 3));
    assert_eq!(
        value_of(&mut c, vec![set(1), after(&[], read(IN_ORDER, 2))]),
        3
    );
    let user_event = 77;
    let (status, events, reads) = c.task_waiting(vec![
        after(&[user_event], twice_plus_one(OUT_OF_ORDER, 10)),
        after(&[10], twice_plus_one(OUT_OF_ORDER, 11)),
        after(&[11], read(OUT_OF_ORDER, 12)),
        after(&[], read(IN_ORDER, 13)),
        after(
            &[],
            Command::UserEvent {
                queue: IN_ORDER,
                event: user_event,
                status: -5,
            },
        ),
    ]);
    let failed = cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
    assert_eq!(status, failed);
    let statuses: Vec<(u64, i32)> = events.iter().map(|e| (e.event, e.status)).collect();
    assert_eq!(
        statuses,
        [
            (10, failed),
            (11, failed),
            (12, failed),
            (13, cl::CL_COMPLETE)
        ]
    );
    // The independent read found the value the failed kernels would have changed.
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].1, 3i32.to_le_bytes());
    // Nothing waiting for it, the user event changes nothing; a status that is not an
    // error is refused as a command.
    let (status, events, _) = c.task(vec![
        read(IN_ORDER, 20),
        Command::UserEvent {
            queue: IN_ORDER,
            event: 78,
            status: -1,
        },
    ]);
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(events.len(), 1);
    let (status, _, _) = c.task(vec![Command::UserEvent {
        queue: IN_ORDER,
        event: 79,
        status: cl::CL_COMPLETE,
    }]);
    assert_eq!(status, cl::CL_INVALID_VALUE);
}

#[test]
fn an_operation_sent_as_several_commands_completes_as_one_event() {
    let Some((_svc, mut c)) = client() else {
        return;
    };
    // The two halves of one write carry its event; the kernel waits for both.
    let (status, events, reads) = c.task_waiting(vec![
        after(&[], slow_set(OUT_OF_ORDER, 9, 1)),
        after(
            &[9],
            Command::Write {
                queue: OUT_OF_ORDER,
                event: 10,
                buffer: BUFFER,
                offset: 0,
                data: &[20, 0],
            },
        ),
        after(
            &[9],
            Command::Write {
                queue: OUT_OF_ORDER,
                event: 10,
                buffer: BUFFER,
                offset: 2,
                data: &[0, 0],
            },
        ),
        after(&[10], twice_plus_one(OUT_OF_ORDER, 11)),
        after(&[11], read(OUT_OF_ORDER, 0)),
    ]);
    assert_eq!(status, cl::CL_SUCCESS);
    let ids: Vec<u64> = events.iter().map(|e: &EventDone| e.event).collect();
    assert_eq!(ids, [9, 10, 11], "one result per client event");
    assert!(events.iter().all(|e| e.status == cl::CL_COMPLETE));
    assert_eq!(reads[0].1, 41i32.to_le_bytes());
}
