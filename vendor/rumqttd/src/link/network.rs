use bytes::{Buf, Bytes, BytesMut};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    time::timeout,
};

use std::{
    collections::VecDeque,
    io::{self, ErrorKind},
};
use tokio::time::{error::Elapsed, Duration};

use crate::protocol::{self, Packet, Protocol};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O = {0}")]
    Io(#[from] io::Error),
    #[error("Invalid data = {0}")]
    Protocol(#[from] protocol::Error),
    #[error["Keep alive timeout"]]
    KeepAlive(#[from] Elapsed),
}

/// Network transforms packets <-> frames efficiently. It takes
/// advantage of pre-allocation, buffering and vectorization when
/// appropriate to achieve performance
pub struct Network<P> {
    /// Socket for IO
    socket: Box<dyn N>,
    /// Buffered reads
    read: BytesMut,
    /// Buffered writes
    write: BytesMut,
    /// Maximum packet size
    max_incoming_size: usize,
    /// Maximum connection buffer count. TODO: Change this to use bytes for deterministicness
    max_connection_buffer_len: usize,
    /// Keep alive timeout
    keepalive: Duration,
    /// Protocol
    protocol: P,
}

impl<P: Protocol> Network<P> {
    pub fn new(
        socket: Box<dyn N>,
        max_incoming_size: usize,
        max_connection_buffer_len: usize,
        protocol: P,
    ) -> Network<P> {
        Network {
            socket,
            read: BytesMut::with_capacity(10 * 1024),
            write: BytesMut::with_capacity(10 * 1024),
            max_incoming_size,
            max_connection_buffer_len,
            // Overwritten by keepalive value in connect packet, otherwise we
            // would wait indefinitely until we get a packet / network error
            // when we call read.
            keepalive: Duration::MAX,
            protocol,
        }
    }

    pub fn set_keepalive(&mut self, keepalive: u16) {
        let keepalive = Duration::from_secs(keepalive as u64);
        self.keepalive = keepalive + keepalive.mul_f32(0.5);
    }

    /// Reads more than 'required' bytes to frame a packet into self.read buffer
    async fn read_bytes(&mut self, required: usize) -> io::Result<usize> {
        // TODO: Fix this cancellation bug and write unit test
        let mut total_read = 0;
        loop {
            let read = self.socket.read_buf(&mut self.read).await?;
            if 0 == read {
                let error = if self.read.is_empty() {
                    io::Error::new(ErrorKind::ConnectionAborted, "connection closed by peer")
                } else {
                    io::Error::new(ErrorKind::ConnectionReset, "connection reset by peer")
                };

                return Err(error);
            }

            total_read += read;
            if total_read >= required {
                return Ok(total_read);
            }
        }
    }

    /// Waits on network for 1 packet
    pub async fn read(&mut self) -> Result<Packet, Error> {
        loop {
            let required = match Protocol::read_mut(
                &mut self.protocol,
                &mut self.read,
                self.max_incoming_size,
            ) {
                Ok(packet) => return Ok(packet),
                Err(protocol::Error::InsufficientBytes(required)) => required,
                Err(e) => return Err(e.into()),
            };

            // rdv-relay-bridge patch (PATCHES.md): make room for the rest of
            // the frame before reading. `required` is bounded by the packet
            // size limit (`check` refuses larger frames before this). Without
            // it a large publish arrives through a buffer grown 64 bytes at a
            // time by `read_buf`, each growth a new allocation and a copy
            // while the previous payload is still shared with the router.
            self.read.reserve(required);
            // read more packets until a frame can be created. This function
            // blocks until a frame can be created. Use this in a select! branch
            timeout(self.keepalive, self.read_bytes(required)).await??;
        }
    }

    /// Read packets in bulk. This allow replies to be in bulk. This method is used
    /// after the connection is established to read a bunch of incoming packets
    pub fn readv(&mut self, packets: &mut VecDeque<Packet>) -> Result<usize, Error> {
        loop {
            match self
                .protocol
                .read_mut(&mut self.read, self.max_incoming_size)
            {
                Ok(packet) => {
                    packets.push_back(packet);
                    let connection_buffer_length = packets.len();
                    if connection_buffer_length >= self.max_connection_buffer_len {
                        return Ok(connection_buffer_length);
                    }
                }
                Err(protocol::Error::InsufficientBytes(_)) => return Ok(packets.len()),
                Err(e) => return Err(io::Error::new(ErrorKind::InvalidData, e.to_string()).into()),
            }
        }
    }

    /// rdv patch (PATCHES.md, "Connection gate").
    pub(crate) fn is_v5(&self) -> bool {
        self.protocol.is_v5()
    }

    pub async fn write(&mut self, packet: Packet) -> Result<(), Error> {
        Protocol::write(&self.protocol, packet, &mut self.write)?;
        self.socket.write_all(&self.write).await?;
        self.write.clear();
        Ok(())
    }

    /// rdv patch (PATCHES.md, "Payloads sent from where they are"): on a
    /// socket that takes vectored writes, a payload of `IN_PLACE_MIN` bytes
    /// or more goes out from its own buffer, between the frames written
    /// around it, instead of being copied into the write buffer first (that
    /// copy was a tenth of the network thread's time at 32 KB).
    pub async fn writev(&mut self, packets: VecDeque<Packet>) -> Result<(), Error> {
        let vectored = self.socket.is_write_vectored();
        let mut frames = Frames::default();
        for packet in packets {
            if let Some(payload) = self.protocol.write_head(packet, &mut self.write)? {
                if !vectored || payload.len() < IN_PLACE_MIN {
                    self.write.extend_from_slice(&payload);
                } else {
                    frames.push(self.write.split().freeze());
                    frames.push(payload);
                }
            }
        }
        if frames.remaining() == 0 {
            // Nothing sent in place: one plain write, as upstream.
            self.socket.write_all(&self.write).await?;
            self.write.clear();
        } else {
            frames.push(self.write.split().freeze());
            self.socket.write_all_buf(&mut frames).await?;
        }
        Ok(())
    }
}

/// Payloads at least this long are sent from where they are (`writev`);
/// shorter ones cost less to copy than an extra I/O vector.
const IN_PLACE_MIN: usize = 4096;

/// rdv patch: the pieces of one `writev`, in order, as one `Buf` that
/// tokio's `write_all_buf` sends with vectored writes.
#[derive(Debug, Default)]
struct Frames {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Frames {
    fn push(&mut self, b: Bytes) {
        // Empty pieces are left out: `chunk` must not be empty while
        // anything remains.
        if !b.is_empty() {
            self.remaining += b.len();
            self.parts.push_back(b);
        }
    }
}

impl Buf for Frames {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |b| b.as_ref())
    }

    fn advance(&mut self, mut n: usize) {
        assert!(n <= self.remaining, "advance past the end of Frames");
        self.remaining -= n;
        while n > 0 {
            let Some(front) = self.parts.front_mut() else {
                return;
            };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = io::IoSlice::new(part);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod frames_tests {
    use super::*;

    #[test]
    fn frames_advance_across_pieces() {
        let mut f = Frames::default();
        for p in [&b"ab"[..], b"", b"cde", b"f"] {
            f.push(Bytes::copy_from_slice(p));
        }
        assert_eq!(f.remaining(), 6);
        let mut slices = [io::IoSlice::new(&[]); 8];
        assert_eq!(f.chunks_vectored(&mut slices), 3);
        f.advance(3);
        assert_eq!(f.chunk(), b"de");
        f.advance(2);
        assert_eq!(f.chunk(), b"f");
        f.advance(1);
        assert_eq!((f.remaining(), f.chunk()), (0, &b""[..]));
    }
}

pub trait N: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T> N for T where T: AsyncRead + AsyncWrite + Unpin + Send {}
