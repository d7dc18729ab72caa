//! Whether a filesystem of the source is close to the blocks it reserves
//! for root, read at most every [`FRESH_FOR`] per filesystem.
//!
//! A write runs as the daemon (root). A filesystem such as ext4 lets root
//! write into the blocks it reserves for root, deciding by the writer's
//! filesystem uid, so a user's write through the mount could use them
//! when the unprivileged space runs out. Switching the filesystem uid to
//! the writer's for every write costs about 10 µs on this machine's
//! kernel (two credential changes each way, measured on a 4 KiB write as
//! another user: 32-41 µs without, 45-55 µs with). Far from the reserve,
//! a write lands in unreserved blocks whoever writes it, so the switch is
//! needed only when the space a user may still write is below
//! [`LOW`]: more than the writes a mount can make before the next
//! `fstatfs` ([`FRESH_FOR`] at a few GB/s).

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::sys;

/// Below this many bytes left to unprivileged writers, writes run with
/// the writer's filesystem uid.
pub const LOW: u64 = 1 << 30;

/// How long one reading of a filesystem's free space is used.
pub const FRESH_FOR: Duration = Duration::from_millis(10);

/// The last reading per filesystem (device).
#[derive(Debug, Default)]
pub struct Space {
    by_dev: Mutex<HashMap<u64, (bool, Instant)>>,
}

impl Space {
    /// Whether the filesystem `dev`, which holds `fd`, has less than
    /// [`LOW`] bytes left to unprivileged writers (or its free space
    /// cannot be read: then it is treated as low).
    pub fn low(&self, dev: u64, fd: BorrowedFd<'_>) -> bool {
        let now = Instant::now();
        if let Some(&(low, at)) = self.by_dev.lock().get(&dev)
            && now.duration_since(at) < FRESH_FOR
        {
            return low;
        }
        let low = sys::available_bytes(fd).map_or(true, |b| b < LOW);
        self.by_dev.lock().insert(dev, (low, now));
        low
    }
}
