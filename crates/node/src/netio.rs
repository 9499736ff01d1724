//! Socket reads and writes with deadlines, shared by the front ends.
//!
//! Both try the operation first and only arm a timer when the socket is not ready, so
//! the common case (data waiting, room in the send buffer) costs one system call.

use std::io;
use std::time::Instant;

use bytes::BufMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// One read into `buf`'s spare capacity (no zeroing), or `None` when `deadline`
/// passes first.
pub async fn read_with_deadline(
    stream: &TcpStream,
    buf: &mut impl BufMut,
    deadline: Instant,
) -> io::Result<Option<usize>> {
    // Fast path: data already waiting needs no timer.
    match stream.try_read_buf(buf) {
        Ok(n) => return Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    let read = async {
        loop {
            stream.readable().await?;
            match stream.try_read_buf(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    };
    match tokio::time::timeout_at(deadline.into(), read).await {
        Ok(r) => r.map(Some),
        Err(_) => Ok(None),
    }
}

pub async fn write_with_deadline(
    stream: &mut TcpStream,
    data: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    // Fast path: a response that fits the socket buffer is written without a timer.
    let mut written = match stream.try_write(data) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(e),
    };
    if written == data.len() {
        return Ok(());
    }
    let rest = async {
        while written < data.len() {
            match stream.write(&data[written..]).await? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "connection closed while writing",
                    ))
                }
                n => written += n,
            }
        }
        Ok::<(), io::Error>(())
    };
    match tokio::time::timeout_at(deadline.into(), rest).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "client did not read the response in time",
        )),
    }
}
