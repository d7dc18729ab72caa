//! A network source built on this machine: an SFTP server behind a TCP
//! listener ([`SftpServer`]) and a TCP forwarder that adds a one-way delay
//! to each direction ([`DelayLink`]), both on the loopback interface.
//!
//! This kernel has no netem qdisc, so the latency is the forwarder's: each
//! chunk read from one side is stamped with its arrival time and written to
//! the other side no earlier than `arrival + delay`. Reading and writing are
//! separate threads joined by a queue, so the link is a pipe with latency,
//! not a stop-and-wait relay: a chunk that arrives while earlier ones are
//! still delayed is read at once and leaves `delay` after its own arrival,
//! so order and throughput are kept. The achieved one-way delays are
//! recorded ([`DelayLink::delays`]) so that a report can say what the link
//! really added (a sleep overshoots by tens of microseconds).
//!
//! Invariant: everything binds to 127.0.0.1 only, and every thread and
//! child process started here ends when its guard drops (listeners are
//! woken by a connection to themselves; `sftp-server` children are killed
//! by pid and reaped).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Where Debian's `openssh-sftp-server` puts the server.
pub const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// A TCP listener on 127.0.0.1 that runs one `sftp-server` per connection,
/// with the connection as its standard input and output (what `sshfs -o
/// directport=PORT` speaks: SFTP without ssh). The server runs as the
/// caller, in `root_dir`.
pub struct SftpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    children: Arc<Mutex<Vec<Child>>>,
    thread: Option<JoinHandle<()>>,
}

impl SftpServer {
    /// Listens on a free loopback port.
    pub fn start() -> Result<SftpServer> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the SFTP listener")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let children: Arc<Mutex<Vec<Child>>> = Arc::default();
        let thread = {
            let (stop, children) = (stop.clone(), children.clone());
            std::thread::Builder::new()
                .name("sftp-listener".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let Ok(conn) = conn else { continue };
                        let _ = conn.set_nodelay(true);
                        let spawned = (|| -> Result<Child> {
                            let input = OwnedFd::from(conn.try_clone()?);
                            let output = OwnedFd::from(conn);
                            Ok(Command::new(SFTP_SERVER)
                                .stdin(Stdio::from(input))
                                .stdout(Stdio::from(output))
                                .stderr(Stdio::null())
                                .spawn()?)
                        })();
                        match spawned {
                            Ok(child) => children.lock().expect("children").push(child),
                            Err(e) => eprintln!("xtask netbench: cannot start {SFTP_SERVER}: {e:#}"),
                        }
                    }
                })?
        };
        Ok(SftpServer {
            addr,
            stop,
            children,
            thread: Some(thread),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SftpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr); // Wakes the accept loop.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for mut child in self.children.lock().expect("children").drain(..) {
            // A server whose client unmounted has exited already; one whose
            // client is still there is ended by its own pid.
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// Achieved one-way delays, in microseconds (one sample per chunk).
#[derive(Default)]
pub struct Delays {
    samples: Mutex<Vec<u32>>,
}

impl Delays {
    fn record(&self, d: Duration) {
        let mut s = self.samples.lock().expect("delays");
        // Bounded: the first million chunks are plenty for a median.
        if s.len() < 1 << 20 {
            s.push(d.as_micros().min(u32::MAX as u128) as u32);
        }
    }

    /// (count, median, 99th percentile) in microseconds.
    pub fn summary(&self) -> (usize, f64, f64) {
        let mut s = self.samples.lock().expect("delays").clone();
        if s.is_empty() {
            return (0, f64::NAN, f64::NAN);
        }
        s.sort_unstable();
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize] as f64;
        (s.len(), at(0.5), at(0.99))
    }
}

/// A TCP forwarder from a loopback port to `backend` that delays every
/// chunk by `delay` in each direction (see the module docs).
pub struct DelayLink {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    delays: Arc<Delays>,
    requests: Arc<Mutex<Vec<Arc<AtomicU64>>>>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    listener: Option<JoinHandle<()>>,
}

impl DelayLink {
    /// Listens on a free loopback port and forwards each connection to `backend`.
    pub fn start(backend: SocketAddr, delay: Duration) -> Result<DelayLink> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the delay link")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let delays = Arc::new(Delays::default());
        let requests: Arc<Mutex<Vec<Arc<AtomicU64>>>> = Arc::default();
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let listener = {
            let (stop, delays, conns, threads) = (stop.clone(), delays.clone(), conns.clone(), threads.clone());
            let requests = requests.clone();
            std::thread::Builder::new().name("delay-link".into()).spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let server = match TcpStream::connect(backend) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("xtask netbench: the delay link cannot reach {backend}: {e}");
                            continue;
                        }
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let mut started = Vec::new();
                    let counter = Arc::new(AtomicU64::new(0));
                    requests.lock().expect("requests").push(counter.clone());
                    for (from, to, count) in [(&client, &server, Some(counter)), (&server, &client, None)] {
                        match (from.try_clone(), to.try_clone()) {
                            (Ok(from), Ok(to)) => started.extend(direction(from, to, delay, delays.clone(), count)),
                            _ => eprintln!("xtask netbench: cannot clone a link socket"),
                        }
                    }
                    threads.lock().expect("threads").extend(started);
                    conns.lock().expect("conns").extend([client, server]);
                }
            })?
        };
        Ok(DelayLink {
            addr,
            stop,
            delays,
            requests,
            conns,
            threads,
            listener: Some(listener),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The one-way delays achieved so far.
    pub fn delays(&self) -> &Delays {
        &self.delays
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.requests.lock().expect("requests").len()
    }

    /// SFTP requests the client of connection `i` (in the order accepted)
    /// has sent so far.
    pub fn requests(&self, i: usize) -> u64 {
        self.requests
            .lock()
            .expect("requests")
            .get(i)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// Counts SFTP packets in a byte stream: each is a 4-byte big-endian
/// length followed by that many bytes.
#[derive(Default)]
struct PacketCounter {
    /// Bytes of the current packet's body still to come.
    left: u64,
    /// Bytes of a length prefix read so far.
    head: Vec<u8>,
}

impl PacketCounter {
    /// Feeds `bytes`; returns how many packets started in them.
    fn feed(&mut self, mut bytes: &[u8]) -> u64 {
        let mut started = 0;
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = (self.left as usize).min(bytes.len());
                self.left -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let need = 4 - self.head.len();
            let n = need.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.head.len() == 4 {
                let len = u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]);
                self.head.clear();
                self.left = u64::from(len);
                started += 1;
            }
        }
        started
    }
}

/// The two threads of one direction: a reader that stamps and queues
/// chunks, and a writer that sends each at its due time.
fn direction(
    mut from: TcpStream,
    mut to: TcpStream,
    delay: Duration,
    delays: Arc<Delays>,
    count: Option<Arc<AtomicU64>>,
) -> Vec<JoinHandle<()>> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader = std::thread::Builder::new().name("link-read".into()).spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        let mut packets = PacketCounter::default();
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(c) = &count {
                        c.fetch_add(packets.feed(&buf[..n]), Ordering::Relaxed);
                    }
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `tx` ends the writer once it has sent what is queued.
    });
    let writer = std::thread::Builder::new().name("link-write".into()).spawn(move || {
        while let Ok((at, chunk)) = rx.recv() {
            let due = at + delay;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            delays.record(at.elapsed());
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        // The sender is done: pass the end of stream on.
        let _ = to.shutdown(Shutdown::Write);
    });
    [reader, writer].into_iter().filter_map(|t| t.ok()).collect()
}

impl Drop for DelayLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr); // Wakes the accept loop.
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
        for c in self.conns.lock().expect("conns").drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        for t in self.threads.lock().expect("threads").drain(..) {
            let _ = t.join();
        }
    }
}
