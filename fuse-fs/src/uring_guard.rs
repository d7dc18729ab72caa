//! `--io-uring idle`: the guard that keeps `SCHED_IDLE` queue threads
//! from starving.
//!
//! # Why
//! With FUSE over io_uring the kernel puts a request on the queue of the
//! CPU its caller runs on, and that queue's thread is pinned there. When
//! the thread answers, the caller is woken while the thread still runs, so
//! the scheduler sends the caller to another, idle CPU: every round trip
//! then crosses CPUs, and on a virtual machine whose idle CPUs halt that
//! costs as much as `/dev/fuse` does (BENCHMARKS.md, "FUSE over
//! io_uring"). Under `SCHED_IDLE` the queue threads' CPU counts as idle,
//! the caller stays, and a round trip stays on one CPU. The price: a
//! `SCHED_IDLE` thread runs only when nothing else wants its CPU, so with
//! every CPU busy (a parallel build) each request waits for a scheduling
//! crumb: 1,000 `O_DIRECT` reads beside eight CPU-bound processes took
//! 10.9 s instead of 0.07 s.
//!
//! # What
//! A thread of normal priority samples the queue threads (`fuser-ring-N`,
//! `/proc/self/task/*/stat` and `schedstat`): a queue thread that was
//! runnable at the last sample and is still, without having run in
//! between, or has spent at least
//! [`WAITING`] of that time waiting for its CPU, sample after sample for
//! [`STALL`], is starved (the kernel adds to the waiting time only when the
//! thread gets the CPU, hence both),
//! and is moved to `SCHED_OTHER` for a cooling
//! period ([`FIRST_COOL`], doubled at each starvation within
//! [`FORGET_AFTER`] of the last one, at most [`MAX_COOL`]), then back to
//! `SCHED_IDLE`. A queue thread preempted by a caller that computes for
//! longer than [`STALL`] between requests looks starved too; it then runs
//! as under `--io-uring on` for a while, which costs that caller nothing
//! it would notice.
//!
//! # Invariants
//! - Only threads named `fuser-ring-*` of this process are touched.
//! - A queue thread at normal priority is not sampled for starvation.
//! - The guard samples every [`BUSY_TICK`] while a queue thread is
//!   runnable and every [`IDLE_TICK`] otherwise, and ends with the mount
//!   (its stop flag, or the queue threads gone after it saw them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a queue thread may spend mostly waiting for its CPU.
pub const STALL: Duration = Duration::from_millis(20);
/// The share of a sampling interval spent waiting for the CPU that counts
/// as starving (a busy caller that preempts the queue thread between its
/// requests makes it wait about half of the time).
pub const WAITING: f64 = 0.8;
/// The first cooling period at normal priority.
pub const FIRST_COOL: Duration = Duration::from_secs(1);
/// The longest cooling period.
pub const MAX_COOL: Duration = Duration::from_secs(30);
/// A starvation this long after the last one starts again at [`FIRST_COOL`].
pub const FORGET_AFTER: Duration = Duration::from_secs(60);
/// The sampling interval while a queue thread is runnable.
const BUSY_TICK: Duration = Duration::from_millis(5);
/// The sampling interval while every queue thread sleeps.
const IDLE_TICK: Duration = Duration::from_millis(100);
/// How often the queue threads are listed again.
const RELIST: Duration = Duration::from_secs(1);

/// What the guard knows of one queue thread.
#[derive(Debug)]
struct Queue {
    /// CPU time and time spent waiting for the CPU (ns, `schedstat`) at
    /// the last sample.
    ran: u64,
    waited: u64,
    /// Whether it was runnable at the last sample.
    runnable: bool,
    /// Whether raising it was refused (said once).
    refused: bool,
    /// When the last sample was taken.
    at: Instant,
    /// How long it has been starving, sample after sample.
    starving: Duration,
    /// Until when it runs at normal priority.
    boosted_until: Option<Instant>,
    /// The cooling period of its next boost.
    cool: Duration,
    /// When it was last boosted.
    last_boost: Option<Instant>,
}

/// One sample of a thread: whether it is runnable, its CPU time and the
/// time it has spent waiting for a CPU (ns; `schedstat`'s first two
/// fields).
fn sample(tid: i32) -> Option<(bool, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let state = stat[stat.rfind(')')? + 2..].chars().next()?;
    let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = sched.split_whitespace();
    let ran = f.next()?.parse().ok()?;
    let waited = f.next()?.parse().ok()?;
    Some((state == 'R', ran, waited))
}

/// The queue threads of this process.
fn queue_threads() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        comm.starts_with("fuser-ring-")
            .then(|| e.file_name().to_str()?.parse().ok())
            .flatten()
    })
    .collect()
}

/// Sets `tid`'s policy (priority 0).
fn set_policy(tid: i32, policy: libc::c_int) -> std::io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler(2) of a thread of this process with a
    // valid param; it touches no memory of ours but `p`.
    if unsafe { libc::sched_setscheduler(tid, policy, &p) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether this process may raise a thread from `SCHED_IDLE` back to
/// `SCHED_OTHER`, which the guard needs: root, `CAP_SYS_NICE`, or an
/// `RLIMIT_NICE` of 20 or more (sched(7)); dropping to `SCHED_IDLE` is
/// always allowed. Tried on a thread of its own, which ends.
pub fn can_raise() -> std::io::Result<()> {
    std::thread::spawn(|| {
        // SAFETY: gettid(2) has no preconditions.
        let tid = unsafe { libc::gettid() };
        set_policy(tid, libc::SCHED_IDLE)?;
        set_policy(tid, libc::SCHED_OTHER)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the probe thread panicked")))
}

/// The guard's loop; returns when `stop` is set or the queue threads are
/// gone after it saw them.
pub fn run(stop: &AtomicBool) {
    let mut queues: HashMap<i32, Queue> = HashMap::new();
    let mut seen = false;
    let mut tids = Vec::new();
    let mut listed = None::<Instant>;
    while !stop.load(Ordering::Relaxed) {
        // The queue threads are listed again every second (they are made
        // once, at the start of the session) or when one has gone.
        if listed.is_none_or(|t| t.elapsed() >= RELIST) {
            tids = queue_threads();
            listed = Some(Instant::now());
            if tids.is_empty() && seen {
                break;
            }
            seen |= !tids.is_empty();
            queues.retain(|t, _| tids.contains(t));
        }
        let now = Instant::now();
        let mut busy = false;
        for &tid in &tids {
            let Some((runnable, ran, waited)) = sample(tid) else {
                listed = None;
                continue;
            };
            let q = queues.entry(tid).or_insert_with(|| Queue {
                ran,
                waited,
                runnable: false,
                refused: false,
                at: now,
                starving: Duration::ZERO,
                boosted_until: None,
                cool: FIRST_COOL,
                last_boost: None,
            });
            busy |= runnable;
            let span = now.duration_since(q.at);
            // Runnable at both samples and not run in between: runnable
            // the whole time (a thread runs before it can sleep).
            let starved_now = !span.is_zero()
                && ((runnable && q.runnable && ran == q.ran)
                    || waited.saturating_sub(q.waited) as f64 >= WAITING * span.as_nanos() as f64);
            (q.ran, q.waited, q.runnable, q.at) = (ran, waited, runnable, now);
            if let Some(until) = q.boosted_until {
                if now >= until {
                    q.boosted_until = None;
                    if let Err(e) = set_policy(tid, libc::SCHED_IDLE) {
                        tracing::warn!(tid, "io_uring guard: back to SCHED_IDLE refused: {e}");
                    }
                }
            } else if starved_now {
                q.starving += span;
                if q.starving >= STALL {
                    if q.last_boost.is_some_and(|t| now.duration_since(t) > FORGET_AFTER) {
                        q.cool = FIRST_COOL;
                    }
                    match set_policy(tid, libc::SCHED_OTHER) {
                        Ok(()) => {
                            tracing::info!(
                                tid,
                                starving_ms = q.starving.as_millis() as u64,
                                normal_priority_secs = q.cool.as_secs_f64(),
                                "io_uring queue thread starved under SCHED_IDLE (its CPU is busy); \
                                 running it at normal priority for a while"
                            );
                            q.boosted_until = Some(now + q.cool);
                            q.last_boost = Some(now);
                            q.cool = (q.cool * 2).min(MAX_COOL);
                        }
                        // `can_raise` was checked before the mount: this is
                        // unexpected; said once per thread.
                        Err(e) if !q.refused => {
                            q.refused = true;
                            tracing::error!(
                                tid,
                                "io_uring guard: SCHED_OTHER refused: {e}; this queue thread may starve"
                            );
                        }
                        Err(_) => {}
                    }
                    q.starving = Duration::ZERO;
                }
            } else {
                q.starving = Duration::ZERO;
            }
        }
        std::thread::sleep(if busy { BUSY_TICK } else { IDLE_TICK });
    }
}
