//! One TCP echo, two event loops: tokio's current-thread runtime (what the node's
//! network threads run) and a minimal epoll loop of this experiment's own
//! ([`own`]). Both serve each connection as an `async` task with the node's
//! pattern: wait for input, read what is there, write it back, and keep an idle
//! timeout per connection (lazily, as the node's `IoTimer` does). The difference in
//! instructions and CPU per call between the two is what tokio's per-event machinery
//! costs (issue 28); `bench/common/c/tcp_echo` is the floor under both.
//!
//! Usage: evloop-echo tokio|own ADDR [--idle-ms N]   (N = 0: no idle timeout)

mod own;

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

/// Read buffer per connection, as `tcp_echo`'s.
const BUF_CAP: usize = 64 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: evloop-echo tokio|own ADDR [--idle-ms N]");
        std::process::exit(2)
    };
    if args.len() != 3 && args.len() != 5 {
        usage();
    }
    let addr: SocketAddr = args[2].parse().unwrap_or_else(|_| usage());
    let idle_ms: u64 = match args.get(3).map(String::as_str) {
        None => 60_000,
        Some("--idle-ms") => args[4].parse().unwrap_or_else(|_| usage()),
        Some(_) => usage(),
    };
    let listener = std::net::TcpListener::bind(addr).expect("bind");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    match args[1].as_str() {
        "tokio" => serve_tokio(listener, idle_ms),
        "own" => own::serve(listener, idle_ms),
        _ => usage(),
    }
}

fn serve_tokio(listener: std::net::TcpListener, idle_ms: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener).expect("registering the listener");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(echo_tokio(stream, idle_ms));
        }
    });
}

/// The node's connection pattern on tokio: input readiness first, then the idle timer,
/// in one poll; the timer re-armed only when it fires before the (moved) deadline.
async fn echo_tokio(stream: TcpStream, idle_ms: u64) {
    let idle = Duration::from_millis(idle_ms);
    let mut deadline = Instant::now() + idle;
    let mut sleep: Option<Pin<Box<tokio::time::Sleep>>> =
        (idle_ms > 0).then(|| Box::pin(tokio::time::sleep_until(deadline.into())));
    let mut buf = vec![0u8; BUF_CAP];
    loop {
        let input = poll_fn(|cx| {
            if stream.poll_read_ready(cx).is_ready() {
                return Poll::Ready(true);
            }
            let Some(sleep) = sleep.as_mut() else {
                return Poll::Pending;
            };
            while sleep.as_mut().poll(cx).is_ready() {
                if Instant::now() >= deadline {
                    return Poll::Ready(false);
                }
                sleep.as_mut().reset(deadline.into());
            }
            Poll::Pending
        })
        .await;
        if !input {
            return;
        }
        match stream.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if idle_ms > 0 {
                    deadline = Instant::now() + idle;
                }
                if write_all_tokio(&stream, &buf[..n]).await.is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

async fn write_all_tokio(stream: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match stream.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
