//! A user's drop of its own directory (`fs/drop.rs`) and the directories
//! of other users below it (fences): what the drop must keep so that it
//! neither flushes nor reveals what they hold. The dcache, like the
//! kernel, drops everything below an entry it unhashes, so the user's own
//! directories between the dropped one and each fence stay too; they are
//! found by a first pass over the dcache that drops nothing (negative
//! entries aside) and up the links recorded for the inodes. The rules and
//! what is left open are in SEMANTICS ("A directory the caller does not
//! own is not entered").

use std::collections::HashSet;
use std::os::fd::BorrowedFd;

use super::*;
use crate::names::{SubtreeDrop, Verdict};

/// What the first pass of a user's drop found (see [`Fs::above_fences`]).
#[derive(Default)]
pub(super) struct Fences {
    /// The caller's directories above a fence, kept.
    pub held: HashSet<u64>,
    /// Each cached entry's parent, as the first pass saw it.
    pub seen_under: HashMap<u64, u64>,
    /// The negative entries the first pass dropped.
    pub mapped: SubtreeDrop,
    /// The fences found.
    pub fences: Vec<u64>,
}

/// Adds to `held` every directory above each of `fences` up to `dir`
/// (not included), by `parent_of`. Each directory is climbed from once:
/// a chain stops where an earlier one passed, so the cost is linear in
/// the directories, and a chain through stale links that loops ends too.
pub(super) fn hold_above(fences: &[u64], dir: u64, parent_of: impl Fn(u64) -> Option<u64>, held: &mut HashSet<u64>) {
    let mut climbed = HashSet::new();
    for &fence in fences {
        let mut cur = fence;
        while climbed.insert(cur) {
            let Some(p) = parent_of(cur) else { break };
            if p == dir {
                break;
            }
            held.insert(p);
            cur = p;
        }
    }
}

impl Fs {
    /// For a non-root drop of `dir`: the directories between `dir` and each
    /// directory under it that the caller does not own (a fence, see
    /// [`drop_dir`](Self::drop_dir)), up both the dcache's parents and the
    /// links recorded for the inodes (which differ while a rename in the
    /// source is not yet seen), found by a pass over the dcache that drops
    /// nothing but negative entries (every drop drops them; their counts
    /// are returned) and by the inodes the kernel knows (`known`). A
    /// directory that appears under one of the caller's own after this pass
    /// is kept by the drop's second pass (see [`drop_dir`](Self::drop_dir)).
    pub(super) fn above_fences(
        &self,
        dir: &Inode,
        known: &HashMap<u64, (Arc<Inode>, u32)>,
        owner: impl Fn(&Inode) -> bool,
    ) -> Fences {
        let mut cached_parent: HashMap<u64, u64> = HashMap::new();
        let mut inodes: HashMap<u64, Arc<Inode>> = HashMap::new();
        let mut fences = Vec::new();
        let mapped = self.names.drop_subtree_under(dir, |inode, parent| {
            if let Some(p) = parent {
                cached_parent.insert(inode.ino, p.ino);
            }
            inodes.insert(inode.ino, inode.clone());
            if inode.is_dir() && !owner(inode) {
                fences.push(inode.ino);
                Verdict::Fence
            } else {
                Verdict::Keep
            }
        });
        for (inode, _) in known.values() {
            inodes.entry(inode.ino).or_insert_with(|| inode.clone());
            if inode.is_dir() && !owner(inode) {
                fences.push(inode.ino);
            }
        }
        let mut held = HashSet::new();
        hold_above(&fences, dir.ino, |ino| cached_parent.get(&ino).copied(), &mut held);
        hold_above(
            &fences,
            dir.ino,
            |ino| inodes.get(&ino).map(|i| i.link_parent()),
            &mut held,
        );
        Fences {
            held,
            seen_under: cached_parent,
            mapped: SubtreeDrop {
                dropped: mapped.dropped,
                busy: mapped.busy,
                skipped: 0,
            },
            fences,
        }
    }

    /// For a non-root drop: whether the kernel's negative entry for `name`
    /// in the directory `d` may be invalidated. A name recorded negative
    /// may name something now, and invalidating its entry would drop what
    /// the kernel holds there; so it may go only if the name is still
    /// missing, or names an object of the caller's that is not a directory
    /// kept above a fence (`held`). (Another user may make the name between
    /// this check and the kernel's invalidation; that race is left.)
    pub(super) fn negative_may_go(&self, d: BorrowedFd<'_>, name: &[u8], uid: u32, held: &HashSet<u64>) -> bool {
        let Ok(cname) = cstr(name) else {
            return false;
        };
        match sys::fstatat(d, &cname, libc::AT_SYMLINK_NOFOLLOW) {
            Err(e) => e.errno() == libc::ENOENT,
            Ok(st) => {
                st.st_uid == uid
                    && !(st.st_mode & libc::S_IFMT == libc::S_IFDIR
                        && self.table.find(key_of(&st)).is_some_and(|i| held.contains(&i.ino)))
            }
        }
    }
}
