//! The daemon's `/metrics` endpoint (`rcufs mount --metrics-listen ADDR`): a
//! minimal HTTP/1.x server on one thread of its own that answers
//! `GET /metrics` (and `HEAD`) with [`crate::metrics::render`] of the
//! mount's stats, 404 for other paths and 405 for other methods.
//!
//! # Design
//! A Prometheus server scrapes every few seconds with one request per
//! connection at most in flight, so the server is std only and serial: one
//! accept loop, one request per connection (`Connection: close`), with read
//! and write time-outs so that a client that stalls holds the thread for a
//! few seconds at most. Requests are read up to [`MAX_REQUEST`] bytes; the
//! body of a request is never read.
//!
//! # Exposure
//! The endpoint has no authentication, so by default it listens on loopback
//! only: [`check_exposure`] refuses a non-loopback address unless the caller
//! allowed it explicitly (`--metrics-allow-remote`), and then it warns once
//! at start. An address without a host (`:9101`) means 127.0.0.1.
//!
//! # Invariants
//! - The thread ends when [`MetricsServer::stop`] runs (the daemon calls it
//!   after the unmount): the stop flag is set, then a connection to the
//!   listener wakes the blocking `accept`, and the thread is joined.
//! - A response is either complete (`Content-Length` matches the body) or
//!   the connection is closed.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// The most bytes of a request (line and headers) that are read.
pub const MAX_REQUEST: usize = 8192;

/// How long a client may take to send its request or to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Parses a listen address: `HOST:PORT`, `[V6]:PORT`, `localhost:PORT` or
/// `:PORT` (127.0.0.1). Port 0 picks a free port (the log names it).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    if let Some(port) = t.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{s}`: `{port}` is not a port number"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs = t
        .to_socket_addrs()
        .map_err(|e| format!("`{s}` is not HOST:PORT ({e}); for example 127.0.0.1:9101 or :9101"))?;
    addrs.next().ok_or_else(|| format!("`{s}` resolves to no address"))
}

/// Refuses a non-loopback address unless `allow_remote`; `Ok(true)` when the
/// address is not loopback (and allowed), so that the caller warns.
pub fn check_exposure(addr: SocketAddr, allow_remote: bool) -> Result<bool> {
    if addr.ip().is_loopback() {
        return Ok(false);
    }
    if !allow_remote {
        bail!(
            "refusing to serve metrics on {addr}: it is not a loopback address, and the endpoint has no \
             authentication; listen on 127.0.0.1:PORT (or [::1]:PORT) and let Prometheus scrape locally, \
             or add --metrics-allow-remote (-o metrics_allow_remote) if every host that can reach {addr} may read them"
        );
    }
    Ok(true)
}

/// A running `/metrics` server.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer").field("addr", &self.addr).finish()
    }
}

/// A bound, not yet serving, listener: binding comes before the mount so
/// that a taken port fails `rcufs mount` before anything is mounted.
#[derive(Debug)]
pub struct Bound {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Bound {
    /// The address actually bound (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Binds `addr` after [`check_exposure`]; warns loudly for a remote one.
pub fn bind(addr: SocketAddr, allow_remote: bool) -> Result<Bound> {
    let remote = check_exposure(addr, allow_remote)?;
    let listener = TcpListener::bind(addr).with_context(|| format!("listening for metrics on {addr}"))?;
    let addr = listener.local_addr().context("the metrics listener's address")?;
    if remote {
        tracing::warn!(
            %addr,
            "serving /metrics on a NON-LOOPBACK address without authentication: anyone who can reach it can read the counters and the mount point"
        );
    }
    Ok(Bound { listener, addr })
}

impl MetricsServer {
    /// Serves `render()` at `/metrics` on `bound` from a thread of its own.
    pub fn start(bound: Bound, render: impl Fn() -> String + Send + 'static) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let (stop2, served2) = (stop.clone(), served.clone());
        let listener = bound.listener;
        let thread = std::thread::Builder::new()
            .name("rcufs-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    // Acquire pairs with the Release store in `stop`: a
                    // connection accepted after it is the wake-up, not a client.
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    match conn {
                        Ok(stream) => {
                            served2.fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = answer(stream, &render) {
                                tracing::debug!("metrics request: {e:#}");
                            }
                        }
                        Err(e) => {
                            tracing::warn!("metrics listener: accept failed: {e}");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            })
            .context("starting the metrics thread")?;
        tracing::info!(addr = %bound.addr, "serving metrics at http://{}/metrics", bound.addr);
        Ok(Self {
            addr: bound.addr,
            stop,
            served,
            thread: Some(thread),
        })
    }

    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Ends the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        // Release pairs with the Acquire load in the accept loop.
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept; an unspecified address is reached
        // through the loopback address of its family.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        match TcpStream::connect_timeout(&wake, Duration::from_secs(2)) {
            Ok(_) => {
                let _ = thread.join();
            }
            // Cannot happen for a listener we hold, but never hang the exit
            // on it: the thread then ends with the process.
            Err(e) => tracing::warn!("could not wake the metrics thread ({e}); leaving it"),
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Reads one request from `stream` and answers it.
fn answer(mut stream: TcpStream, render: &impl Fn() -> String) -> Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // The whole request within one timeout, not each read: a client that
    // trickles a byte at a time would otherwise hold the only metrics
    // thread for hours.
    let deadline = std::time::Instant::now() + IO_TIMEOUT;
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        }
        stream.set_read_timeout(Some(left))?;
        if buf.len() >= MAX_REQUEST {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request too large\n",
                true,
            );
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(()); // A bare connect (a port probe): nothing to answer.
            }
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head = method == "HEAD";
    if method != "GET" && !head {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET and HEAD\n",
            true,
        );
    }
    if path != "/metrics" {
        return respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"the metrics are at /metrics\n",
            !head,
        );
    }
    let body = render();
    respond(
        &mut stream,
        "200 OK",
        crate::metrics::CONTENT_TYPE,
        body.as_bytes(),
        !head,
    )
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8], with_body: bool) -> Result<()> {
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes())?;
    if with_body {
        stream.write_all(body)?;
    }
    stream.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn parses_addresses() {
        assert_eq!(parse_listen(":9101").unwrap(), "127.0.0.1:9101".parse().unwrap());
        assert_eq!(parse_listen("[::1]:80").unwrap(), "[::1]:80".parse().unwrap());
        assert!(parse_listen("localhost:9101").unwrap().ip().is_loopback());
        assert!(parse_listen("nonsense").is_err());
        assert!(parse_listen(":x").is_err());
    }

    #[test]
    fn refuses_remote_addresses_unless_allowed() {
        let remote: SocketAddr = "0.0.0.0:9101".parse().unwrap();
        let err = check_exposure(remote, false).unwrap_err().to_string();
        assert!(err.contains("not a loopback address"), "{err}");
        assert!(check_exposure(remote, true).unwrap());
        assert!(!check_exposure("127.0.0.1:1".parse().unwrap(), false).unwrap());
        assert!(!check_exposure("[::1]:1".parse().unwrap(), false).unwrap());
    }

    /// A client that trickles its request a byte at a time, each within
    /// the read timeout, is cut off once the whole request has taken the
    /// timeout, and the next scrape is answered.
    #[test]
    fn a_request_trickled_byte_by_byte_is_cut_off_after_the_timeout() {
        let bound = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let server = MetricsServer::start(bound, || "x_total 1\n# EOF\n".to_string()).unwrap();
        let addr = server.local_addr();
        let mut slow = TcpStream::connect(addr).unwrap();
        let start = std::time::Instant::now();
        let cut = loop {
            std::thread::sleep(Duration::from_millis(500));
            if slow.write_all(b"G").is_err() {
                break start.elapsed();
            }
            let mut probe = [0u8; 1];
            slow.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            if matches!(slow.read(&mut probe), Ok(0)) {
                break start.elapsed();
            }
            assert!(start.elapsed() < 4 * IO_TIMEOUT, "still reading a trickled request");
        };
        assert!(cut >= IO_TIMEOUT, "cut off after {cut:?}");
        let ok = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        server.stop();
    }

    #[test]
    fn serves_metrics_404_405_and_stops() {
        let bound = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let server = MetricsServer::start(bound, || "x_total 1\n# EOF\n".to_string()).unwrap();
        let addr = server.local_addr();
        let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(&format!("Content-Type: {}\r\n", crate::metrics::CONTENT_TYPE)),
            "{ok}"
        );
        assert!(ok.contains("Content-Length: 16\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nx_total 1\n# EOF\n"), "{ok}");
        let head = get(addr, "HEAD /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200 OK") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(server.served() >= 4);
        server.stop();
        // The listener is closed once the thread has ended.
        assert!(TcpStream::connect(addr).is_err(), "still listening after stop");
    }
}
