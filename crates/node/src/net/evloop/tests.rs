use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use super::*;
use crate::net::netio::{IoTimer, Transport};

/// Runs `f` with a tokio runtime's handle entered (its timers and `spawn` working from
/// this thread), the runtime driven by a thread of its own, as on a network thread.
fn with_companion<R>(f: impl FnOnce() -> R) -> R {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = rt.handle().clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let driver = std::thread::spawn(move || {
        rt.block_on(async {
            let _ = stop_rx.await;
        })
    });
    let result = {
        let _entered = handle.enter();
        f()
    };
    stop_tx.send(()).unwrap();
    driver.join().unwrap();
    result
}

/// A listener on the loop and a client connected to it.
async fn accepted_pair() -> (StdStream, EvStream) {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = Listener::new(std_listener).unwrap();
    let client = StdStream::connect(addr).unwrap();
    let (socket, peer) = listener.accept().await.unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
    (client, EvStream::new(socket).unwrap())
}

#[test]
fn spawned_tasks_run_and_the_loop_ends_with_its_main_task() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    run(async move {
        for _ in 0..3 {
            let counted = Arc::clone(&counted);
            spawn(async move {
                counted.fetch_add(1, Ordering::Relaxed);
            });
        }
        // The main task yields once: the spawned ones run meanwhile.
        tokio::task::yield_now().await;
    })
    .unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 3);
    assert!(try_with(|_| ()).is_none(), "the loop is gone after run");
}

#[test]
fn a_wake_from_another_thread_ends_the_loops_sleep() {
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        tx.send(7).unwrap();
    });
    let got = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&got);
    let started = Instant::now();
    run(async move {
        seen.store(rx.await.unwrap() as usize, Ordering::Relaxed);
    })
    .unwrap();
    sender.join().unwrap();
    assert_eq!(got.load(Ordering::Relaxed), 7);
    assert!(started.elapsed() < Duration::from_secs(5));
}

thread_local! {
    /// Sleeps the test sleeper made that blocked / did not.
    static SLEEPS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// A [`Sleeper`] as the io_uring path's, with `poll` standing in for the ring: waits
/// (when `block`) until the loop's epoll descriptor is readable.
fn poll_sleeper(epfd: RawFd, block: bool) -> bool {
    SLEEPS.with(|s| {
        let (blocking, not) = s.get();
        s.set(if block {
            (blocking + 1, not)
        } else {
            (blocking, not + 1)
        });
    });
    let mut fd = libc::pollfd {
        fd: epfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut fd, 1, if block { -1 } else { 0 }) };
    n > 0
}

#[test]
fn a_sleeper_sleeps_in_place_of_epoll_wait_and_wakes_for_sockets_and_other_threads() {
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        tx.send(7).unwrap();
    });
    with_companion(|| {
        run(async move {
            set_sleeper(poll_sleeper);
            // A wake-up from another thread ends the sleep (the eventfd makes the
            // epoll descriptor readable).
            assert_eq!(rx.await.unwrap(), 7);
            // So does a socket's input.
            let (mut client, mut stream) = accepted_pair().await;
            let mut timer = IoTimer::default();
            let deadline = Instant::now() + Duration::from_secs(10);
            client.write_all(b"ping").unwrap();
            assert!(stream.wait_readable(deadline, &mut timer).await.unwrap());
            let mut buf = Vec::with_capacity(64);
            assert_eq!(stream.try_read_now(&mut buf).unwrap(), 4);
        })
        .unwrap();
    });
    sender.join().unwrap();
    let (blocking, _) = SLEEPS.with(Cell::get);
    assert!(
        blocking >= 2,
        "the loop slept in the sleeper ({blocking} times)"
    );
}

#[test]
fn a_stream_reads_what_arrives_and_writes_back() {
    with_companion(|| {
        run(async {
            let (mut client, mut stream) = accepted_pair().await;
            let mut timer = IoTimer::default();
            let deadline = Instant::now() + Duration::from_secs(10);
            // Nothing sent yet: the accepted socket is not assumed readable.
            let mut buf = Vec::with_capacity(64);
            assert_eq!(
                stream.try_read_now(&mut buf).unwrap_err().kind(),
                io::ErrorKind::WouldBlock
            );
            client.write_all(b"ping").unwrap();
            assert!(stream.wait_readable(deadline, &mut timer).await.unwrap());
            let n = stream
                .read_with_deadline(&mut buf, deadline, &mut timer)
                .await
                .unwrap();
            assert_eq!((n, &buf[..]), (Some(4), &b"ping"[..]));
            stream
                .write_within(b"pong", Duration::from_secs(5))
                .await
                .unwrap();
            let mut answer = [0u8; 4];
            client.read_exact(&mut answer).unwrap();
            assert_eq!(&answer, b"pong");
            // The client's close is the end of input.
            drop(client);
            buf.clear();
            let n = stream
                .read_with_deadline(&mut buf, deadline, &mut timer)
                .await
                .unwrap();
            assert_eq!(n, Some(0));
        })
        .unwrap();
    });
}

#[test]
fn a_read_deadline_passes_when_nothing_comes() {
    with_companion(|| {
        run(async {
            let (_client, mut stream) = accepted_pair().await;
            let mut timer = IoTimer::default();
            let wait = Duration::from_millis(100);
            let started = Instant::now();
            let readable = stream
                .wait_readable(started + wait, &mut timer)
                .await
                .unwrap();
            assert!(!readable, "nothing was sent, yet the stream was readable");
            assert!(started.elapsed() >= wait && started.elapsed() < Duration::from_secs(5));
        })
        .unwrap();
    });
}

#[test]
fn hung_up_waits_for_the_close_not_for_input() {
    with_companion(|| {
        run(async {
            let (mut client, mut stream) = accepted_pair().await;
            client.write_all(b"more input").unwrap();
            let early = tokio::time::timeout(Duration::from_millis(100), stream.hung_up()).await;
            assert!(early.is_err(), "input alone ended the wait for the close");
            drop(client);
            tokio::time::timeout(Duration::from_secs(5), stream.hung_up())
                .await
                .expect("the close was not seen");
        })
        .unwrap();
    });
}

/// A client that shuts its side down and stops reading must not make a writer waiting
/// for room spin: the write waits (the loop's thread asleep) and its deadline ends it.
#[test]
fn a_writer_to_a_half_closed_client_that_does_not_read_waits_without_spinning() {
    with_companion(|| {
        run(async {
            let (client, mut stream) = accepted_pair().await;
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let big = vec![7u8; 64 << 20];
            let cpu = thread_cpu();
            let started = Instant::now();
            let written = stream.write_within(&big, Duration::from_millis(300)).await;
            assert_eq!(written.unwrap_err().kind(), io::ErrorKind::TimedOut);
            let spent = thread_cpu() - cpu;
            assert!(started.elapsed() >= Duration::from_millis(300));
            assert!(
                spent < Duration::from_millis(200),
                "the loop's thread ran {spent:?} of a 300 ms wait"
            );
            drop(client);
        })
        .unwrap();
    });
}

/// A task that keeps waking itself does not keep the others from their input: the
/// loop looks at its sockets between passes over the woken tasks.
#[test]
fn a_task_that_keeps_yielding_does_not_starve_input() {
    with_companion(|| {
        run(async {
            let stop = Arc::new(AtomicBool::new(false));
            let spinning = Arc::clone(&stop);
            spawn(async move {
                while !spinning.load(Ordering::Relaxed) {
                    tokio::task::yield_now().await;
                }
            });
            let (mut client, mut stream) = accepted_pair().await;
            // The byte comes later, so the read must wait for the loop's epoll_wait.
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                client.write_all(b"x").unwrap();
                client
            });
            let mut timer = IoTimer::default();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut buf = Vec::with_capacity(8);
            let n = stream
                .read_with_deadline(&mut buf, deadline, &mut timer)
                .await
                .unwrap();
            stop.store(true, Ordering::Relaxed);
            assert_eq!(n, Some(1));
            assert!(Instant::now() < deadline);
            drop(writer.join().unwrap());
        })
        .unwrap();
    });
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
