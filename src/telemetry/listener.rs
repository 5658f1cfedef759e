//! The HTTP server's listener: a bounded number of connections, each closed when a request
//! does not arrive in time; at the limit, the connection idle the longest makes room.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Accepts at most `max` connections at once (each one file descriptor). A connection is
/// closed when no request arrived within `timeout` of its opening or of its previous
/// response (a header read and keep-alive idle timeout in one), so idle or trickling
/// clients cannot hold a slot for long. At the limit, accepting a connection closes the one
/// that has waited longest for a request (so a flood of idle connections cannot lock out a
/// probe); when none waits, the new connection waits for a slot (in the kernel's backlog
/// before that: not a file descriptor of ours).
pub struct Bounded {
    listener: TcpListener,
    slots: Arc<Slots>,
    timeout: Duration,
    max: usize,
    /// At the limit since the last connection that found a free slot (logged once).
    full: bool,
}

struct Slots {
    free: Arc<Semaphore>,
    open: Mutex<Open>,
}

/// The open connections, by id.
#[derive(Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, Slot>,
}

struct Slot {
    /// Since when it waits for a request (None: a request is being read or answered).
    idle_since: Option<Instant>,
    close: CancellationToken,
}

impl Slots {
    fn open(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().expect("never poisoned")
    }

    /// Closes the connection that has waited longest for a request, if any waits.
    fn evict_idlest(&self) {
        let mut open = self.open();
        if let Some(slot) = open.conns.values_mut().filter(|s| s.idle_since.is_some()).min_by_key(|s| s.idle_since) {
            slot.idle_since = None;
            slot.close.cancel();
        }
    }

    fn set_idle(&self, id: u64, idle: bool) {
        if let Some(slot) = self.open().conns.get_mut(&id) {
            slot.idle_since = idle.then(Instant::now);
        }
    }
}

impl Bounded {
    pub fn new(listener: TcpListener, max: usize, timeout: Duration) -> Bounded {
        Bounded { listener, slots: Arc::new(Slots { free: Arc::new(Semaphore::new(max)), open: Mutex::new(Open::default()) }), timeout, max, full: false }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.listener).await;
        let permit = match self.slots.free.clone().try_acquire_owned() {
            Ok(permit) => {
                self.full = false;
                permit
            }
            Err(_) => {
                if !self.full {
                    tracing::warn!(
                        max_connections = self.max,
                        "HTTP connection limit reached; closing the connections idle the longest (logged once until a slot is free)"
                    );
                    self.full = true;
                }
                self.slots.evict_idlest();
                self.slots.free.clone().acquire_owned().await.expect("the semaphore is never closed")
            }
        };
        let close = CancellationToken::new();
        let id = {
            let mut open = self.slots.open();
            let id = open.next;
            open.next += 1;
            open.conns.insert(id, Slot { idle_since: Some(Instant::now()), close: close.clone() });
            id
        };
        let conn = Conn {
            io,
            id,
            slots: self.slots.clone(),
            _permit: permit,
            timeout: self.timeout,
            deadline: Box::pin(tokio::time::sleep(self.timeout)),
            closed: Box::pin(close.cancelled_owned()),
            idle: true,
        };
        (conn, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// An accepted connection holding its slot until dropped.
pub struct Conn {
    io: TcpStream,
    id: u64,
    slots: Arc<Slots>,
    _permit: OwnedSemaphorePermit,
    timeout: Duration,
    /// When it is closed unless a response is written first.
    deadline: Pin<Box<Sleep>>,
    /// Cancelled to make room for a new connection.
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    /// Waiting for a request (mirrors its slot's `idle_since`, to lock only on changes).
    idle: bool,
}

impl Conn {
    /// While the socket is not ready: an error once the deadline passed or the connection
    /// was chosen to make room, so the server closes it.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.closed.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(io::ErrorKind::ConnectionAborted, "closed to make room for a new connection"));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(io::ErrorKind::TimedOut, "no request within http.request_timeout_secs"));
        }
        None
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.slots.open().conns.remove(&self.id);
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && self.idle {
                    // A request is arriving: no longer a candidate to make room.
                    self.idle = false;
                    self.slots.set_idle(self.id, false);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            ready => ready,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.io).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                // A response goes out: the next request has `timeout` from here.
                let next = Instant::now() + self.timeout;
                self.deadline.as_mut().reset(next);
                if !self.idle {
                    self.idle = true;
                    self.slots.set_idle(self.id, true);
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match self.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            ready => ready,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
