//! FUSE over io_uring (kernel ABI 7.42, Linux 6.14+; an rcufs addition,
//! see PATCHES.md).
//!
//! # Why
//! Over `/dev/fuse`, every request wakes a worker sleeping in `read(2)`,
//! which may run on any CPU, and every reply wakes the caller again: two
//! wake-ups, usually across CPUs. With io_uring the kernel keeps one
//! queue per CPU and puts a request on the queue of the CPU its caller
//! runs on; that queue's thread is pinned to the same CPU, so the request
//! and its reply stay on one CPU (no inter-processor wake-up, no idle CPU
//! to bring out of halt).
//!
//! # Protocol (the kernel's `fs/fuse/dev_uring.c`)
//! - INIT must ask for `FUSE_OVER_IO_URING`; the kernel offers it only
//!   while the `fuse` module's `enable_uring` parameter is set.
//! - After the INIT reply, each queue (one per possible CPU) registers
//!   entries with `FUSE_IO_URING_CMD_REGISTER` (`IORING_OP_URING_CMD` on
//!   the `/dev/fuse` descriptor, 128-byte SQEs; the SQE's `addr`/`len`
//!   give two buffers: a header area and a payload buffer at least the
//!   connection's largest request). Until every queue has an entry the
//!   kernel holds new requests back; a failed REGISTER turns io_uring off
//!   for the connection and `/dev/fuse` serves everything.
//! - A request completes the entry's command: the header area holds the
//!   `fuse_in_header` (`in_out`), the operation's own header (`op_in`,
//!   the request's first argument) and the commit id and payload length
//!   (`ring_ent_in_out`); the payload buffer the other arguments. The
//!   operation header's length is `len - sizeof(fuse_in_header) -
//!   payload_sz`, so the request is rebuilt in the `/dev/fuse` layout and
//!   parsed as one.
//! - The reply goes back in the same entry: `fuse_out_header` in
//!   `in_out`, the reply's arguments in the payload buffer, their length
//!   in `ring_ent_in_out.payload_sz`; `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`
//!   with the commit id sends it and makes the entry wait for the next
//!   request, in one SQE.
//! - FORGET, INTERRUPT and notifications still use `/dev/fuse`, so its
//!   workers keep running beside the queues.
//!
//! # Invariants
//! - An entry belongs to exactly one party at a time: the kernel from
//!   the SQE's submission to its completion; then the queue's thread
//!   while it rebuilds the request; then the request's reply (one
//!   `ChannelSender` holding the entry) until it commits. So its buffers
//!   are never read and written at once.
//! - The submission queue is only touched under `Queue::sq`; the
//!   completion queue only by the queue's own thread.
//! - Only the queue's own thread submits a `COMMIT_AND_FETCH`: the fetch
//!   half stays in flight until the next request, and io_uring cancels
//!   the requests a thread submitted when that thread exits, which would
//!   lose the entry. A reply from another thread (a deferred answer) goes
//!   to `Queue::foreign` and wakes the queue's thread through its `wake`
//!   eventfd (a plain write, no submission); the queue's thread moves it
//!   to the submission queue when it next enters the kernel.
//! - The buffers and the iovecs of REGISTER live as long as the queue,
//!   and the kernel writes into an entry's buffers only in the context of
//!   the thread that submitted its command (the fetch completes as task
//!   work of that thread, a commit inside its `io_uring_enter`). The queue
//!   is freed only after its thread has ended: the thread holds an `Arc`
//!   of it, and `Session::run` stops and joins the queue threads before it
//!   drops the ring. A thread that exits has its commands cancelled by
//!   io_uring, so nothing writes into the buffers after it. (Closing the
//!   ring's descriptor alone would cancel them asynchronously, which is
//!   why the join comes first.) This rests on how io_uring completes
//!   `URING_CMD`s, which its documentation does not promise.

use std::alloc::Layout;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use log::{debug, warn};
use parking_lot::Mutex;

use crate::dev_fuse::DevFuse;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out[128]`, `op_in[128]`, then
/// `struct fuse_uring_ent_in_out` (flags, commit_id: u64; payload_sz: u32;
/// padding: u32; reserved: u64).
const IN_OUT: usize = 0;
const OP_IN: usize = 128;
const OP_IN_LEN: usize = 128;
const ENT_COMMIT_ID: usize = 256 + 8;
const ENT_PAYLOAD_SZ: usize = 256 + 16;
const HEADER_LEN: usize = 256 + 32;
/// The header area as allocated (a page, as libfuse does).
const HEADER_ALLOC: usize = 4096;
/// `sizeof(struct fuse_in_header)`, `sizeof(struct fuse_out_header)`.
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// Entries per queue.
const QUEUE_DEPTH: usize = 8;
/// The completion that says the queue should stop.
const STOP: u64 = u64::MAX;
/// The completion that says another thread left a reply in `foreign`.
const WAKE: u64 = u64::MAX - 1;

/// A page-aligned buffer the kernel reads and writes through an entry.
struct Buf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Buf {
    fn new(len: usize) -> io::Result<Buf> {
        let layout = Layout::from_size_align(len, 4096).map_err(io::Error::other)?;
        // SAFETY: `layout` has a non-zero size (both callers pass at least
        // a page).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(Buf { ptr, layout })
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated in `Buf::new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// One ring entry: its two buffers and the iovecs REGISTER points at.
struct Ent {
    header: Buf,
    payload: Buf,
    iov: Box<[libc::iovec; 2]>,
    /// The command last submitted for it and its commit id (resubmitted
    /// after EINTR).
    last_cmd: AtomicU32,
    last_commit: AtomicU64,
}

/// One per-CPU queue: its io_uring and entries.
pub(crate) struct Queue {
    qid: u16,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Serializes use of the submission queue.
    sq: Mutex<()>,
    ents: Vec<Ent>,
    payload_len: usize,
    stop: std::fs::File,
    /// Written by another thread after it left a reply in `foreign`.
    wake: std::fs::File,
    /// Replies (`COMMIT_AND_FETCH` SQEs) from other threads, for the
    /// queue's own thread to submit (module docs, "Invariants").
    foreign: Mutex<Foreign>,
}

/// Other threads' replies waiting for the queue's thread.
#[derive(Default)]
struct Foreign {
    sqes: Vec<squeue::Entry128>,
    /// The queue's thread has ended: nobody would submit them.
    closed: bool,
}

std::thread_local! {
    /// The queue this thread serves (`serve`), if any: its own commits are
    /// submitted when it next enters the kernel, not one by one.
    static SERVING: std::cell::Cell<*const Queue> = const { std::cell::Cell::new(std::ptr::null()) };
}

// SAFETY: the raw buffers are handed between the kernel, the queue's
// thread and a reply by the ring protocol (module docs, "Invariants"):
// one party uses an entry at a time, and each hand-over is a system call
// or a channel send, which orders the accesses.
unsafe impl Send for Queue {}
// SAFETY: as for `Send`; shared access to the SQ goes through `sq`.
unsafe impl Sync for Queue {}

/// Where a reply goes: an entry of a queue, with its request's commit id.
/// Clones share one `taken` flag: the entry is committed at most once
/// (a second send is an error, not a second write into the entry).
#[derive(Clone)]
pub(crate) struct RingSlot {
    queue: Arc<Queue>,
    ent: usize,
    commit_id: u64,
    taken: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for RingSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RingSlot(q{} e{} c{})", self.queue.qid, self.ent, self.commit_id)
    }
}

impl RingSlot {
    fn new(queue: Arc<Queue>, ent: usize, commit_id: u64) -> RingSlot {
        RingSlot {
            queue,
            ent,
            commit_id,
            taken: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Answers the request with `-errno` alone (one that could not be
    /// parsed or dispatched), so that neither its caller nor the entry is
    /// left waiting.
    pub(crate) fn fail(&self, unique: u64, errno: i32) {
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        if let Err(e) = self.send(&[IoSlice::new(&h)]) {
            log::error!("io_uring queue {}: an error reply could not be sent: {e}", self.queue.qid);
        }
    }

    /// Sends a reply (`fuse_out_header` then the arguments, as for
    /// `/dev/fuse`) through the entry and fetches its next request.
    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        // Relaxed: the flag only elects the one sender; the entry's bytes
        // are handed to the kernel by the submission that follows.
        if self.taken.swap(true, Ordering::Relaxed) {
            return Err(io::Error::other("a second reply to one io_uring request"));
        }
        let q = &self.queue;
        let ent = &q.ents[self.ent];
        let mut header = [0u8; OUT_HEADER];
        let mut got = 0;
        let mut payload = 0usize;
        for b in bufs {
            let mut b: &[u8] = b;
            if got < OUT_HEADER {
                let n = (OUT_HEADER - got).min(b.len());
                header[got..got + n].copy_from_slice(&b[..n]);
                got += n;
                b = &b[n..];
            }
            if b.is_empty() {
                continue;
            }
            if payload + b.len() > q.payload_len {
                // Cannot happen for replies the kernel asked for (their
                // size is bounded by the request); answer EIO.
                warn!("io_uring reply of {} bytes exceeds the payload buffer", payload + b.len());
                header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
                payload = 0;
                break;
            }
            // SAFETY: the entry belongs to this reply (module docs), and
            // the range is within the payload buffer (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), ent.payload.ptr.as_ptr().add(payload), b.len());
            }
            payload += b.len();
        }
        if got < OUT_HEADER {
            return Err(io::Error::other("reply without a header"));
        }
        // SAFETY: as above; the header area is HEADER_ALLOC bytes.
        unsafe {
            let h = ent.header.ptr.as_ptr();
            std::ptr::copy_nonoverlapping(header.as_ptr(), h.add(IN_OUT), OUT_HEADER);
            std::ptr::write_unaligned(h.add(ENT_PAYLOAD_SZ).cast::<u32>(), payload as u32);
        }
        q.submit(self.ent, CMD_COMMIT_AND_FETCH, self.commit_id)
    }
}

impl Queue {
    fn new(qid: u16, dev: &DevFuse, payload_len: usize) -> io::Result<Queue> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize((QUEUE_DEPTH as u32 + 2) * 2)
            .build(QUEUE_DEPTH as u32 + 2)?;
        ring.submitter().register_files(&[dev.as_raw_fd()])?;
        let mut ents = Vec::with_capacity(QUEUE_DEPTH);
        for _ in 0..QUEUE_DEPTH {
            let header = Buf::new(HEADER_ALLOC)?;
            let payload = Buf::new(payload_len.next_multiple_of(4096))?;
            let iov = Box::new([
                libc::iovec {
                    iov_base: header.ptr.as_ptr().cast(),
                    iov_len: HEADER_LEN,
                },
                libc::iovec {
                    iov_base: payload.ptr.as_ptr().cast(),
                    iov_len: payload_len,
                },
            ]);
            ents.push(Ent {
                header,
                payload,
                iov,
                last_cmd: AtomicU32::new(CMD_REGISTER),
                last_commit: AtomicU64::new(0),
            });
        }
        Ok(Queue {
            qid,
            ring,
            sq: Mutex::new(()),
            ents,
            payload_len,
            stop: eventfd()?,
            wake: eventfd()?,
            foreign: Mutex::new(Foreign::default()),
        })
    }

    /// The SQE of `cmd` for entry `ent`.
    fn sqe(&self, ent: usize, cmd: u32, commit_id: u64) -> squeue::Entry128 {
        // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 pad[6]; }
        let mut data = [0u8; 80];
        data[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        data[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let mut op = opcode::UringCmd80::new(types::Fixed(0), cmd).cmd(data);
        if cmd == CMD_REGISTER {
            op = op.addr(Some(self.ents[ent].iov.as_ptr() as u64));
        }
        let e = op.build().user_data(ent as u64);
        if cmd != CMD_REGISTER {
            return e;
        }
        // REGISTER also needs `sqe->len` = 2 (the iovec count), which the
        // builder does not set: the SQE is `struct io_uring_sqe` (len at
        // byte 24) followed by 64 bytes of command.
        const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
        // SAFETY: `Entry128` is a `repr(C)` wrapper of the 128-byte SQE,
        // `struct io_uring_sqe` and its 64-byte command: integers and
        // unions of integers with no padding, and the builder starts from a
        // zeroed value, so every one of its 128 bytes is initialized and
        // reading them as `[u8; 128]` is sound.
        let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
        raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
        // SAFETY: the same layout the other way: any 128 bytes are a valid
        // value of those integers.
        unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
    }

    /// Pushes `cmd` for `ent` (see [`Queue::push`]).
    fn submit(&self, ent: usize, cmd: u32, commit_id: u64) -> io::Result<()> {
        self.ents[ent].last_cmd.store(cmd, Ordering::Relaxed);
        self.ents[ent].last_commit.store(commit_id, Ordering::Relaxed);
        self.push(&self.sqe(ent, cmd, commit_id))
    }

    /// Pushes `sqe`, to be submitted by the queue's own thread when it
    /// next enters the kernel ([`Queue::enter`]). From another thread it
    /// goes to `foreign` and the queue's thread is woken (module docs).
    fn push(&self, sqe: &squeue::Entry128) -> io::Result<()> {
        let own = SERVING.with(|s| std::ptr::eq(s.get(), self));
        if !own {
            {
                let mut f = self.foreign.lock();
                if f.closed {
                    return Err(io::Error::other(format!("io_uring queue {} has stopped", self.qid)));
                }
                f.sqes.push(sqe.clone());
            }
            // Nonblocking: a counter at its maximum is already readable.
            return match std::io::Write::write(&mut &self.wake, &1u64.to_ne_bytes()) {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
                _ => Ok(()),
            };
        }
        self.push_own(sqe)
    }

    /// Pushes `sqe` into the submission queue (the queue's own thread).
    fn push_own(&self, sqe: &squeue::Entry128) -> io::Result<()> {
        let _g = self.sq.lock();
        // SAFETY: the submission queue is only used under `sq`.
        let mut sq = unsafe { self.ring.submission_shared() };
        // SAFETY: an SQE's buffers (an entry's iovecs) live as long as the
        // queue, which outlives the ring's commands.
        if unsafe { sq.push(sqe) }.is_err() {
            return Err(io::Error::other("io_uring submission queue full"));
        }
        sq.sync();
        Ok(())
    }

    /// The queue's own thread: submits what it pushed, and with `wait`
    /// waits for a completion (EINTR is not an error).
    fn enter(&self, wait: bool) -> io::Result<()> {
        // Other threads' replies first: their woken completion may be the
        // one this thread is about to wait for.
        let foreign = std::mem::take(&mut self.foreign.lock().sqes);
        for (i, sqe) in foreign.iter().enumerate() {
            if let Err(e) = self.push_own(sqe) {
                // Kept for the next time round rather than lost.
                self.foreign.lock().sqes.splice(0..0, foreign[i..].iter().cloned());
                return Err(e);
            }
        }
        // Everything in the submission queue that the kernel has not
        // taken yet (after a short submit too).
        let pending = {
            let _g = self.sq.lock();
            // SAFETY: the submission queue is only used under `sq`.
            unsafe { self.ring.submission_shared() }.len() as u32
        };
        if pending == 0 && !wait {
            return Ok(());
        }
        let (min, flags) = if wait { (1, 1 /* IORING_ENTER_GETEVENTS */) } else { (0, 0) };
        // SAFETY: no argument (signal mask or timeout) is passed.
        match unsafe { self.ring.submitter().enter::<libc::sigset_t>(pending, min, flags, None) } {
            Err(e) if e.raw_os_error() != Some(libc::EINTR) => Err(e),
            _ => Ok(()),
        }
    }
}

/// The ring: one queue per possible CPU, each with a thread pinned to it.
pub(crate) struct Ring {
    pub(crate) queues: Vec<Arc<Queue>>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ring({} queues)", self.queues.len())
    }
}

/// A new eventfd (nonblocking, close-on-exec).
fn eventfd() -> io::Result<std::fs::File> {
    // SAFETY: eventfd(2) with valid flags; the descriptor is owned by the
    // File below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `efd` is a new descriptor nobody else owns.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(efd) })
}

/// The number of possible CPUs, as the kernel counts its queues
/// (`num_possible_cpus()`; the kernel maps a caller's CPU number to the
/// queue of that number, so the mask has no gaps where this works at all).
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0usize;
    for part in s.trim().split(',') {
        let mut ends = part.splitn(2, '-').map(|x| x.parse::<usize>().map_err(io::Error::other));
        let first = ends.next().ok_or_else(|| io::Error::other("empty CPU range"))??;
        let last = ends.next().transpose()?.unwrap_or(first);
        n += last.saturating_sub(first) + 1;
    }
    Ok(n)
}

impl Ring {
    pub(crate) fn new(dev: &DevFuse, payload_len: usize) -> io::Result<Ring> {
        let n = possible_cpus()?;
        let queues = (0..n)
            .map(|q| Queue::new(q as u16, dev, payload_len).map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Ring { queues })
    }

    /// Wakes every queue's thread to stop.
    pub(crate) fn stop(&self) {
        for q in &self.queues {
            let _ = std::io::Write::write(&mut &q.stop, &1u64.to_ne_bytes());
        }
    }
}

/// What a queue's thread does with each request: parse and dispatch it,
/// replying through the given slot.
pub(crate) trait Dispatch {
    fn dispatch(&self, data: &[u8], slot: RingSlot);
}

/// A queue's thread: pins itself to the queue's CPU, registers the
/// entries, then serves requests until the connection ends or `stop`.
/// Once it ends, other threads' replies to the queue are refused.
pub(crate) fn serve(queue: Arc<Queue>, idle: bool, d: &impl Dispatch) -> io::Result<()> {
    let r = serve_queue(&queue, idle, d);
    let mut f = queue.foreign.lock();
    f.closed = true;
    if !f.sqes.is_empty() {
        debug!("io_uring queue {}: {} replies from other threads not sent (it stopped)", queue.qid, f.sqes.len());
    }
    r
}

fn serve_queue(queue: &Arc<Queue>, idle: bool, d: &impl Dispatch) -> io::Result<()> {
    SERVING.with(|s| s.set(Arc::as_ptr(queue)));
    // A CPU beyond what a `cpu_set_t` holds (1024) cannot be named in one
    // (libc's `CPU_SET` would panic, outside any handler's unwinding guard,
    // and the mount would wait for this queue forever): its queue is served
    // unpinned.
    if (queue.qid as usize) < libc::CPU_SETSIZE as usize {
        // SAFETY: a zeroed cpu_set_t is valid; the CPU index is below
        // CPU_SETSIZE, checked above.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(queue.qid as usize, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                debug!("io_uring queue {}: not pinned: {}", queue.qid, io::Error::last_os_error());
            }
        }
    } else {
        debug!("io_uring queue {}: not pinned: beyond CPU_SETSIZE", queue.qid);
    }
    for e in 0..queue.ents.len() {
        queue.submit(e, CMD_REGISTER, 0)?;
    }
    let poll = |fd: &std::fs::File, ud: u64| {
        squeue::Entry128::from(
            opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(ud),
        )
    };
    queue.push(&poll(&queue.stop, STOP))?;
    queue.push(&poll(&queue.wake, WAKE))?;
    // The registrations go in at normal priority: the kernel holds every
    // request of the mount back until each queue has registered, which a
    // SCHED_IDLE thread on a busy CPU might not get to do for a long time.
    if idle {
        queue.enter(false)?;
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler(2) of this thread with a valid param.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) } != 0 {
            warn!("io_uring queue {}: SCHED_IDLE refused: {}", queue.qid, io::Error::last_os_error());
        }
    }
    let mut buf = vec![0u8; IN_HEADER + OP_IN_LEN + queue.payload_len];
    let mut lost = 0;
    let mut done = Vec::with_capacity(QUEUE_DEPTH + 1);
    loop {
        queue.enter(true)?;
        done.clear();
        {
            // SAFETY: only this thread uses the completion queue.
            let mut cq = unsafe { queue.ring.completion_shared() };
            cq.sync();
            done.extend((&mut cq).map(|c| (c.user_data(), c.result())));
        }
        for (i, &(ud, res)) in done.iter().enumerate() {
            // This thread's own replies wait in the submission queue until
            // it next enters the kernel; with more requests of the batch
            // to handle (one of which may be slow), send them now.
            if i > 0 {
                queue.enter(false)?;
            }
            if ud == STOP {
                return Ok(());
            }
            if ud == WAKE {
                // Another thread's reply waits in `foreign`: `enter` moves
                // it. Read the counter back to zero and watch again (a
                // write in between makes the new poll complete at once).
                let mut count = [0u8; 8];
                let _ = std::io::Read::read(&mut &queue.wake, &mut count);
                queue.push(&poll(&queue.wake, WAKE))?;
                continue;
            }
            let ent = ud as usize;
            if res == -libc::EINTR || res == -libc::EAGAIN {
                let e = &queue.ents[ent];
                let (cmd, commit) = (e.last_cmd.load(Ordering::Relaxed), e.last_commit.load(Ordering::Relaxed));
                queue.submit(ent, cmd, commit)?;
                continue;
            }
            if res < 0 {
                match -res {
                    // The connection is going away (unmount, abort).
                    libc::ENOTCONN | libc::ENODEV | libc::ECANCELED | libc::ECONNABORTED => return Ok(()),
                    // A failed REGISTER turns io_uring off for the whole
                    // connection: the kernel serves it through /dev/fuse.
                    e if queue.ents[ent].last_cmd.load(Ordering::Relaxed) == CMD_REGISTER => {
                        log::error!(
                            "FUSE over io_uring: queue {} could not register ({}); the kernel serves the mount \
                             through /dev/fuse",
                            queue.qid,
                            io::Error::from_raw_os_error(e)
                        );
                        return Ok(());
                    }
                    // Anything else fails this entry only: the queue goes
                    // on with the others (ending the thread would leave
                    // the CPU's requests unserved).
                    e => {
                        log::error!(
                            "io_uring queue {}: entry {ent} failed: {}; {} entries left",
                            queue.qid,
                            io::Error::from_raw_os_error(e),
                            queue.ents.len() - 1 - lost
                        );
                        lost += 1;
                        if lost == queue.ents.len() {
                            return Err(io::Error::from_raw_os_error(e));
                        }
                        continue;
                    }
                }
            }
            // SAFETY: the entry's header was written by the kernel before
            // the completion; the commit id and the request's unique id
            // (in `fuse_in_header`) are at fixed offsets.
            let (commit_id, unique) = unsafe {
                let h = queue.ents[ent].header.ptr.as_ptr();
                (
                    std::ptr::read_unaligned(h.add(ENT_COMMIT_ID).cast::<u64>()),
                    std::ptr::read_unaligned(h.add(IN_OUT + 8).cast::<u64>()),
                )
            };
            let slot = RingSlot::new(queue.clone(), ent, commit_id);
            let Some(len) = rebuild(queue, ent, &mut buf) else {
                warn!("io_uring queue {}: malformed request answered EIO", queue.qid);
                slot.fail(unique, libc::EIO);
                continue;
            };
            let unanswered = slot.clone();
            let dispatched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.dispatch(&buf[..len], slot)));
            if dispatched.is_err() {
                // The reply (if any was made) was dropped on the unwind,
                // which answers EIO; if not, answer here. A second answer
                // is refused by the slot, so this is safe either way.
                log::error!("io_uring queue {}: a request's dispatch panicked", queue.qid);
                if !unanswered.taken.load(Ordering::Relaxed) {
                    unanswered.fail(unique, libc::EIO);
                }
            }
        }
    }
}

/// Rebuilds entry `ent`'s request in the `/dev/fuse` layout in `buf`;
/// returns its length, or None if the lengths do not add up.
fn rebuild(queue: &Queue, ent: usize, buf: &mut [u8]) -> Option<usize> {
    let e = &queue.ents[ent];
    let h = e.header.ptr.as_ptr();
    // SAFETY: the entry belongs to this thread between its completion and
    // its dispatch (module docs); every read is within HEADER_ALLOC.
    let (len, payload_sz) = unsafe {
        std::ptr::copy_nonoverlapping(h.add(IN_OUT), buf.as_mut_ptr(), IN_HEADER);
        (
            std::ptr::read_unaligned(h.add(IN_OUT).cast::<u32>()) as usize,
            std::ptr::read_unaligned(h.add(ENT_PAYLOAD_SZ).cast::<u32>()) as usize,
        )
    };
    let op_len = len.checked_sub(IN_HEADER)?.checked_sub(payload_sz)?;
    if op_len > OP_IN_LEN || payload_sz > queue.payload_len || len > buf.len() {
        return None;
    }
    // SAFETY: as above; the lengths were checked against the buffers.
    unsafe {
        std::ptr::copy_nonoverlapping(h.add(OP_IN), buf.as_mut_ptr().add(IN_HEADER), op_len);
        std::ptr::copy_nonoverlapping(e.payload.ptr.as_ptr(), buf.as_mut_ptr().add(IN_HEADER + op_len), payload_sz);
    }
    Some(len)
}
