//! A response on its way to the socket. Most responses are one encoded frame; a fetch
//! response is its encoded framing interleaved with ranges of segment files, which go to
//! the socket with sendfile(2): the record bytes move from the page cache to the socket
//! inside the kernel, never copied through Weir's memory, as Kafka's `FileRecords.writeTo`
//! does with `transferTo`.
//!
//! Written by hand because no crate pairs tokio's readiness with sendfile; the unsafe is
//! two libc calls on descriptors this module holds borrowed for the call's duration.

use std::io;
use std::os::fd::AsRawFd;

use bytes::Bytes;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use weir_log::FileSlice;

/// One piece of a response, in the order it goes out.
#[derive(Debug)]
pub enum Part {
    Bytes(Bytes),
    File(FileSlice),
}

#[derive(Debug)]
pub enum Outgoing {
    /// A whole response frame, size prefix included.
    Frame(Bytes),
    /// A response frame in pieces (the first begins with the size prefix).
    Parts(Vec<Part>),
}

impl Part {
    /// The bytes this piece puts on the wire.
    pub fn wire_len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::File(f) => f.len,
        }
    }
}

impl Outgoing {
    /// The frame's length on the wire, size prefix included.
    pub fn wire_len(&self) -> usize {
        match self {
            Outgoing::Frame(b) => b.len(),
            Outgoing::Parts(parts) => parts.iter().map(Part::wire_len).sum(),
        }
    }

    /// The bytes of this frame held in memory until written (file ranges are not).
    pub fn memory_len(&self) -> usize {
        match self {
            Outgoing::Frame(b) => b.len(),
            Outgoing::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Bytes(b) => b.len(),
                    Part::File(_) => 0,
                })
                .sum(),
        }
    }

    /// The frame as one buffer, file ranges read into memory (tests, and transports that
    /// cannot take sendfile). A file range that has shrunk since the response was built is
    /// an error: the frame's size prefix already counts its bytes.
    pub fn to_bytes(&self) -> io::Result<Bytes> {
        match self {
            Outgoing::Frame(b) => Ok(b.clone()),
            Outgoing::Parts(parts) => {
                let mut out = Vec::with_capacity(self.wire_len());
                for p in parts {
                    match p {
                        Part::Bytes(b) => out.extend_from_slice(b),
                        Part::File(f) => {
                            let bytes = f.read_to_vec()?;
                            if bytes.len() != f.len {
                                return Err(truncated());
                            }
                            out.extend_from_slice(&bytes);
                        }
                    }
                }
                Ok(out.into())
            }
        }
    }

    /// Writes the whole frame. An error leaves the connection unusable (part of a frame
    /// may have gone out), so the caller closes it.
    pub async fn write_to(&self, wr: &mut OwnedWriteHalf) -> io::Result<()> {
        match self {
            Outgoing::Frame(b) => wr.write_all(b).await,
            Outgoing::Parts(parts) => {
                let tcp: &TcpStream = wr.as_ref();
                for (i, p) in parts.iter().enumerate() {
                    let more = i + 1 < parts.len();
                    match p {
                        Part::Bytes(b) => send_all(tcp, b, more).await?,
                        Part::File(f) => sendfile_all(tcp, f).await?,
                    }
                }
                Ok(())
            }
        }
    }
}

fn truncated() -> io::Error {
    // Kafka fails the same way ("Size of FileRecords ... has been truncated during write").
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "a segment file shrank while a fetch response was being sent",
    )
}

/// send(2) with MSG_MORE while more of the frame follows, so the framing before a file
/// range does not leave as a packet of its own (the socket has TCP_NODELAY).
async fn send_all(tcp: &TcpStream, mut buf: &[u8], more: bool) -> io::Result<()> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    while !buf.is_empty() {
        tcp.writable().await?;
        match tcp.try_io(Interest::WRITABLE, || {
            // SAFETY: `buf` is a live slice and the descriptor is the open socket `tcp`.
            let n = unsafe { libc::send(tcp.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        }) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// sendfile(2) of the whole range. It takes no MSG_NOSIGNAL: a peer that has gone raises
/// SIGPIPE, which Rust programs ignore (std sets it to SIG_IGN before `main`), so the call
/// fails with EPIPE and the connection closes.
async fn sendfile_all(tcp: &TcpStream, slice: &FileSlice) -> io::Result<()> {
    let mut offset = libc::off_t::try_from(slice.position)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file position too large"))?;
    let mut left = slice.len;
    let file_fd = slice.file().as_raw_fd();
    while left > 0 {
        tcp.writable().await?;
        // Linux moves at most 0x7ffff000 bytes per call.
        let count = left.min(0x7fff_f000);
        match tcp.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the call (`slice` holds the file's
            // Arc, `tcp` the socket) and `offset` is a valid off_t the kernel advances.
            let n = unsafe { libc::sendfile(tcp.as_raw_fd(), file_fd, &mut offset, count) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        }) {
            Ok(0) => return Err(truncated()),
            Ok(n) => left -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
