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
//! `/proc/self/task/*/stat` and `schedstat`) and keeps, per thread, what
//! it lost to waiting for its CPU over the last [`WINDOW`] ([`Losses`]).
//! A thread that lost at least [`STALL`] in that window, at least
//! [`MEAN_WAIT`] per time it got the CPU, is starved, and is moved to
//! `SCHED_OTHER` for a cooling period ([`FIRST_COOL`], doubled at each
//! starvation within [`FORGET_AFTER`] of the last one, at most
//! [`MAX_COOL`]), then back to `SCHED_IDLE`. Both bounds matter: starved
//! requests each wait milliseconds (on two busy CPUs about 11 ms, so a
//! rule that waits for one unbroken [`STALL`] of waiting may never fire),
//! while a queue thread serving a hot caller waits microseconds many
//! thousand times a second (its lost time adds up, its mean does not). A
//! queue thread preempted by a caller that computes for longer than
//! [`MEAN_WAIT`] between requests looks starved too; it then runs as under
//! `--io-uring on` for a while, which costs that caller nothing it would
//! notice.
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

/// How far back a queue thread's waiting for its CPU is summed.
pub const WINDOW: Duration = Duration::from_millis(100);
/// The waiting within [`WINDOW`] that can make a queue thread starved.
pub const STALL: Duration = Duration::from_millis(20);
/// The mean wait per time the thread got its CPU, within [`WINDOW`], that
/// makes it starved (with [`STALL`]): a queue thread beside a hot caller
/// on an otherwise idle CPU waits a few microseconds each time.
pub const MEAN_WAIT: Duration = Duration::from_millis(1);
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
    /// What it lost to waiting for its CPU lately.
    losses: Losses,
    /// Whether raising it was refused (said once).
    refused: bool,
    /// Until when it runs at normal priority.
    boosted_until: Option<Instant>,
    /// The cooling period of its next boost.
    cool: Duration,
    /// When it was last boosted.
    last_boost: Option<Instant>,
}

/// One sample of a thread: `stat`'s state and `schedstat`'s three fields.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sample {
    /// Running or waiting for a CPU.
    runnable: bool,
    /// CPU time (ns).
    ran: u64,
    /// Time spent waiting for a CPU (ns); the kernel adds a wait when
    /// the wait ends, that is when the thread gets the CPU.
    waited: u64,
    /// How many times it got a CPU.
    runs: u64,
}

fn sample(tid: i32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let state = stat[stat.rfind(')')? + 2..].chars().next()?;
    let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = sched.split_whitespace().map(|v| v.parse().ok());
    Some(Sample {
        runnable: state == 'R',
        ran: f.next()??,
        waited: f.next()??,
        runs: f.next()??,
    })
}

/// What one thread lost to waiting for its CPU over the last [`WINDOW`],
/// from its samples; decides whether it is starved.
#[derive(Debug, Default)]
struct Losses {
    /// The last sample and when it was taken.
    last: Option<(Instant, Sample)>,
    /// Waiting already counted (runnable at two samples without running
    /// in between) that the kernel has not yet added to `waited`: it adds
    /// it when the thread gets the CPU, and it must not count twice.
    pending: u64,
    /// Per sample within [`WINDOW`]: when, ns lost, times it got the CPU.
    recent: std::collections::VecDeque<(Instant, u64, u64)>,
}

impl Losses {
    /// Takes a sample; says whether the thread is starved, with what it
    /// lost within [`WINDOW`] and how many times it got the CPU there (a
    /// wait still going counts as one): starved if it lost at least
    /// [`STALL`], and at least [`MEAN_WAIT`] per time.
    fn observe(&mut self, now: Instant, s: Sample) -> Option<(Duration, u64)> {
        let (at, last) = self.last.replace((now, s))?;
        let span = now.saturating_duration_since(at).as_nanos() as u64;
        let (lost, runs) = if s.runs != last.runs || s.ran != last.ran {
            // It got its CPU: the kernel has added the waits that ended.
            let lost = (s.waited.saturating_sub(last.waited)).saturating_sub(self.pending);
            self.pending = 0;
            (lost, s.runs.saturating_sub(last.runs))
        } else if s.runnable && last.runnable {
            // Runnable at both samples and not run in between: waiting
            // the whole time (a thread runs before it can sleep).
            self.pending += span;
            (span, 0)
        } else {
            (0, 0)
        };
        self.recent.push_back((now, lost, runs));
        while self
            .recent
            .front()
            .is_some_and(|&(t, ..)| now.duration_since(t) > WINDOW)
        {
            self.recent.pop_front();
        }
        let (lost, runs) = self
            .recent
            .iter()
            .fold((0u64, u64::from(self.pending > 0)), |(l, r), &(_, dl, dr)| {
                (l + dl, r + dr)
            });
        let lost = Duration::from_nanos(lost);
        (lost >= STALL && lost >= MEAN_WAIT * u32::try_from(runs.max(1)).unwrap_or(u32::MAX)).then_some((lost, runs))
    }

    /// Forgets the losses so far (after a boost; the next sample starts
    /// afresh from the current one).
    fn forget(&mut self) {
        self.recent.clear();
        self.pending = 0;
    }
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
            let Some(sample) = sample(tid) else {
                listed = None;
                continue;
            };
            let q = queues.entry(tid).or_insert_with(|| Queue {
                losses: Losses::default(),
                refused: false,
                boosted_until: None,
                cool: FIRST_COOL,
                last_boost: None,
            });
            busy |= sample.runnable;
            let starved = q.losses.observe(now, sample);
            if let Some(until) = q.boosted_until {
                if now >= until {
                    q.boosted_until = None;
                    q.losses.forget();
                    if let Err(e) = set_policy(tid, libc::SCHED_IDLE) {
                        tracing::warn!(tid, "io_uring guard: back to SCHED_IDLE refused: {e}");
                    }
                }
            } else if let Some((lost, runs)) = starved {
                if q.last_boost.is_some_and(|t| now.duration_since(t) > FORGET_AFTER) {
                    q.cool = FIRST_COOL;
                }
                match set_policy(tid, libc::SCHED_OTHER) {
                    Ok(()) => {
                        tracing::info!(
                            tid,
                            lost_ms = lost.as_millis() as u64,
                            runs,
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
                q.losses.forget();
            }
        }
        std::thread::sleep(if busy { BUSY_TICK } else { IDLE_TICK });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds `samples` (taken every `tick`) to fresh `Losses`; returns the
    /// index of the first sample that finds the thread starved.
    fn first_starved(tick: Duration, samples: &[Sample]) -> Option<usize> {
        let mut l = Losses::default();
        let t0 = Instant::now();
        samples
            .iter()
            .enumerate()
            .position(|(i, &s)| l.observe(t0 + tick * i as u32, s).is_some())
    }

    /// Builds samples from per-tick steps: (runnable at the sample, ns
    /// run, ns of ended waits added, times it got the CPU).
    fn samples(steps: impl IntoIterator<Item = (bool, u64, u64, u64)>) -> Vec<Sample> {
        let mut s = Sample::default();
        steps
            .into_iter()
            .map(|(runnable, ran, waited, runs)| {
                s = Sample {
                    runnable,
                    ran: s.ran + ran,
                    waited: s.waited + waited,
                    runs: s.runs + runs,
                };
                s
            })
            .collect()
    }

    #[test]
    fn a_hot_queue_thread_that_waits_microseconds_thousands_of_times_is_not_starved() {
        // Every 5 ms: 2 ms of CPU over 1,000 runs, 1.5 ms of waiting
        // (30 % of the time, 1.5 µs a run).
        let s = samples((0..200).map(|i| (i % 2 == 0, 2 * MS, 3 * MS / 2, 1000)));
        assert_eq!(first_starved(BUSY_TICK, &s), None);
    }

    #[test]
    fn requests_that_each_wait_milliseconds_make_it_starved_though_no_wait_lasts_stall() {
        // Each request: runnable and not run at two samples, served after
        // a 10 ms wait (5 ms of it seen as pending), asleep for a sample:
        // 10 ms lost per request, no unbroken 20 ms.
        let s = samples((0..40).map(|i| match i % 4 {
            0 | 1 => (true, 0, 0, 0),
            2 => (false, MS / 10, 10 * MS, 1),
            _ => (false, 0, 0, 0),
        }));
        // Sample 0 only starts; request one loses 5 ms at 1 and 5 ms at
        // 2, request two the same at 5 and 6: 20 ms at sample 6 (at 5 if
        // the pending wait were counted twice).
        assert_eq!(first_starved(BUSY_TICK, &s), Some(6));
    }

    #[test]
    fn runnable_without_running_for_stall_is_starved() {
        let s = samples((0..10).map(|_| (true, 0, 0, 0)));
        // Samples 1..=4 each add 5 ms: 20 ms at sample 4.
        assert_eq!(first_starved(BUSY_TICK, &s), Some(4));
        // One idle-interval sample of 100 ms runnable is enough.
        assert_eq!(first_starved(IDLE_TICK, &s), Some(1));
    }

    #[test]
    fn one_wait_under_stall_or_waits_further_apart_than_the_window_are_not_starved() {
        // Two 15 ms waits 150 ms apart (sample 0 only starts).
        let quiet = (false, 0, 0, 0);
        let wait = (false, MS, 15 * MS, 1);
        let mut steps = vec![quiet, wait];
        steps.extend([quiet; 29]);
        steps.push(wait);
        steps.extend([quiet; 29]);
        assert_eq!(first_starved(BUSY_TICK, &samples(steps)), None);
        // 50 ms apart they are 30 ms within 100 ms: starved.
        let mut steps = vec![quiet, wait];
        steps.extend([quiet; 9]);
        steps.push(wait);
        assert_eq!(first_starved(BUSY_TICK, &samples(steps)), Some(11));
    }

    #[test]
    fn a_sleeping_thread_is_never_starved() {
        let s = samples((0..100).map(|_| (false, 0, 0, 0)));
        assert_eq!(first_starved(IDLE_TICK, &s), None);
    }

    #[test]
    fn forgetting_after_a_boost_starts_afresh() {
        let mut l = Losses::default();
        let t0 = Instant::now();
        let s = samples((0..12).map(|_| (true, 0, 0, 0)));
        assert!(l.observe(t0, s[0]).is_none());
        let mut at = Vec::new();
        for (i, &x) in s.iter().enumerate().skip(1) {
            if l.observe(t0 + BUSY_TICK * i as u32, x).is_some() {
                at.push(i);
                l.forget();
            }
        }
        // Starved at 4 and, counting afresh, at 8 (not at every sample).
        assert_eq!(at, [4, 8]);
    }
}
