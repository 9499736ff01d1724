//! The connection's bookkeeping at its loss, driven over a socket pair whose other end
//! the test holds as the node: every event the connection carries fails exactly once,
//! before anyone can see the connection lost, and every waiter wakes.

use std::ffi::{c_char, c_void};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::{self, Command, Decoded, Response};
use ocl_remote::stream::Stream;

use super::{lock, ContextNotifier, Node};
use crate::held::Holding;
use crate::object::{add_callback, new_handle, release, Event, EventRef, Handle};

/// The (in-order) queue the test's commands name; the node never runs them.
const QUEUE: u64 = 1;
/// How long a waiter that should return at once may take before the test gives up.
const PROMPT: Duration = Duration::from_secs(5);

/// A connection whose node is `peer`, greeted already.
fn connection() -> (Arc<Node>, UnixStream) {
    let (ours, peer) = UnixStream::pair().unwrap();
    let writer = Stream::Unix(ours.try_clone().unwrap());
    let node = Node::start("fake", writer, Stream::Unix(ours), Vec::new()).unwrap();
    (node, peer)
}

/// A new event of a command (`user`: a user event), as a handle with one reference,
/// the test's.
fn new_event(node: &Arc<Node>, user: bool) -> usize {
    // A queue handle the registry does not know: releasing the event leaves it alone.
    let queue = if user { 0 } else { 0x10 };
    new_handle(Event::new(
        Arc::clone(node),
        queue,
        0,
        cl::CL_COMMAND_MARKER,
    )) as usize
}

fn event_ref(h: usize) -> EventRef {
    EventRef::new(h as Handle)
}

fn status(h: usize) -> ClInt {
    event_ref(h).status()
}

/// Enqueues a marker on `queue` carrying the event `h`, waiting for the events `waits`.
fn enqueue_marker(node: &Node, queue: u64, h: usize, waits: &[u64]) {
    let e = event_ref(h);
    let cmd = Command::Marker {
        queue,
        event: e.id(),
    };
    node.enqueue(&cmd, waits, Some(e), None);
}

/// The statuses an event's callbacks were called with.
#[derive(Default)]
struct Calls(Mutex<Vec<ClInt>>);

unsafe extern "C" fn record(_event: Handle, status: ClInt, calls: *mut c_void) {
    // SAFETY: registered with a `Calls` that outlives the event's callbacks.
    let calls = unsafe { &*(calls as *const Calls) };
    // Not `unwrap`: a test that failed while holding the lock must fail alone, not
    // abort the whole binary from a callback that cannot unwind.
    calls
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(status);
}

/// The statuses `calls` recorded once it has any, or after [`PROMPT`]: event
/// callbacks run after the event is final and its waiters woken, so a test that woke
/// may look before they ran.
fn recorded(calls: &Calls) -> Vec<ClInt> {
    let deadline = std::time::Instant::now() + PROMPT;
    while calls.0.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    calls.0.lock().unwrap().clone()
}

fn on_complete(h: usize, calls: &Calls) {
    let user = calls as *const Calls as usize;
    assert_eq!(
        add_callback(h as Handle, cl::CL_COMPLETE, record, user),
        cl::CL_SUCCESS
    );
}

/// Waits for the event `h` on a thread of its own; the receiver gets its final status.
fn waiter(node: &Arc<Node>, h: usize) -> mpsc::Receiver<ClInt> {
    let (tx, rx) = mpsc::channel();
    let (node, e) = (Arc::clone(node), event_ref(h));
    std::thread::spawn(move || {
        let _ = tx.send(node.wait_event(&e));
    });
    rx
}

/// What a callback does: start a waiter for `other`, and note what it returned while
/// the callback still runs (`None`: nothing within [`PROMPT`]).
struct WaitInCallback {
    node: Arc<Node>,
    other: usize,
    /// Fail the connection first, as a write to a lost node from the callback would.
    fail_first: bool,
    seen: Mutex<Option<Option<ClInt>>>,
}

unsafe extern "C" fn wait_for_other(_event: Handle, _status: ClInt, probe: *mut c_void) {
    // SAFETY: registered with a `WaitInCallback` that outlives the event's callbacks.
    let probe = unsafe { &*(probe as *const WaitInCallback) };
    if probe.fail_first {
        probe.node.fail_all();
    }
    let got = waiter(&probe.node, probe.other).recv_timeout(PROMPT).ok();
    *probe.seen.lock().unwrap() = Some(got);
}

/// Reads frames from the node's end until a `Flush`, and returns its id (the task's);
/// `None` once the connection has ended.
fn read_until_flush(peer: &mut UnixStream) -> Option<u64> {
    loop {
        let mut head = [0u8; proto::HEADER_LEN];
        peer.read_exact(&mut head).ok()?;
        let Ok(Decoded::Complete(header, _)) = proto::decode_header(&head, u32::MAX) else {
            panic!("bad frame header")
        };
        let mut body = vec![0u8; header.body_len as usize];
        peer.read_exact(&mut body).ok()?;
        if header.kind == proto::kind::FLUSH {
            return Some(header.id);
        }
    }
}

/// Reports every task done, successfully, until the connection ends.
fn answer_every_task(mut peer: UnixStream) {
    std::thread::spawn(move || {
        while let Some(task) = read_until_flush(&mut peer) {
            let mut done = Vec::new();
            Response::TaskDone {
                status: cl::CL_SUCCESS,
                events: Vec::new(),
            }
            .encode(task, &mut done);
            if peer.write_all(&done).is_err() {
                return;
            }
        }
    });
}

#[test]
fn a_waiter_that_comes_while_the_loss_is_handled_finds_its_event_failed() {
    let (node, _peer) = connection();
    let (first, second) = (new_event(&node, false), new_event(&node, false));
    enqueue_marker(&node, QUEUE, first, &[]);
    enqueue_marker(&node, QUEUE, second, &[]);
    node.flush();
    assert_eq!(status(second), cl::CL_SUBMITTED);
    // The first event's callback runs while the loss is handled, before the thread
    // handling it has dealt with the second event: a waiter for that event then once
    // saw the connection lost and returned with the event still submitted (a blocking
    // read answered CL_SUCCESS).
    let probe = WaitInCallback {
        node: Arc::clone(&node),
        other: second,
        fail_first: false,
        seen: Mutex::new(None),
    };
    let user = &probe as *const WaitInCallback as usize;
    add_callback(first as Handle, cl::CL_COMPLETE, wait_for_other, user);
    node.fail_all();
    assert_eq!(
        *probe.seen.lock().unwrap(),
        Some(Some(cl::CL_OUT_OF_RESOURCES))
    );
    assert_eq!(status(first), cl::CL_OUT_OF_RESOURCES);
    release::<Event>(first as Handle);
    release::<Event>(second as Handle);
}

#[test]
fn events_of_a_finished_task_are_final_before_its_callbacks_run() {
    let (node, mut peer) = connection();
    let (first, second) = (new_event(&node, false), new_event(&node, false));
    enqueue_marker(&node, QUEUE, first, &[]);
    enqueue_marker(&node, QUEUE, second, &[]);
    node.flush();
    // The first event's callback fails the connection (as a write to the lost node from
    // it would) and waits for the second event, of the same task: it is complete.
    let probe = WaitInCallback {
        node: Arc::clone(&node),
        other: second,
        fail_first: true,
        seen: Mutex::new(None),
    };
    let user = &probe as *const WaitInCallback as usize;
    add_callback(first as Handle, cl::CL_COMPLETE, wait_for_other, user);
    let task = read_until_flush(&mut peer).unwrap();
    let mut done = Vec::new();
    Response::TaskDone {
        status: cl::CL_SUCCESS,
        events: Vec::new(),
    }
    .encode(task, &mut done);
    peer.write_all(&done).unwrap();
    waiter(&node, first).recv_timeout(PROMPT).unwrap();
    // The callback has run once its waiter returned: wait for that.
    let deadline = std::time::Instant::now() + PROMPT;
    while probe.seen.lock().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the callback did not run"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(*probe.seen.lock().unwrap(), Some(Some(cl::CL_COMPLETE)));
    assert_eq!(status(first), cl::CL_COMPLETE);
    release::<Event>(first as Handle);
    release::<Event>(second as Handle);
}

#[test]
fn commands_held_or_not_yet_sent_at_the_loss_fail_once_and_their_waiters_wake() {
    let (node, _peer) = connection();
    let gate = new_event(&node, true);
    let (held, unsent) = (new_event(&node, false), new_event(&node, false));
    node.watch_user_event(event_ref(gate));
    enqueue_marker(&node, QUEUE, held, &[event_ref(gate).id()]);
    enqueue_marker(&node, QUEUE + 1, unsent, &[]);
    assert!(node.holds_queue(QUEUE));
    let (held_calls, unsent_calls) = (Calls::default(), Calls::default());
    on_complete(held, &held_calls);
    on_complete(unsent, &unsent_calls);
    let held_waiter = waiter(&node, held);
    node.fail_all();
    assert_eq!(
        held_waiter.recv_timeout(PROMPT),
        Ok(cl::CL_OUT_OF_RESOURCES)
    );
    assert_eq!(
        waiter(&node, unsent).recv_timeout(PROMPT),
        Ok(cl::CL_OUT_OF_RESOURCES)
    );
    // Setting the user event now sends nothing and completes nothing again.
    assert!(event_ref(gate).set_user_status(cl::CL_COMPLETE));
    node.user_event_done();
    assert!(!node.holds_queue(QUEUE));
    assert_eq!(*held_calls.0.lock().unwrap(), [cl::CL_OUT_OF_RESOURCES]);
    assert_eq!(*unsent_calls.0.lock().unwrap(), [cl::CL_OUT_OF_RESOURCES]);
    for h in [gate, held, unsent] {
        release::<Event>(h as Handle);
    }
}

#[test]
fn a_command_held_after_the_loss_fails_when_its_user_event_is_set() {
    let (node, _peer) = connection();
    node.fail_all();
    let gate = new_event(&node, true);
    let held = new_event(&node, false);
    node.watch_user_event(event_ref(gate));
    enqueue_marker(&node, QUEUE, held, &[event_ref(gate).id()]);
    // As natively, a wait for a command behind a user event lasts until the event is
    // set, lost connection or not.
    let held_waiter = waiter(&node, held);
    let gate_waiter = waiter(&node, gate);
    std::thread::sleep(Duration::from_millis(50));
    assert!(held_waiter.try_recv().is_err() && gate_waiter.try_recv().is_err());
    assert!(event_ref(gate).set_user_status(cl::CL_COMPLETE));
    node.user_event_done();
    assert_eq!(gate_waiter.recv_timeout(PROMPT), Ok(cl::CL_COMPLETE));
    assert_eq!(
        held_waiter.recv_timeout(PROMPT),
        Ok(cl::CL_OUT_OF_RESOURCES)
    );
    release::<Event>(gate as Handle);
    release::<Event>(held as Handle);
}

#[test]
fn the_end_of_the_connection_fails_the_task_in_flight_and_finish() {
    let (node, peer) = connection();
    let h = new_event(&node, false);
    enqueue_marker(&node, QUEUE, h, &[]);
    let calls = Calls::default();
    on_complete(h, &calls);
    node.flush();
    let w = waiter(&node, h);
    drop(peer);
    assert_eq!(w.recv_timeout(PROMPT), Ok(cl::CL_OUT_OF_RESOURCES));
    assert_eq!(node.finish(), cl::CL_OUT_OF_RESOURCES);
    assert_eq!(recorded(&calls), [cl::CL_OUT_OF_RESOURCES]);
    release::<Event>(h as Handle);
}

#[test]
fn an_event_completes_once() {
    let (node, _peer) = connection();
    let h = new_event(&node, true);
    let calls = Calls::default();
    on_complete(h, &calls);
    let e = event_ref(h);
    assert!(e.complete(cl::CL_COMPLETE, [1, 2, 3, 4]));
    assert!(!e.complete(cl::CL_OUT_OF_RESOURCES, [0; 4]));
    assert!(!e.set_user_status(cl::CL_COMPLETE));
    assert_eq!(e.status(), cl::CL_COMPLETE);
    assert_eq!(*calls.0.lock().unwrap(), [cl::CL_COMPLETE]);
    drop(e);
    release::<Event>(h as Handle);
}

#[test]
fn a_write_that_would_be_held_past_the_bound_is_refused() {
    let (node, _peer) = connection();
    lock(&node.out).held = Holding::new(1000);
    let gate = new_event(&node, true);
    let gate_id = event_ref(gate).id();
    // Not held yet: a user event not set in the wait list will hold it.
    assert_eq!(node.hold_room(QUEUE, &[gate_id], true, 1000), Ok(()));
    assert_eq!(
        node.hold_room(QUEUE, &[gate_id], true, 1001),
        Err(cl::CL_OUT_OF_HOST_MEMORY)
    );
    node.watch_user_event(event_ref(gate));
    let data = [7u8; 600];
    let write = Command::Write {
        queue: QUEUE,
        event: 0,
        buffer: 5,
        offset: 0,
        data: &data,
    };
    node.enqueue(&write, &[gate_id], None, None);
    assert!(node.holds_queue(QUEUE));
    // Behind it on its in-order queue, or waiting for the same event elsewhere: held.
    assert_eq!(
        node.hold_room(QUEUE, &[], false, 600),
        Err(cl::CL_OUT_OF_HOST_MEMORY)
    );
    assert_eq!(
        node.hold_room(QUEUE + 1, &[gate_id], false, 600),
        Err(cl::CL_OUT_OF_HOST_MEMORY)
    );
    // The write holds its data and a few bytes of command.
    assert_eq!(node.hold_room(QUEUE, &[], false, 20), Ok(()));
    // Not held: no bound of this kind.
    assert_eq!(node.hold_room(QUEUE + 1, &[], false, 1 << 20), Ok(()));
    // Set, the event releases the write and its bytes.
    assert!(event_ref(gate).set_user_status(cl::CL_COMPLETE));
    node.user_event_done();
    assert!(!node.holds_queue(QUEUE));
    assert_eq!(node.hold_room(QUEUE, &[], false, 1 << 20), Ok(()));
    release::<Event>(gate as Handle);
}

/// What a callback that makes blocking calls saw: `finish`, then a wait for a command it
/// enqueued (a task of its own).
#[derive(Default)]
struct BlockingInCallback {
    node: Mutex<Option<Arc<Node>>>,
    seen: Mutex<Option<(ClInt, ClInt)>>,
}

unsafe extern "C" fn block_in_callback(_event: Handle, _status: ClInt, probe: *mut c_void) {
    // SAFETY: registered with a `BlockingInCallback` that outlives the event's callbacks.
    let probe = unsafe { &*(probe as *const BlockingInCallback) };
    let node = probe.node.lock().unwrap().clone().unwrap();
    let finished = node.finish();
    let later = new_event(&node, false);
    enqueue_marker(&node, QUEUE, later, &[]);
    node.flush();
    let waited = node.wait_event(&event_ref(later));
    release::<Event>(later as Handle);
    *probe.seen.lock().unwrap() = Some((finished, waited));
}

#[test]
fn a_callback_may_finish_and_wait_for_a_later_task() {
    let (node, peer) = connection();
    answer_every_task(peer);
    let h = new_event(&node, false);
    enqueue_marker(&node, QUEUE, h, &[]);
    let probe = BlockingInCallback::default();
    *probe.node.lock().unwrap() = Some(Arc::clone(&node));
    let user = &probe as *const BlockingInCallback as usize;
    add_callback(h as Handle, cl::CL_COMPLETE, block_in_callback, user);
    // Nobody waits: the background reader reads the completion and runs the callback,
    // which once waited for the read half that thread held, and for its own task.
    node.flush();
    let deadline = std::time::Instant::now() + PROMPT;
    while probe.seen.lock().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the callback hangs");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        *probe.seen.lock().unwrap(),
        Some((cl::CL_SUCCESS, cl::CL_COMPLETE))
    );
    assert_eq!(node.finish(), cl::CL_SUCCESS);
    release::<Event>(h as Handle);
    probe.node.lock().unwrap().take();
}

/// Set by [`slow_notifier`] when it returns.
struct Notified(AtomicBool);

unsafe extern "C" fn slow_notifier(
    _message: *const c_char,
    _private: *const c_void,
    _size: usize,
    notified: *mut c_void,
) {
    // SAFETY: registered with a leaked `Notified`.
    let notified = unsafe { &*(notified as *const Notified) };
    std::thread::sleep(Duration::from_millis(50));
    notified.0.store(true, Ordering::SeqCst);
}

#[test]
fn a_call_failing_for_the_loss_returns_after_the_context_callback() {
    let (node, peer) = connection();
    // Leaked: the callback may outlive a failing test.
    let notified: &'static Notified = Box::leak(Box::new(Notified(AtomicBool::new(false))));
    node.add_notifier(ContextNotifier {
        context: 9,
        notify: slow_notifier,
        user_data: notified as *const Notified as usize,
    });
    let h = new_event(&node, false);
    enqueue_marker(&node, QUEUE, h, &[]);
    node.flush();
    let (tx, rx) = mpsc::channel();
    let (waiting, e) = (Arc::clone(&node), event_ref(h));
    std::thread::spawn(move || {
        let status = waiting.wait_event(&e);
        let _ = tx.send((status, notified.0.load(Ordering::SeqCst)));
    });
    // Whichever thread reads the end (the waiter or the background reader), and while
    // a second one fails the connection meanwhile.
    drop(peer);
    node.fail_all();
    assert_eq!(rx.recv_timeout(PROMPT), Ok((cl::CL_OUT_OF_RESOURCES, true)));
    assert!(notified.0.load(Ordering::SeqCst));
    release::<Event>(h as Handle);
}

/// A callback that signals it runs and returns once another thread holds the read half.
struct UntilReaderTaken {
    node: Arc<Node>,
    running: Mutex<Option<mpsc::Sender<()>>>,
}

unsafe extern "C" fn until_reader_taken(_event: Handle, _status: ClInt, probe: *mut c_void) {
    // SAFETY: registered with an `UntilReaderTaken` that outlives the event's callbacks.
    let probe = unsafe { &*(probe as *const UntilReaderTaken) };
    if let Some(running) = probe.running.lock().unwrap().take() {
        let _ = running.send(());
    }
    let deadline = std::time::Instant::now() + PROMPT;
    while probe.node.reader.try_lock().is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_finish_polling_the_read_half_wakes_when_a_task_ends_after_its_callbacks() {
    let (node, peer) = connection();
    answer_every_task(peer);
    let h = new_event(&node, false);
    enqueue_marker(&node, QUEUE, h, &[]);
    let (running_tx, running) = mpsc::channel();
    let probe = UntilReaderTaken {
        node: Arc::clone(&node),
        running: Mutex::new(Some(running_tx)),
    };
    let user = &probe as *const UntilReaderTaken as usize;
    add_callback(h as Handle, cl::CL_COMPLETE, until_reader_taken, user);
    // Nobody waits: the background reader reads the completion and runs the callback
    // with the read half released; a `finish` that comes meanwhile takes the read half
    // and sleeps on the socket, where nothing more will come. The task's end must wake
    // it.
    node.flush();
    running.recv_timeout(PROMPT).unwrap();
    let (tx, finished) = mpsc::channel();
    let waiting = Arc::clone(&node);
    std::thread::spawn(move || {
        let _ = tx.send(waiting.finish());
    });
    assert_eq!(finished.recv_timeout(PROMPT), Ok(cl::CL_SUCCESS));
    release::<Event>(h as Handle);
}
