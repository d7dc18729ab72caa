//! Mounts attached or detached at or under the source.
//!
//! No filesystem mark reports a mount: a filesystem unmounted from under
//! the source and another mounted in its place changes every object below
//! that point without one event of the filesystem watch, so what rcufs and
//! the kernel keep from the old one would be trusted for the watch's hour
//! (and the new one, with the device number the old one gave back, which
//! an anonymous device gets at once, would pass for marked). Since Linux
//! 6.15 a fanotify group reporting mounts (`FAN_REPORT_MNT`) can mark a
//! mount namespace (`FAN_MARK_MNTNS`) for `FAN_MNT_ATTACH` and
//! `FAN_MNT_DETACH`, each event naming the mount by its unique 64-bit id,
//! the id `statx` reports as `STATX_MNT_ID_UNIQUE`.
//!
//! The group reports every mount of the namespace. Each event's mount is
//! looked up by its id (`statmount`, Linux 6.8): a mount attached (or moved)
//! at or under the source is a change, and its id is kept; a mount detached
//! (or moved away) whose id was kept is a change. The mounts under the
//! source when the watch starts are learned from the namespace's list of
//! mounts (`listmount`, Linux 6.8, then `statmount` of each), stacked ones
//! included.
//!
//! A mount can also come under the source without a mount event: a
//! directory holding it (even a bind of one of the source's own
//! directories) renamed into the source, in this namespace or another. So
//! when the filesystem watch reports a directory moved (`FAN_MOVED_FROM`
//! with `FAN_ONDIR`, with the name it had, by another process than the
//! daemon, whose renames stay within the source) or lost events, the next
//! read of this group lists the mounts again first and learns, with their
//! places, those that are under the source now
//! ([`MountWatch::dirs_moved`]); nothing is cached wrongly while they stay,
//! so learning one is no change, and its detach is placed like any other.
//!
//! One that went before it could be learned was under the source for a
//! moment nobody can place, and is a change everywhere. Which those may
//! be: the watch keeps every mount of the namespace (the last list, plus
//! the attaches and minus the detaches read since) with where each was
//! last seen, and a mount can only have come in with a moved directory if
//! that directory's old name is a component of the mount's last mount
//! point (lists are taken after every move, so that point is older than
//! the move). Of those, a mount in the keeping that the list misses (the
//! kernel takes a mount out of the namespace before it queues its detach,
//! so the detach may not be readable yet), one listed but gone when looked
//! up, and one whose detach the read before found (the move's event was
//! queued before the detach happened, so it was read by the end of this
//! round's read of the filesystem group) is a change everywhere; any other
//! mount's detach is handed on as below. (A rename's event is queued just
//! after the directory moved, not with it: a detach from another thread in
//! between, read a round before the move, is missed; and a file's mount
//! point renamed in from another namespace, where it is no mount point, is
//! not learned, nor one renamed so into a directory that moves in later,
//! whose last mount point is stale: file moves are too frequent to list
//! the mounts for each.) A mount moved (`mount --move`) takes the mounts
//! on it along without events of theirs: after one, the mounts are learned
//! anew, every one looked up.
//! A list looks up only the mounts last seen under a directory of a name
//! moved (and new ones), at most once per round. Lost mount events drop
//! everything and learn the mounts anew, places included.
//!
//! The source's path is the one its descriptor has now (read in each
//! round that lists mounts or reads mount events): a directory above it
//! renamed, which no event need report, drops everything (mount events
//! read meanwhile were taken as elsewhere) and the mounts are learned anew
//! under the new path.
//!
//! A change is reported where it happened when it can be ([`Place`]): the
//! mount point's parent directory, by file handle, and the mount point's
//! name in it. What the caches must forget is only that name's entry (it
//! led to the covered directory and now leads to the mount's root, or the
//! other way round); what is cached under either directory stays true of
//! that directory, and no lookup reaches the one covered now. The
//! applier treats it as a name changed in that directory, which the
//! filesystem watch would have reported had the mount been a `rename`.
//! The parent is found from the mount point's path when the attach is
//! read, opened beneath the source without crossing a mount or following
//! a symlink, and kept as a handle: a directory above the mount point may
//! be renamed while it is mounted (the mount point itself may not be, in
//! this namespace), so the place of a detach is the one its attach had.
//! The place is checked without entering the mount: `statmount` must name
//! the source's own mount as its parent, and must find the mount at the
//! same point after the parent was opened.
//!
//! Everything under the source counts as changed, as a lost event
//! (`FAN_Q_OVERFLOW`) does, when no place can be given:
//! - a mount attached at the source itself, or under another mount under
//!   the source (whose parent directory is on that other filesystem);
//! - a place whose check fails;
//! - a mount moved at or under the source: where it was when its attach
//!   was read may not be where it was attached;
//! - a mount whose mount point was renamed (from a namespace where it is
//!   not one, so that no mount event says so): the filesystem watch
//!   reports the name, and the mount's place is forgotten
//!   ([`MountWatch::names_changed`]), so that its detach drops everything.
//!
//! A mount the watch never saw under the source may still have been there
//! (one of the cases above, or one already gone when its attach is read:
//! attached and detached between two reads, so that where it was is not
//! known). Its detach is handed on as such (`unseen_gone`), and is a change
//! everywhere if the caches hold anything from that mount
//! (`InodeTable::holds_mount`).
//!
//! Nothing here walks a path outside the source's own filesystem nor
//! enters a mount (a stuck network filesystem under the source cannot hang
//! the watcher), and nothing here fails the watch after the start: a mount
//! watch that cannot read its events, list the mounts or look one up
//! reports a change everywhere, and one that cannot read them at all turns
//! itself off, logged.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use parking_lot::Mutex;

use crate::sys;

/// `FAN_REPORT_MNT` (Linux 6.15, `include/uapi/linux/fanotify.h`).
const FAN_REPORT_MNT: libc::c_uint = 0x0000_4000;
/// `FAN_MARK_MNTNS`.
const FAN_MARK_MNTNS: libc::c_uint = 0x0000_0110;
/// `FAN_MNT_ATTACH`, `FAN_MNT_DETACH`.
const FAN_MNT_ATTACH: u64 = 0x0100_0000;
const FAN_MNT_DETACH: u64 = 0x0200_0000;
/// `FAN_EVENT_INFO_TYPE_MNT`: a `struct fanotify_event_info_mnt`, the
/// header then (aligned) the mount's unique id.
const INFO_MNT: u8 = 7;
/// `struct fanotify_event_metadata`'s size.
const METADATA_LEN: usize = 24;

/// Where a mount under the source is mounted, as the caches name it: the
/// mount point's parent directory (its filesystem id and file handle) and
/// the mount point's name there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Place {
    /// `f_fsid` of the parent's filesystem (as [`sys::fs_ids`] packs it).
    pub(super) fsid: u64,
    /// The parent's handle.
    pub(super) dir: sys::KernelHandle,
    /// The mount point's name in it.
    pub(super) name: Vec<u8>,
}

/// What the mount events read in one call come to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Changes {
    /// Where mounts were attached or detached under the source.
    pub(super) places: Vec<Place>,
    /// The unique ids of the mounts that were attached, detached or moved
    /// at or under the source, where they were placed (the others make
    /// `everywhere`), and whether each is gone from under it.
    pub(super) mounts: Vec<(u64, bool)>,
    /// A change that no place covers (see the module docs): anything
    /// under the source may have changed.
    pub(super) everywhere: bool,
    /// Mounts detached or moved that the watch never saw under the source
    /// (one may have got there without a mount event: see the module
    /// docs): a change everywhere if the caches hold anything from one of
    /// them.
    pub(super) unseen_gone: Vec<u64>,
}

impl Changes {
    /// Whether anything under the source changed, or may have.
    pub(super) fn any(&self) -> bool {
        self.everywhere || !self.places.is_empty() || !self.mounts.is_empty() || !self.unseen_gone.is_empty()
    }
}

/// What the watch knows of the mounts under the source.
#[derive(Debug, Default)]
struct State {
    /// The source's path now, as far as the last read tells (a directory
    /// above it may be renamed).
    source: PathBuf,
    /// The mounts at or under the source (by unique id), as far as the
    /// events read and the lists taken so far tell, and where each is
    /// (None: not known precisely, so its detach is a change everywhere).
    under: HashMap<u64, Option<Place>>,
    /// A directory was moved in a marked filesystem, or the filesystem
    /// watch lost events, since the last read: a mount may have come under
    /// the source without a mount event, so the next read lists the mounts
    /// anew ([`MountWatch::dirs_moved`]).
    learn: bool,
    /// The names the directories moved since the last list had before
    /// (None: not known, any name).
    moved: Option<HashSet<Vec<u8>>>,
    /// The detaches of mounts never seen under the source that the last
    /// read found, each with where the mount was last seen.
    unseen_last: Vec<(u64, Option<Vec<u8>>)>,
    /// Every mount of the namespace, as far as the list taken last and the
    /// events read since tell.
    live: HashSet<u64>,
    /// Where each mount of `live` not under the source was mounted when it
    /// was last looked up (its mount point).
    points: HashMap<u64, Vec<u8>>,
}

impl State {
    /// Whether a mount last seen at `point` (None: not known) may have
    /// come under the source with one of the directories moved: one of
    /// its mount point's components has the name such a directory had.
    fn may_have_moved_in(&self, point: Option<&[u8]>) -> bool {
        let (Some(moved), Some(point)) = (&self.moved, point) else {
            return true;
        };
        point.split(|&b| b == b'/').any(|c| moved.contains(c))
    }
}

/// A fanotify group watching the mounts of the daemon's namespace.
#[derive(Debug)]
pub(super) struct MountWatch {
    fan: OwnedFd,
    /// The source, opened when the watch started: where mount points'
    /// parents are opened beneath.
    root: OwnedFd,
    /// The unique id of the mount the source is on (0 if unknown).
    root_mount: u64,
    /// Only the watcher's thread uses it.
    state: Mutex<State>,
    /// Reading the group failed: the watch of mounts is off.
    off: AtomicBool,
}

impl MountWatch {
    /// Marks the namespace; an error on kernels before 6.15.
    pub(super) fn new(source: &Path) -> Result<Self> {
        let fan = sys::fanotify_init(libc::FAN_CLASS_NOTIF | libc::FAN_NONBLOCK | FAN_REPORT_MNT)
            .context("fanotify_init(FAN_REPORT_MNT) (mount events need Linux 6.15)")?;
        // The calling thread's namespace and table (every thread of the
        // daemon shares one; a test's thread may have its own).
        let ns = sys::cstr(b"/proc/thread-self/ns/mnt")?;
        sys::fanotify_mark(
            fan.as_fd(),
            libc::FAN_MARK_ADD | FAN_MARK_MNTNS,
            FAN_MNT_ATTACH | FAN_MNT_DETACH,
            &ns,
        )
        .context("fanotify_mark(FAN_MARK_MNTNS) on the mount namespace")?;
        let croot = sys::cstr(source.as_os_str().as_bytes())?;
        let root = sys::open_path(&croot, libc::O_PATH | libc::O_DIRECTORY)
            .with_context(|| format!("opening {}", source.display()))?;
        let root_mount = sys::mount_id_unique_at(root.as_fd(), sys::EMPTY).unwrap_or(0);
        let mut w = Self {
            fan,
            root,
            root_mount,
            state: Mutex::default(),
            off: AtomicBool::new(false),
        };
        // After the mark: a mount made meanwhile is in the list taken
        // here, or its event is in the group, or both. (One unmounted
        // before it was looked up is not learned: nothing is cached yet
        // that its going could outdate.)
        let mut st = State {
            source: source.to_path_buf(),
            ..State::default()
        };
        w.learn(&mut st)
            .context("listing the mounts under the source (listmount and statmount, Linux 6.8)")?;
        *w.state.get_mut() = st;
        Ok(w)
    }

    /// Lists the namespace's mounts (`listmount`) as `st.live`, and adds to
    /// `st.under` those at or under the source it does not hold, with their
    /// places, each looked up by its id (`statmount`; neither walks a
    /// path) unless it was last seen where no directory moved since was
    /// above it (see the module docs). Returns whether a mount the state
    /// held as there (in `st.live`, not under the source) that may have
    /// come in with a moved directory is gone without its detach read yet,
    /// or went between the list and its look-up. (The kernel takes a mount
    /// out of the namespace before it queues its detach, so a list may miss
    /// a mount whose detach is not in the group yet.) A look-up that fails
    /// is an error after the rest are done.
    fn learn(&self, st: &mut State) -> crate::error::FsResult<bool> {
        let listed = sys::listmount()?;
        let now: HashSet<u64> = listed.iter().copied().collect();
        let mut vanished = st.live.iter().any(|id| {
            !now.contains(id)
                && !st.under.contains_key(id)
                && st.may_have_moved_in(st.points.get(id).map(Vec::as_slice))
        });
        st.live = now;
        let mut failed = None;
        for id in listed {
            // Known under the source, or last seen where no directory that
            // moved was above it (so it has not moved since).
            if st.under.contains_key(&id) || st.points.get(&id).is_some_and(|p| !st.may_have_moved_in(Some(p))) {
                continue;
            }
            match sys::statmount(id) {
                Ok(Some(at)) => {
                    if Path::new(OsStr::from_bytes(&at.point)).starts_with(&st.source) {
                        let place = self.place(&st.source, id, &at);
                        st.under.insert(id, place);
                        st.points.remove(&id);
                    } else {
                        st.points.insert(id, at.point);
                    }
                }
                Ok(None) => {
                    vanished |= st.may_have_moved_in(st.points.get(&id).map(Vec::as_slice));
                    st.live.remove(&id);
                }
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(vanished),
        }
    }

    /// Where the mount `id`, which `statmount` found at `at`, is, as the
    /// caches name it; None if it is not under the source, or not
    /// precisely (see the module docs). Enters no mount: the parent is
    /// opened without crossing one, the mount must be on the source's own,
    /// and `statmount` must find it at the same point afterwards.
    fn place(&self, source: &Path, id: u64, at: &sys::MountAt) -> Option<Place> {
        let rel = Path::new(OsStr::from_bytes(&at.point)).strip_prefix(source).ok()?;
        // The source itself has no parent in the caches; and a mount on
        // another mount under the source has its parent on that one.
        let name = rel.file_name()?;
        if self.root_mount == 0 || at.parent != self.root_mount {
            return None;
        }
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.as_os_str().as_bytes(),
            _ => b".",
        };
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let dir = sys::open_beneath(self.root.as_fd(), &sys::cstr(parent).ok()?, flags).ok()?;
        // Still that mount's, at the same point, after the parent was
        // opened: nothing moved or renamed meanwhile, so the directory
        // opened is its mount point's parent. (Nothing looks at the name
        // itself: even a walk that stops at the mount point, refusing to
        // cross it, waits on an automounter's daemon there.)
        if sys::statmount(id).ok()?.as_ref() != Some(at) {
            return None;
        }
        let (handle, _) = sys::name_to_handle_at(dir.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH).ok()?;
        let (fsid, _) = sys::fs_ids(dir.as_fd()).ok()?;
        Some(Place {
            fsid,
            dir: handle,
            name: name.as_bytes().to_vec(),
        })
    }

    /// The filesystem watch lost events: any mount point may have been
    /// renamed, so no place is trusted any more (each detach will be a
    /// change everywhere), and any directory may have moved in, so the
    /// next read lists the mounts anew.
    pub(super) fn names_lost(&self) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.state.lock();
        for place in st.under.values_mut() {
            *place = None;
        }
        st.learn = true;
        st.moved = None;
    }

    /// Directories were moved in a filesystem the watch marks (the
    /// filesystem watch's `FAN_MOVED_FROM` with `FAN_ONDIR`; `names`, the
    /// names they had, empty if not known): mounts under one may have come
    /// under the source with it, and no mount event says so. The next read
    /// lists the mounts anew (see the module docs).
    pub(super) fn dirs_moved(&self, names: &[&[u8]]) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.state.lock();
        if !st.learn {
            st.learn = true;
            st.moved = Some(HashSet::new());
        }
        for name in names {
            match &mut st.moved {
                Some(_) if name.is_empty() => st.moved = None,
                Some(moved) => {
                    moved.insert(name.to_vec());
                }
                None => {}
            }
        }
    }

    /// Names changed in directories of the source, as the filesystem watch
    /// reported them: a mount point renamed (from a namespace where it is
    /// not one, the mount moving with it and no mount event saying so) is
    /// no longer where its place says, so its detach will be a change
    /// everywhere.
    pub(super) fn names_changed<'a>(&self, names: impl Iterator<Item = (u64, i32, &'a [u8], &'a [u8])>) {
        let mut st = self.state.lock();
        if st.under.is_empty() {
            return;
        }
        for (fsid, handle_type, dir, name) in names {
            for place in st.under.values_mut() {
                if place.as_ref().is_some_and(|p| {
                    p.fsid == fsid && p.dir.handle_type() == handle_type && p.dir.bytes() == dir && p.name == name
                }) {
                    *place = None;
                }
            }
        }
    }

    /// Whether the source's path (its descriptor's, now) is no longer the
    /// one the state has; if so, the state takes the new one.
    fn follow_source(&self, st: &mut State) -> bool {
        let Ok(now) = std::fs::read_link(format!("/proc/thread-self/fd/{}", self.root.as_raw_fd())) else {
            return false;
        };
        if now == st.source {
            return false;
        }
        tracing::info!(
            "the source moved from {} to {}: every cache is dropped",
            st.source.display(),
            now.display()
        );
        st.source = now;
        true
    }

    /// The group's descriptor, readable when events are queued.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fan.as_fd()
    }

    /// Reads the group until it is empty; what it read means for the
    /// source (see the module docs).
    pub(super) fn changed(&self, buf: &mut [u8]) -> Changes {
        let mut out = Changes::default();
        if self.off.load(Ordering::Relaxed) {
            return out;
        }
        let mut st = self.state.lock();
        // Before the group is read: a mount listed here has its detach
        // read after it (placed); one that went before it was listed or
        // looked up is a change everywhere, its detach read or not.
        let learning = std::mem::take(&mut st.learn);
        if learning {
            self.learn_into(&mut st, &mut out, "after a directory moved");
        }
        let mut lost = false;
        let mut events = Vec::new();
        loop {
            let n = match sys::read(self.fan.as_fd(), buf) {
                Ok(n) => n,
                Err(e) if e.errno() == libc::EINTR => continue,
                Err(e) if e.errno() == libc::EAGAIN => break,
                Err(e) => {
                    tracing::error!(
                        "reading mount events: {e}: mounts under the source are not watched any more (a \
                         filesystem mounted there in place of another is seen only after a drop)"
                    );
                    self.off.store(true, Ordering::Relaxed);
                    out.everywhere = true;
                    return out;
                }
            };
            lost |= parse(&buf[..n], &mut events);
        }
        // A directory above the source renamed (no event need say so):
        // mounts under the new path were taken for mounts elsewhere since.
        // Looked at only when mounts are looked at.
        let source_moved = (learning || lost || !events.is_empty()) && self.follow_source(&mut st);
        let mut unseen_now = Vec::new();
        let mut any_move = false;
        let State {
            source,
            under,
            live,
            points,
            ..
        } = &mut *st;
        for (mask, id) in events {
            // Where it was last seen, if not under the source.
            let mut point = None;
            if mask & FAN_MNT_DETACH != 0 {
                live.remove(&id);
                point = points.remove(&id);
            }
            if mask & FAN_MNT_ATTACH != 0 {
                live.insert(id);
            }
            // A move: where the mount was when its attach was read may not
            // be where it was attached (moved before that read), so what
            // was cached of it cannot be placed.
            let moved = mask & FAN_MNT_ATTACH != 0 && mask & FAN_MNT_DETACH != 0;
            any_move |= moved;
            // Detached, moved, or attached again (moved): first where it was.
            let was = under.remove(&id);
            let was_under = was.is_some();
            // Whether every place this event touches is known.
            let mut placed = !moved;
            match was {
                Some(Some(place)) => out.places.push(place),
                Some(None) => placed = false,
                None => {}
            }
            let mut now_under = false;
            if mask & FAN_MNT_ATTACH != 0 {
                match sys::statmount(id) {
                    Ok(Some(at)) => {
                        if Path::new(OsStr::from_bytes(&at.point)).starts_with(&*source) {
                            let place = self.place(source, id, &at);
                            match &place {
                                Some(p) => out.places.push(p.clone()),
                                None => placed = false,
                            }
                            under.insert(id, place);
                            now_under = true;
                        } else {
                            points.insert(id, at.point);
                        }
                    }
                    // Gone already: where it was, nothing says. Its
                    // detach happened before this lookup, so its event is
                    // queued (or an overflow is): read with this batch or
                    // the next, it is handed on as a mount never seen
                    // under the source (`unseen_gone`), a change
                    // everywhere only if the caches hold anything from it.
                    // (Treating the attach itself as a change everywhere
                    // let any user who can mount something anywhere, a
                    // FUSE filesystem in their home, drop every cache of
                    // the mount at will.)
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(id, "statmount of an attached mount: {e}");
                        out.everywhere = true;
                    }
                }
            }
            if was_under || now_under {
                if placed {
                    out.mounts.push((id, !now_under));
                } else {
                    out.everywhere = true;
                }
            } else if mask & FAN_MNT_DETACH != 0 {
                out.unseen_gone.push(id);
                unseen_now.push((id, point));
            }
        }
        // A mount never seen under the source whose detach the last read
        // found may have come under it with a directory that moved (the
        // move's event was queued before the detach happened, so it was
        // read by the end of this round's read of the filesystem group),
        // if it was last seen under a directory of that name; where it
        // was, nothing says. (One whose detach this read found was listed
        // above, and looked up, or is one that vanished.)
        if learning {
            let last = std::mem::take(&mut st.unseen_last);
            out.everywhere |= last.iter().any(|(_, point)| st.may_have_moved_in(point.as_deref()));
        }
        st.unseen_last = unseen_now;
        if lost || source_moved || any_move {
            // Attaches and detaches lost, or judged against the source's
            // old path: everything is dropped, and the mounts are learned
            // anew, with their places now. A mount moved (`mount
            // --move`): the mounts on it moved with it without an event of
            // their own, into the source or out of it, or elsewhere (their
            // last mount points are stale), so they are learned anew too;
            // one gone meanwhile may have been under the source.
            if lost || source_moved {
                out.everywhere = true;
                st.under.clear();
            }
            st.moved = None;
            st.points.clear();
            self.learn_into(&mut st, &mut out, "after lost or moved mounts");
        }
        out
    }

    /// [`learn`](Self::learn), with what it finds reported in `out`: a
    /// mount that vanished, or a list that failed (not tried again: an
    /// error that stays would drop everything each round), is a change
    /// everywhere.
    fn learn_into(&self, st: &mut State, out: &mut Changes, when: &str) {
        match self.learn(st) {
            Ok(vanished) => out.everywhere |= vanished,
            Err(e) => {
                tracing::debug!("listing the mounts {when}: {e}");
                out.everywhere = true;
            }
        }
    }
}

/// Adds the events in `buf` to `events` as (mask, mount id); returns
/// whether the kernel lost events.
fn parse(buf: &[u8], events: &mut Vec<(u64, u64)>) -> bool {
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap_or_default());
    let u64_at = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let mut lost = false;
    let mut at = 0;
    while at + METADATA_LEN <= buf.len() {
        let len = u32_at(buf, at) as usize;
        if len < METADATA_LEN || at + len > buf.len() {
            break;
        }
        let ev = &buf[at..at + len];
        at += len;
        let mask = u64_at(ev, 8);
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            lost = true;
            continue;
        }
        let mut rat = (u16_at(ev, 6) as usize).max(METADATA_LEN);
        while rat + 4 <= ev.len() {
            let (kind, rlen) = (ev[rat], u16_at(ev, rat + 2) as usize);
            if rlen < 4 || rat + rlen > ev.len() {
                break;
            }
            if kind == INFO_MNT && rlen >= 12 {
                // The id ends the record (after padding to its alignment,
                // which differs between 64- and 32-bit targets).
                events.push((mask & (FAN_MNT_ATTACH | FAN_MNT_DETACH), u64_at(ev, rat + rlen - 8)));
            }
            rat += rlen;
        }
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::in_own_namespace;

    fn event(mask: u64, id: u64) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&40u32.to_ne_bytes()); // event_len
        e.extend_from_slice(&[3, 0]); // vers, reserved
        e.extend_from_slice(&24u16.to_ne_bytes()); // metadata_len
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes()); // fd
        e.extend_from_slice(&1234i32.to_ne_bytes()); // pid
        e.extend_from_slice(&[INFO_MNT, 0]);
        e.extend_from_slice(&16u16.to_ne_bytes());
        e.extend_from_slice(&[0; 4]);
        e.extend_from_slice(&id.to_ne_bytes());
        e
    }

    fn mount_tmpfs(at: &Path) {
        let (what, c) = (c"tmpfs", sys::cstr(at.as_os_str().as_encoded_bytes()).unwrap());
        // SAFETY: all strings are NUL-terminated; no data argument.
        let rc = unsafe { libc::mount(what.as_ptr(), c.as_ptr(), what.as_ptr(), 0, std::ptr::null()) };
        assert_eq!(
            rc,
            0,
            "mount tmpfs on {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        );
    }

    /// A temporary directory, and its path as `Watcher::new` passes a
    /// source: canonical.
    fn scratch() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        (dir, base)
    }

    /// `mount(from, to)` with `flags` and no type: a bind (`MS_BIND`) or a
    /// move (`MS_MOVE`).
    fn mount_at(from: &Path, to: &Path, flags: libc::c_ulong) {
        let (f, t) = (
            sys::cstr(from.as_os_str().as_bytes()).unwrap(),
            sys::cstr(to.as_os_str().as_bytes()).unwrap(),
        );
        // SAFETY: NUL-terminated paths; no type or data.
        let rc = unsafe { libc::mount(f.as_ptr(), t.as_ptr(), std::ptr::null(), flags, std::ptr::null()) };
        assert_eq!(
            rc,
            0,
            "mount {} on {} ({flags:#x}): {}",
            from.display(),
            to.display(),
            std::io::Error::last_os_error()
        );
    }

    fn umount(at: &Path) {
        let c = sys::cstr(at.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: the path is NUL-terminated.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(rc, 0, "umount {}: {}", at.display(), std::io::Error::last_os_error());
    }

    /// What the watch reports within a second (the kernel queues the
    /// event before the mount call returns, so the first read finds it;
    /// the wait is for a loaded machine's sake only).
    fn reported(w: &MountWatch) -> Changes {
        let mut buf = vec![0u8; 4096];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < deadline {
            let c = w.changed(&mut buf);
            if c.any() {
                return c;
            }
            let _ = sys::poll_readable_for(&[w.fd()], std::time::Duration::from_millis(50));
        }
        Changes::default()
    }

    /// The place (parent directory and name) of the mount point `at`, as
    /// the watch should give it.
    fn place_of(at: &Path) -> Place {
        let parent = sys::cstr(at.parent().unwrap().as_os_str().as_bytes()).unwrap();
        let fd = sys::open_path(&parent, libc::O_PATH | libc::O_DIRECTORY).unwrap();
        let (dir, _) = sys::name_to_handle_at(fd.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH).unwrap();
        Place {
            fsid: sys::fs_ids(fd.as_fd()).unwrap().0,
            dir,
            name: at.file_name().unwrap().as_bytes().to_vec(),
        }
    }

    #[test]
    fn reports_mounts_under_the_source_where_they_are_and_not_elsewhere() {
        in_own_namespace(reports_where);
    }

    /// A mount attached and detached before the watch reads either event
    /// (what any user can do with a FUSE filesystem of their own, in a
    /// loop): its attach cannot be placed, and its detach is left to the
    /// caches (`unseen_gone`), not a change everywhere.
    #[test]
    fn a_mount_gone_before_its_attach_is_read_is_left_to_the_caches() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let (source, elsewhere) = (base.join("src"), base.join("elsewhere"));
            std::fs::create_dir_all(&source).unwrap();
            std::fs::create_dir_all(&elsewhere).unwrap();
            let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
            mount_tmpfs(&elsewhere);
            let id = sys::mount_id_unique(&elsewhere).unwrap();
            umount(&elsewhere);
            assert_eq!(
                reported(&w),
                Changes {
                    unseen_gone: vec![id],
                    ..Changes::default()
                },
                "attached and detached elsewhere before the watch read either"
            );
        });
    }

    fn placed(places: Vec<Place>, mounts: Vec<(u64, bool)>) -> Changes {
        Changes {
            places,
            mounts,
            ..Changes::default()
        }
    }

    fn reports_where() {
        let (_dir, base) = scratch();
        let (source, elsewhere) = (base.join("src"), base.join("elsewhere"));
        let (inside, deeper) = (source.join("a/sub"), source.join("a/sub/deeper"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
        mount_tmpfs(&elsewhere);
        let elsewhere_id = sys::mount_id_unique(&elsewhere).unwrap();
        assert!(!reported(&w).any(), "a mount outside the source was reported");
        mount_tmpfs(&inside);
        let id = sys::mount_id_unique(&inside).unwrap();
        let at_inside = place_of(&inside);
        assert_eq!(
            reported(&w),
            placed(vec![at_inside.clone()], vec![(id, false)]),
            "a mount under the source, in the source's own filesystem"
        );
        // Under the tmpfs: its parent is not on the source's filesystem.
        std::fs::create_dir(&deeper).unwrap();
        mount_tmpfs(&deeper);
        let deeper_id = sys::mount_id_unique(&deeper).unwrap();
        let c = reported(&w);
        assert!(
            c.everywhere && c.places.is_empty() && c.mounts.is_empty(),
            "a mount under a mount under the source ({deeper_id}): {c:?}"
        );
        umount(&deeper);
        let c = reported(&w);
        assert!(
            c.everywhere && c.mounts.is_empty(),
            "an unmount under a mount under the source: {c:?}"
        );
        // Not under the source, as far as the watch saw: the caches decide.
        umount(&elsewhere);
        assert_eq!(
            reported(&w),
            Changes {
                unseen_gone: vec![elsewhere_id],
                ..Changes::default()
            },
            "an unmount outside the source"
        );
        // A directory above the mount point renamed while it is mounted:
        // the detach is placed where the attach was, by handle.
        let moved = source.join("b");
        std::fs::rename(source.join("a"), &moved).unwrap();
        umount(&moved.join("sub"));
        assert_eq!(
            reported(&w),
            placed(vec![at_inside], vec![(id, true)]),
            "an unmount under the source, after a rename above it"
        );
        // Mounted at the source itself: no parent in the caches.
        mount_tmpfs(&source);
        let c = reported(&w);
        assert!(c.everywhere && c.places.is_empty(), "a mount at the source: {c:?}");
        umount(&source);
        assert!(reported(&w).everywhere, "an unmount at the source");
        // Found where it is mounted, by its id.
        let root = sys::mount_id_unique(Path::new("/")).unwrap();
        let at = sys::statmount(root).unwrap().expect("the root mount");
        assert_eq!(at.point, b"/");
        assert_eq!(sys::statmount(u64::MAX - 1).unwrap(), None);
    }

    /// A mount moved under the source cannot be placed: where it was
    /// before it moved may not be where its attach was read.
    #[test]
    fn a_moved_mount_is_a_change_everywhere() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let source = base.join("src");
            let (from, to) = (source.join("from"), source.join("to"));
            std::fs::create_dir_all(&from).unwrap();
            std::fs::create_dir_all(&to).unwrap();
            let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
            mount_tmpfs(&from);
            let id = sys::mount_id_unique(&from).unwrap();
            assert_eq!(reported(&w), placed(vec![place_of(&from)], vec![(id, false)]));
            mount_at(&from, &to, libc::MS_MOVE);
            let c = reported(&w);
            assert!(c.everywhere && c.mounts.is_empty(), "a move under the source: {c:?}");
            // Placed where it went: its detach is placed there.
            umount(&to);
            assert_eq!(reported(&w), placed(vec![place_of(&to)], vec![(id, true)]));
        });
    }

    /// A mount point renamed where it is not one (another namespace): the
    /// filesystem watch reports the name, and the mount's detach is then
    /// a change everywhere.
    #[test]
    fn a_mount_point_renamed_loses_its_place() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let source = base.join("src");
            let inside = source.join("sub");
            std::fs::create_dir_all(&inside).unwrap();
            let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
            mount_tmpfs(&inside);
            let id = sys::mount_id_unique(&inside).unwrap();
            let p = place_of(&inside);
            assert_eq!(reported(&w), placed(vec![p.clone()], vec![(id, false)]));
            // Another directory's name changed there: nothing.
            w.names_changed([(p.fsid, p.dir.handle_type(), p.dir.bytes(), &b"other"[..])].into_iter());
            w.names_changed([(p.fsid, p.dir.handle_type(), p.dir.bytes(), &b"sub"[..])].into_iter());
            umount(&inside);
            let c = reported(&w);
            assert!(
                c.everywhere && c.places.is_empty() && c.mounts.is_empty(),
                "a renamed mount point's detach ({id}): {c:?}"
            );
        });
    }

    #[test]
    fn mounts_there_at_the_start_are_placed_too() {
        in_own_namespace(placed_at_start);
    }

    fn placed_at_start() {
        let (_dir, base) = scratch();
        let source = base.join("src");
        let inside = source.join("sub");
        std::fs::create_dir_all(&inside).unwrap();
        mount_tmpfs(&inside);
        let id = sys::mount_id_unique(&inside).unwrap();
        // And one stacked on it: on the first, so not placed.
        mount_tmpfs(&inside);
        let top = sys::mount_id_unique(&inside).unwrap();
        let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
        assert!(!reported(&w).any());
        umount(&inside);
        let c = reported(&w);
        assert!(
            c.everywhere && c.unseen_gone.is_empty(),
            "the top of two mounts stacked at the start ({top}): {c:?}"
        );
        // The one under it was learned too: its detach is placed.
        umount(&inside);
        assert_eq!(reported(&w), placed(vec![place_of(&inside)], vec![(id, true)]));
    }

    /// A mount that comes under the source with a directory moved there
    /// (no mount event says so) is learned when the filesystem watch
    /// reports the move, and its detach is placed; one that goes before it
    /// could be learned is a change everywhere.
    #[test]
    fn a_mount_moved_in_with_its_directory_is_learned() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let source = base.join("src");
            std::fs::create_dir_all(&source).unwrap();
            let outside = |n: &str| {
                let d = base.join(n);
                std::fs::create_dir_all(d.join("m")).unwrap();
                mount_tmpfs(&d.join("m"));
                d
            };
            let (a, b, c, d) = (outside("a"), outside("b"), outside("c"), outside("d"));
            let (e, x) = (outside("e"), outside("x"));
            let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
            let mut buf = vec![0u8; 4096];
            // Not told of the move: the detach is of a mount never seen
            // under the source (the caches decide).
            std::fs::rename(&a, source.join("a")).unwrap();
            let id = sys::mount_id_unique(&source.join("a/m")).unwrap();
            umount(&source.join("a/m"));
            assert_eq!(
                reported(&w),
                Changes {
                    unseen_gone: vec![id],
                    ..Changes::default()
                }
            );
            // (A read that finds nothing: that detach is not the last
            // read's any more, which a move reported next would suspect.)
            assert!(!w.changed(&mut buf).any());
            // Told: learned, quietly, and its detach placed.
            std::fs::rename(&b, source.join("b")).unwrap();
            let id = sys::mount_id_unique(&source.join("b/m")).unwrap();
            w.dirs_moved(&[b"b"]);
            assert_eq!(w.changed(&mut buf), Changes::default(), "learning a mount is no change");
            umount(&source.join("b/m"));
            assert_eq!(
                reported(&w),
                placed(vec![place_of(&source.join("b/m"))], vec![(id, true)])
            );
            // Gone before the move was reported: where it was, nothing says.
            std::fs::rename(&c, source.join("c")).unwrap();
            umount(&source.join("c/m"));
            w.dirs_moved(&[b"c"]);
            let ch = reported(&w);
            assert!(ch.everywhere, "a mount gone before its move was reported: {ch:?}");
            // Its detach read before the move was.
            std::fs::rename(&d, source.join("d")).unwrap();
            let id = sys::mount_id_unique(&source.join("d/m")).unwrap();
            umount(&source.join("d/m"));
            assert_eq!(w.changed(&mut buf).unseen_gone, vec![id]);
            w.dirs_moved(&[b"d"]);
            let ch = w.changed(&mut buf);
            assert!(ch.everywhere, "a detach read the round before the move: {ch:?}");
            // And once learned, nothing more.
            w.dirs_moved(&[b"d"]);
            assert_eq!(w.changed(&mut buf), Changes::default());
            // A mount gone elsewhere, under no directory of the name moved,
            // while another is brought in: handed on (the caches decide),
            // no change everywhere, and the other learned.
            let x_id = sys::mount_id_unique(&x.join("m")).unwrap();
            umount(&x.join("m"));
            std::fs::rename(&e, source.join("e")).unwrap();
            let id = sys::mount_id_unique(&source.join("e/m")).unwrap();
            w.dirs_moved(&[b"e"]);
            assert_eq!(
                w.changed(&mut buf),
                Changes {
                    unseen_gone: vec![x_id],
                    ..Changes::default()
                },
                "a mount gone elsewhere"
            );
            w.dirs_moved(&[b"e"]);
            assert_eq!(w.changed(&mut buf), Changes::default(), "its detach, the read before");
            umount(&source.join("e/m"));
            assert_eq!(
                reported(&w),
                placed(vec![place_of(&source.join("e/m"))], vec![(id, true)])
            );
        });
    }

    /// When mount events are lost, everything has changed, and the mounts
    /// under the source are learned anew: one whose attach was lost is
    /// placed when it goes.
    #[test]
    fn lost_mount_events_are_a_change_everywhere_and_mounts_are_learned_anew() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let (source, elsewhere) = (base.join("src"), base.join("elsewhere"));
            let inside = source.join("sub");
            std::fs::create_dir_all(&inside).unwrap();
            std::fs::create_dir_all(&elsewhere).unwrap();
            let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
            // More attaches elsewhere than the group holds (16,384 by
            // default; binds of directories on themselves, each still
            // there when its attach is read, so no change by itself), then
            // the mount whose attach is lost.
            let max: usize = std::fs::read_to_string("/proc/sys/fs/fanotify/max_queued_events")
                .map_or(16384, |s| s.trim().parse().unwrap());
            for i in 0..=max {
                let d = elsewhere.join(i.to_string());
                std::fs::create_dir(&d).unwrap();
                mount_at(&d, &d, libc::MS_BIND);
            }
            mount_tmpfs(&inside);
            let id = sys::mount_id_unique(&inside).unwrap();
            let c = reported(&w);
            assert!(c.everywhere && !c.mounts.contains(&(id, false)), "events lost: {c:?}");
            umount(&inside);
            assert_eq!(reported(&w), placed(vec![place_of(&inside)], vec![(id, true)]));
        });
    }

    /// A mount moved (`mount --move`) takes the mounts on it along without
    /// an event of theirs: they are learned anew, into the source with it,
    /// or where a directory renamed into the source finds them.
    #[test]
    fn mounts_on_a_moved_mount_are_learned_anew() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let source = base.join("src");
            std::fs::create_dir_all(&source).unwrap();
            let mv = |from: &Path, to: &Path| mount_at(from, to, libc::MS_MOVE);
            // A tmpfs outside with a mount on it, for each case.
            let with_child = |n: &str| {
                let q = base.join(n).join("q");
                std::fs::create_dir_all(&q).unwrap();
                mount_tmpfs(&q);
                std::fs::create_dir(q.join("c")).unwrap();
                mount_tmpfs(&q.join("c"));
                q
            };
            let (q1, q2) = (with_child("o1"), with_child("o2"));
            std::fs::create_dir_all(base.join("p/moved")).unwrap();
            let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
            // Moved into the source: a change everywhere, and the mount on
            // it known (on the tmpfs, so not placed: a change everywhere
            // when it goes).
            std::fs::create_dir(source.join("q")).unwrap();
            mv(&q1, &source.join("q"));
            let c = reported(&w);
            assert!(c.everywhere, "a mount moved into the source: {c:?}");
            umount(&source.join("q/c"));
            let c = reported(&w);
            assert!(c.everywhere && c.unseen_gone.is_empty(), "the mount on it, gone: {c:?}");
            // Moved elsewhere (no change), then a directory holding it
            // renamed into the source: the mount on it is found there.
            mv(&q2, &base.join("p/moved"));
            let c = w.changed(&mut vec![0u8; 4096]);
            assert!(!c.everywhere && c.places.is_empty(), "a mount moved elsewhere: {c:?}");
            std::fs::rename(base.join("p"), source.join("p")).unwrap();
            w.dirs_moved(&[b"p"]);
            assert!(!w.changed(&mut vec![0u8; 4096]).any(), "learning");
            umount(&source.join("p/moved/c"));
            let c = reported(&w);
            assert!(
                c.everywhere && c.unseen_gone.is_empty(),
                "the mount on the moved one, gone: {c:?}"
            );
        });
    }

    /// A directory above the source renamed: a change everywhere, and the
    /// mounts under the source are those under its new path.
    #[test]
    fn a_source_renamed_above_is_followed() {
        in_own_namespace(|| {
            let (_dir, base) = scratch();
            let inside = base.join("above/src/sub");
            std::fs::create_dir_all(&inside).unwrap();
            let w = MountWatch::new(&base.join("above/src")).expect("mount events (Linux 6.15) on this machine");
            std::fs::rename(base.join("above"), base.join("moved")).unwrap();
            let inside = base.join("moved/src/sub");
            mount_tmpfs(&inside);
            let id = sys::mount_id_unique(&inside).unwrap();
            let c = reported(&w);
            assert!(
                c.everywhere && c.mounts == [(id, false)] && c.places.contains(&place_of(&inside)),
                "a mount under the source, after a rename above it: {c:?}"
            );
            umount(&inside);
            assert_eq!(reported(&w), placed(vec![place_of(&inside)], vec![(id, true)]));
        });
    }

    #[test]
    fn parses_attaches_detaches_and_lost_events() {
        let mut buf = event(FAN_MNT_ATTACH, 0x8000_002b);
        buf.extend(event(FAN_MNT_DETACH, 0x8000_002c));
        buf.extend(event(FAN_MNT_ATTACH | FAN_MNT_DETACH, 7));
        let mut events = Vec::new();
        assert!(!parse(&buf, &mut events));
        let both = FAN_MNT_ATTACH | FAN_MNT_DETACH;
        assert_eq!(
            events,
            [(FAN_MNT_ATTACH, 0x8000_002b), (FAN_MNT_DETACH, 0x8000_002c), (both, 7)]
        );
        // A truncated event is not read: the first, whole, is; the
        // second, cut, is not.
        assert!(!parse(&buf[..50], &mut events));
        assert_eq!(events.len(), 4);
        let mut lost = event(libc::FAN_Q_OVERFLOW, 0);
        lost.truncate(24);
        lost[0] = 24;
        assert!(parse(&lost, &mut events));
    }
}
