//! A rate limit for log lines: an event that may repeat thousands of times a
//! second (a caller hammering a refused open) is logged at most once per
//! interval, and the line that is logged says how many were not.
//!
//! Lock-free: one compare-exchange decides which thread logs; the others add
//! to the suppressed count, which the next logged line takes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most one log line per interval.
#[derive(Debug)]
pub struct RateLimit {
    start: Instant,
    interval_ns: u64,
    /// Nanoseconds after `start` from which the next line may be logged.
    next: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// A limit of one line per `interval`; the first event is always logged.
    pub fn new(interval: Duration) -> Self {
        Self {
            start: Instant::now(),
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            next: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Records one event. `Some(n)`: log it now, saying that `n` events were
    /// suppressed since the last logged one; `None`: stay quiet (counted).
    pub fn allow(&self) -> Option<u64> {
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Relaxed);
        // Relaxed: the two counters are statistics; no other memory depends
        // on which thread wins.
        if now >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now.saturating_add(self.interval_ns),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_suppressed_count() {
        let r = RateLimit::new(Duration::from_millis(200));
        assert_eq!(r.allow(), Some(0));
        let quiet = (0..1000).filter(|_| r.allow().is_some()).count();
        assert_eq!(quiet, 0, "logged again within the interval");
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(r.allow(), Some(1000));
        assert_eq!(r.allow(), None);
    }

    #[test]
    fn concurrent_events_log_once_and_count_the_rest() {
        let r = std::sync::Arc::new(RateLimit::new(Duration::from_secs(3600)));
        // (lines logged, suppressed counts those lines reported) per thread
        let per_thread: Vec<(usize, u64)> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let logged: Vec<u64> = (0..10_000).filter_map(|_| r.allow()).collect();
                    (logged.len(), logged.iter().sum())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let logged: usize = per_thread.iter().map(|p| p.0).sum();
        let reported: u64 = per_thread.iter().map(|p| p.1).sum();
        assert_eq!(logged, 1);
        // Events other threads suppressed before the one line took the count
        // are reported by that line; the rest wait for the next. None is lost.
        assert_eq!(reported + r.suppressed.load(Ordering::Relaxed), 39_999);
    }
}
