//! The names a directory answered to the kernel as negative entries, kept
//! so that a drop can invalidate them (`fs/drop.rs`), within two bounds:
//! [`PER_DIR`] names per directory and [`TOTAL`] in the whole daemon.
//! Without the second, a user who can search many directories could make
//! the daemon keep up to `PER_DIR` names of up to 255 bytes for each of
//! them (about 1 MiB a directory) for as long as the directories stay
//! cached. A name not recorded for either bound is answered `ENOENT`
//! rather than as a negative entry, so that the kernel keeps nothing a
//! drop could not reach (`Fs::negative`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most names remembered per directory.
pub const PER_DIR: usize = 4096;
/// Most names remembered by the daemon, all directories together.
pub const TOTAL: usize = 1 << 18;

/// A count of remembered names and its bound.
#[derive(Debug)]
pub struct Budget {
    count: AtomicUsize,
    max: usize,
}

impl Budget {
    /// A budget of `max` names.
    pub const fn new(max: usize) -> Self {
        Self {
            count: AtomicUsize::new(0),
            max,
        }
    }

    /// Names remembered under this budget.
    #[cfg(test)]
    fn used(&self) -> usize {
        // Relaxed: a count; it orders nothing.
        self.count.load(Ordering::Relaxed)
    }
}

/// The daemon's budget (one daemon per process).
static DAEMON: Budget = Budget::new(TOTAL);

/// One directory's remembered names.
#[derive(Debug)]
pub struct KernelNegatives {
    names: HashSet<Box<[u8]>>,
    budget: &'static Budget,
}

impl Default for KernelNegatives {
    fn default() -> Self {
        Self::under(&DAEMON)
    }
}

impl KernelNegatives {
    /// An empty set counted against `budget`.
    pub fn under(budget: &'static Budget) -> Self {
        Self {
            names: HashSet::new(),
            budget,
        }
    }

    /// Remembers `name`, unless a bound is reached; whether it is
    /// remembered (now, or already).
    pub fn push(&mut self, name: &[u8]) -> bool {
        if self.names.contains(name) {
            return true;
        }
        if self.names.len() >= PER_DIR {
            return false;
        }
        // Relaxed: a count; it orders nothing. An add that went past the
        // bound is undone, so racing pushes pass it only for an instant.
        if self.budget.count.fetch_add(1, Ordering::Relaxed) >= self.budget.max {
            self.budget.count.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        self.names.insert(name.into());
        true
    }

    /// Remembers again names [`take`](Self::take)n from here, past the
    /// bounds if need be (they were within them when taken).
    pub fn restore(&mut self, names: Vec<Box<[u8]>>) {
        for name in names {
            if self.names.insert(name) {
                // Relaxed: as in `push`.
                self.budget.count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes the remembered names.
    pub fn take(&mut self) -> Vec<Box<[u8]>> {
        let names: Vec<Box<[u8]>> = self.names.drain().collect();
        // Relaxed: as in `push`.
        self.budget.count.fetch_sub(names.len(), Ordering::Relaxed);
        names
    }

    /// How many names are remembered here.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len()
    }
}

impl Drop for KernelNegatives {
    fn drop(&mut self) {
        // Relaxed: as in `push`.
        self.budget.count.fetch_sub(self.names.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_once_within_the_directory_bound() {
        static B: Budget = Budget::new(usize::MAX / 2);
        let mut n = KernelNegatives::under(&B);
        assert!(n.push(b"a"));
        assert!(n.push(b"a"));
        assert_eq!(n.len(), 1);
        let kept = (0..PER_DIR + 10).filter(|i| n.push(format!("n{i}").as_bytes())).count();
        assert_eq!(kept, PER_DIR - 1, "each push says whether it was remembered");
        assert!(n.push(b"a"), "a name remembered before stays remembered at the bound");
        assert_eq!(n.len(), PER_DIR, "no more than PER_DIR names in one directory");
        assert_eq!(B.used(), PER_DIR);
        let taken = n.take();
        assert_eq!(taken.len(), PER_DIR);
        assert_eq!((n.len(), B.used()), (0, 0), "taking gives the names back to the budget");
    }

    #[test]
    fn the_daemon_wide_bound_holds_across_directories_and_frees_with_them() {
        static B: Budget = Budget::new(10);
        let mut dirs: Vec<KernelNegatives> = (0..4).map(|_| KernelNegatives::under(&B)).collect();
        let mut kept = 0;
        for (d, dir) in dirs.iter_mut().enumerate() {
            for i in 0..4 {
                kept += usize::from(dir.push(format!("{d}-{i}").as_bytes()));
            }
        }
        assert_eq!(kept, 10);
        assert_eq!(dirs.iter().map(KernelNegatives::len).sum::<usize>(), 10);
        assert_eq!(B.used(), 10);
        assert_eq!(dirs[3].len(), 0, "the last directory found the budget spent");
        let first = dirs.remove(0);
        drop(first);
        assert_eq!(B.used(), 6, "a directory's names go back to the budget when it goes");
        assert!(dirs[2].push(b"now"));
        assert_eq!(dirs[2].len(), 1);
        assert_eq!(B.used(), 7);
    }
}
