//! The source watcher: fanotify on every filesystem under the source, read
//! by a thread of its own and handed on as [`Event`]s.
//!
//! # Design
//! One fanotify group (`fanotify_init` with `FAN_REPORT_DFID_NAME |
//! FAN_REPORT_FID`, so events name objects by file handle, never by an open
//! descriptor) holds a *filesystem* mark (`FAN_MARK_FILESYSTEM`) on the
//! source's filesystem and on every filesystem mounted below the source when
//! the watch starts. A filesystem mark is the only kind that reports
//! directory-entry events (create, delete, move) for a whole tree; it also
//! reports every change elsewhere on the same filesystem, so the thread that
//! applies the events must make an unknown object cost one hash lookup.
//!
//! Each event becomes at most three [`Event`]s:
//! - a name created, deleted or moved in a directory: [`Event::Name`] with
//!   the directory's handle and the name (from the `DFID_NAME` record);
//! - attributes changed (`FAN_ATTRIB`: chmod, chown, utimes, link count,
//!   xattrs; `FAN_MOVE_SELF`: a rename moves the object's ctime):
//!   [`Event::Attrib`] with the object's handle (`FID` record);
//! - data changed (`FAN_MODIFY`: write, truncate; `FAN_CLOSE_WRITE`: closed
//!   after writing, which also covers writes through a shared mapping that
//!   `FAN_MODIFY` never reports): [`Event::Data`] with the object's handle.
//!
//! After a short read the thread waits 1 ms before polling again, so that
//! events from a busy filesystem are read in batches rather than a wake-up
//! for every few (a change waits at most that much longer).
//!
//! Another thread can wait for the watcher to catch up ([`Syncer::sync`]):
//! the watcher then reads the group until it is empty and applies what it
//! read before it answers, so every event queued before the call has been
//! applied when it returns. A request that has just seen a change in the
//! source (an open that finds a file's stamp moved, a drop) uses it to
//! apply that change's events *before* it answers rather than some time
//! after, when their kernel invalidations could land in the middle of the
//! caller's next request (see `fs/watched.rs`).
//!
//! Events caused by this process (the daemon's own changes, made through the
//! mount and already applied to its caches) are skipped by pid. A queue
//! overflow (`FAN_Q_OVERFLOW`: the kernel dropped events, the group's queue
//! holds 16,384) becomes [`Event::Overflow`]; whoever applies events must
//! then assume anything changed.
//!
//! The kernel's own rules (fanotify(7)): a file handle stays valid as long
//! as the object exists; events on one object that are still queued may be
//! merged; the event is queued after the change is visible, so anything
//! that read the source before an event was read from the queue may have
//! seen the old state (the applier deals with that race, see
//! `fs/watched.rs`).
//!
//! Mounts attached or detached at or under the source, which no filesystem
//! mark reports, come from a second group on the mount namespace
//! (`watch/mounts.rs`, Linux 6.15): where the mount point's place is known,
//! as the name changed there ([`Event::Name`] of its parent directory) with
//! an [`Event::Mount`]; otherwise as [`Event::Mounts`], after which whoever
//! applies events must assume anything under the source changed, and that
//! the filesystems marked may no longer be the ones mounted.
//!
//! # What it cannot see
//! Changes the kernel never hears of: remote changes on a network
//! filesystem (NFS, SMB, CephFS, a FUSE filesystem); filesystems
//! mounted below the source after the watch started (until a lookup
//! enters one and marks it); and, before Linux 6.15, mounts attached or
//! detached under the source. Writes through a
//! shared mapping are reported only when the writer closes the file.
//! [`Watcher::new`] refuses a source whose filesystem's type is known to
//! have remote writers or no file ids unless told to watch anyway, so
//! `--coherence auto` falls back to timeouts there. Such a filesystem
//! mounted *below* the source (a user's sshfs in a home directory under a
//! source of `/home`), or one below it that cannot be marked (a user's FUSE
//! mount, which root may not enter), is left unmarked instead: the rest of
//! the source is watched, and a lookup that enters it finds it unwatched,
//! as for a filesystem mounted there later (`Fs::entered_filesystem`), so
//! what is read there is re-checked after `--revalidate`. One user's mount
//! thus no longer takes the watch from the whole mount.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use parking_lot::{Condvar, Mutex};

use crate::mountinfo::{self, MountEntry};
use crate::sys::{self, Stopper};

mod mounts;

/// What fanotify tells the applier, borrowed from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// `name` was created in, deleted from, or moved into or out of `dir`.
    Name {
        /// The directory.
        dir: Handle<'a>,
        /// The name in it.
        name: &'a [u8],
    },
    /// The object's attributes changed.
    Attrib(Handle<'a>),
    /// The object's data changed.
    Data(Handle<'a>),
    /// Events were lost: anything may have changed.
    Overflow,
    /// A mount at or under the source was attached or detached where no
    /// place for it is known (`watch/mounts.rs`): anything under the
    /// source may have changed, and a filesystem marked may be gone (and
    /// its device number another's).
    Mounts,
    /// The mount with the unique id `id` was attached, detached or moved
    /// at or under the source. Where (`placed`): its mount point's name in
    /// the parent directory comes as an [`Event::Name`] of the same batch,
    /// for each place it left or took (or an [`Event::Mounts`] of the batch
    /// drops everything anyway). `gone`: it is no longer under the
    /// source (a filesystem marked there may be gone with it). Not
    /// `placed`: a mount the watch never saw under the source was detached
    /// or moved, which is a change everywhere if anything cached came
    /// from it.
    Mount {
        /// The mount's unique id (`STATX_MNT_ID_UNIQUE`).
        id: u64,
        /// Whether it left the source.
        gone: bool,
        /// Whether its places are in the batch.
        placed: bool,
    },
}

/// A file handle as fanotify reports it: the filesystem id and the handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle<'a> {
    /// `f_fsid` of the filesystem, packed as [`sys::fsid_of`] does.
    pub fsid: u64,
    /// `struct file_handle`'s `handle_type`.
    pub handle_type: i32,
    /// The handle bytes.
    pub bytes: &'a [u8],
}

/// How long the reader lets events gather after a short read.
const GATHER: Duration = Duration::from_millis(1);

/// The events the marks ask for.
const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_ATTRIB
    | libc::FAN_MODIFY
    | libc::FAN_CLOSE_WRITE
    | libc::FAN_MOVE_SELF
    | libc::FAN_ONDIR;

const NAME_EVENTS: u64 = libc::FAN_CREATE | libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO;
const DATA_EVENTS: u64 = libc::FAN_MODIFY | libc::FAN_CLOSE_WRITE;
/// A rename changes the moved object's ctime, which no `FAN_ATTRIB` reports.
const ATTRIB_EVENTS: u64 = libc::FAN_ATTRIB | libc::FAN_MOVE_SELF;

/// `struct fanotify_event_metadata`'s size.
const METADATA_LEN: usize = 24;
/// Info record types (`FAN_EVENT_INFO_TYPE_*`).
const INFO_FID: u8 = 1;
const INFO_DFID_NAME: u8 = 2;
const INFO_DFID: u8 = 3;

/// Whether a filesystem of type `fstype` cannot be watched: its changes can
/// come from elsewhere (other machines) or it gives no file ids. These are
/// the network and FUSE filesystems, the same set `slow_source.rs` gives
/// its own defaults for.
fn unwatchable(fstype: &str) -> bool {
    crate::slow_source::is_slow(fstype)
}

/// One filesystem the watcher has marked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marked {
    /// Where it is mounted (the source itself, or a mount below it).
    pub mount_point: PathBuf,
    /// Its type.
    pub fstype: String,
    /// Its `f_fsid`.
    pub fsid: u64,
    /// Its device number (`st_dev`).
    pub dev: u64,
    /// The unique id of the mount marked (0 where the kernel gives none):
    /// with the device, what tells this filesystem from one mounted later
    /// with the device number it gave back.
    pub mount_id: u64,
}

/// A filesystem below the source left unmarked when the watch started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmarked {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Its type.
    pub fstype: String,
    /// Why it was not marked.
    pub why: String,
}

/// A fanotify group with marks on the source's filesystems.
#[derive(Debug)]
pub struct Watcher {
    fan: OwnedFd,
    stop: OwnedFd,
    /// Signalled by [`Syncer::sync`]: a thread waits for a round.
    wake: OwnedFd,
    rounds: Arc<Rounds>,
    marked: Vec<Marked>,
    unmarked: Vec<Unmarked>,
    /// The mount namespace's group (None before Linux 6.15).
    mounts: Option<mounts::MountWatch>,
    own_pid: i32,
}

/// The catch-up protocol between [`Syncer::sync`] and [`Watcher::run`].
///
/// A caller takes a number (`asked`, incremented) and wakes the watcher;
/// the watcher, at the start of each round, reads `asked`, then reads the
/// group until it is empty, applies what it read, and publishes the number
/// it read as `done`. A caller whose number is `<= done` was served by a
/// round that began reading after the caller asked, so that round read
/// every event queued before the caller asked (the kernel queues an event
/// before the system call that caused it returns).
#[derive(Debug, Default)]
struct Rounds {
    asked: AtomicU64,
    done: Mutex<u64>,
    advanced: Condvar,
}

/// Why watching is not possible (so `auto` falls back to timeouts).
#[derive(Debug)]
pub struct Unwatchable(pub String);

impl std::fmt::Display for Unwatchable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unwatchable {}

impl Watcher {
    /// Marks the filesystem of `source` and of every mount below it. With
    /// `force` false, a filesystem type that has remote writers or no file
    /// ids is refused ([`Unwatchable`] in the error chain).
    pub fn new(source: &Path, force: bool) -> Result<Self> {
        let source = source
            .canonicalize()
            .with_context(|| format!("resolving {}", source.display()))?;
        let text = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
        let mounts = mountinfo::parse_mountinfo(&text);
        let targets = filesystems_under(&mounts, &source);
        // Non-blocking: a round reads until the group is empty (EAGAIN).
        let fan = sys::fanotify_init(
            libc::FAN_CLASS_NOTIF | libc::FAN_NONBLOCK | libc::FAN_REPORT_DFID_NAME | libc::FAN_REPORT_FID,
        )
        .map_err(|e| {
            anyhow::Error::new(Unwatchable(format!(
                "fanotify_init: {e} (a filesystem watch needs CAP_SYS_ADMIN and Linux 5.9 or later)"
            )))
        })?;
        let mut marked = Vec::new();
        let mut unmarked = Vec::new();
        for (point, fstype) in targets {
            let below = point != source;
            let why = if !force && unwatchable(&fstype) {
                format!(
                    "{} is {fstype}: changes made elsewhere are not reported there",
                    point.display()
                )
            } else {
                match Self::mark_at(&fan, &point, &fstype) {
                    Ok(m) => {
                        marked.push(m);
                        continue;
                    }
                    Err(e) => format!("{} ({fstype}): {e:#}", point.display()),
                }
            };
            if !below {
                return Err(anyhow::Error::new(Unwatchable(why)));
            }
            tracing::warn!(
                "not watching a filesystem mounted under the source ({why}): changes made directly there are \
                 seen after --revalidate, as with coherence ttl; the rest of the source is watched"
            );
            unmarked.push(Unmarked {
                mount_point: point,
                fstype,
                why,
            });
        }
        if marked.is_empty() {
            bail!("no mount holds {}", source.display());
        }
        let mounts = mounts::MountWatch::new(&source)
            .inspect_err(|e| {
                tracing::warn!(
                    "mounts attached or detached under the source are not watched ({e:#}): a filesystem mounted \
                     there in place of another is seen only after a drop"
                )
            })
            .ok();
        Ok(Self {
            fan,
            stop: sys::eventfd()?,
            wake: sys::eventfd()?,
            rounds: Arc::default(),
            marked,
            unmarked,
            mounts,
            own_pid: std::process::id() as i32,
        })
    }

    /// Marks the filesystem mounted at `point` (of type `fstype`).
    fn mark_at(fan: &OwnedFd, point: &Path, fstype: &str) -> Result<Marked> {
        let cpath = sys::cstr(std::os::unix::ffi::OsStrExt::as_bytes(point.as_os_str()))?;
        let flags = libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM;
        sys::fanotify_mark(fan.as_fd(), flags, MASK, &cpath).context("fanotify_mark")?;
        let fd = sys::open_path(&cpath, libc::O_RDONLY | libc::O_DIRECTORY).context("opening it")?;
        let (fsid, _) = sys::fs_ids(fd.as_fd()).context("statfs")?;
        let dev = sys::fstat(fd.as_fd()).context("fstat")?.st_dev;
        let mount_id = sys::mount_id_unique_at(fd.as_fd(), sys::EMPTY).unwrap_or(0);
        Ok(Marked {
            mount_point: point.to_path_buf(),
            fstype: fstype.to_string(),
            fsid,
            dev,
            mount_id,
        })
    }

    /// The filesystems under the source left unmarked at the start (see
    /// the module docs), with why.
    pub fn unmarked(&self) -> &[Unmarked] {
        &self.unmarked
    }

    /// The filesystems marked.
    pub fn marked(&self) -> &[Marked] {
        &self.marked
    }

    /// A handle that adds marks to this watch (for filesystems mounted under
    /// the source later).
    pub fn marker(&self) -> Result<Marker> {
        Ok(Marker(
            self.fan.try_clone().context("duplicating the fanotify descriptor")?,
        ))
    }

    /// A handle that ends [`run`](Self::run) when signalled.
    pub fn stopper(&self) -> Result<Stopper> {
        Stopper::of(&self.stop).context("duplicating the watcher's stop descriptor")
    }

    /// A handle that waits for this watch to catch up (see [`Syncer`]).
    pub fn syncer(&self) -> Result<Syncer> {
        Ok(Syncer {
            wake: self
                .wake
                .try_clone()
                .context("duplicating the watcher's wake descriptor")?,
            rounds: self.rounds.clone(),
        })
    }

    /// Reads events until stopped, handing each batch (the events of one
    /// `read`) to `apply`. Returns when the stopper fires.
    pub fn run(&self, mut apply: impl FnMut(&[Event<'_>])) -> Result<()> {
        // 64 KiB holds several hundred events; the kernel returns as many
        // whole events as fit.
        let mut buf = vec![0u8; 64 << 10];
        // The stop and wake descriptors first after the group's: the pause
        // below polls `fds[1..]`.
        let mut fds = vec![self.fan.as_fd(), self.stop.as_fd(), self.wake.as_fd()];
        fds.extend(self.mounts.as_ref().map(|m| m.fd()));
        loop {
            let ready = sys::poll_readable(&fds).context("polling the watch")?;
            if ready[1] {
                return Ok(());
            }
            // Acquire: pairs with the AcqRel increment in `Syncer::sync`;
            // every event queued before that increment is read below.
            let asked = self.rounds.asked.load(Ordering::Acquire);
            sys::eventfd_clear(self.wake.as_fd());
            // One round: read until the group is empty.
            let mut short = true;
            loop {
                let n = match sys::read(self.fan.as_fd(), &mut buf) {
                    Ok(n) => n,
                    Err(e) if e.errno() == libc::EINTR => continue,
                    Err(e) if e.errno() == libc::EAGAIN => break,
                    Err(e) => bail!("reading fanotify events: {e}"),
                };
                let mut events = Vec::with_capacity(n / 64);
                let mut dirs_moved = Vec::new();
                parse(&buf[..n], self.own_pid, &mut events, &mut dirs_moved);
                if let Some(m) = &self.mounts {
                    if events.iter().any(|e| matches!(e, Event::Overflow)) {
                        m.names_lost();
                    }
                    if !dirs_moved.is_empty() {
                        m.dirs_moved(&dirs_moved);
                    }
                    m.names_changed(events.iter().filter_map(|e| match e {
                        Event::Name { dir, name } => Some((dir.fsid, dir.handle_type, dir.bytes, *name)),
                        _ => None,
                    }));
                }
                if !events.is_empty() {
                    if crate::fault::watch_read_panics() {
                        panic!("injected fault: a panic in the watcher's read loop");
                    }
                    apply(&events);
                }
                // The kernel returns every whole event that fits: a read
                // that left room for more found the group empty.
                short = n < buf.len() / 2;
                if short {
                    break;
                }
            }
            // Then the mounts (a non-blocking read that finds nothing, if
            // none moved): within the round, so that a caller catching up
            // sees a mount change made before it asked applied too.
            if let Some(m) = &self.mounts {
                let c = m.changed(&mut buf);
                if c.everywhere {
                    // The mounts placed in the batch are counted as such.
                    let mut events = vec![Event::Mounts];
                    events.extend(
                        c.mounts
                            .iter()
                            .map(|&(id, gone)| Event::Mount { id, gone, placed: true }),
                    );
                    apply(&events);
                } else if c.any() {
                    // Each place as the name changed there, and which
                    // mounts moved.
                    let mut events: Vec<Event<'_>> = c
                        .places
                        .iter()
                        .map(|p| Event::Name {
                            dir: Handle {
                                fsid: p.fsid,
                                handle_type: p.dir.handle_type(),
                                bytes: p.dir.bytes(),
                            },
                            name: &p.name,
                        })
                        .collect();
                    events.extend(
                        c.mounts
                            .iter()
                            .map(|&(id, gone)| Event::Mount { id, gone, placed: true }),
                    );
                    events.extend(c.unseen_gone.iter().map(|&id| Event::Mount {
                        id,
                        gone: true,
                        placed: false,
                    }));
                    apply(&events);
                }
            }
            self.rounds.serve(asked);
            if short {
                // Events trickle in a few at a time from a busy filesystem,
                // and a wake-up apiece dominated this thread's time. Let
                // them gather for a moment (a change waits at most this
                // much longer to be applied), unless a thread asks to catch
                // up meanwhile. (Measured: the thread's CPU time for a
                // churn of 100,000 files elsewhere fell by a third, 243-282
                // ticks to 166-192 in three pairs.)
                let woken = sys::poll_readable_for(&fds[1..], GATHER).context("polling the watch")?;
                if woken[0] {
                    return Ok(());
                }
            }
        }
    }
}

impl Rounds {
    /// Publishes that every caller numbered up to `asked` is served.
    fn serve(&self, asked: u64) {
        let mut done = self.done.lock();
        if asked > *done {
            *done = asked;
            drop(done);
            self.advanced.notify_all();
        }
    }
}

/// Waits for a running watch to apply what is queued (see the module docs).
#[derive(Debug)]
pub struct Syncer {
    wake: OwnedFd,
    rounds: Arc<Rounds>,
}

impl Syncer {
    /// Waits until the watcher has applied every event queued before this
    /// call, at most `timeout`; returns whether it got there. (A watch that
    /// stopped, or whose thread is stalled, lets it time out.)
    pub fn sync(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        // AcqRel: pairs with the Acquire load at the start of a round in
        // `Watcher::run`: a round that reads this number reads the group
        // after it.
        let want = self.rounds.asked.fetch_add(1, Ordering::AcqRel) + 1;
        if sys::eventfd_signal(self.wake.as_fd()).is_err() {
            return false;
        }
        let mut done = self.rounds.done.lock();
        while *done < want {
            if self.rounds.advanced.wait_until(&mut done, deadline).timed_out() {
                return *done >= want;
            }
        }
        true
    }
}

/// Adds filesystem marks to a running watch.
#[derive(Debug)]
pub struct Marker(OwnedFd);

impl Marker {
    /// Marks the filesystem holding `name` under `dir` (a mount the request
    /// path has just entered). Refuses filesystem types that
    /// [`Watcher::new`] refuses without `force`.
    pub fn mark(&self, dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr) -> Result<(), String> {
        let fd = sys::openat(dir, name, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
            .map_err(|e| format!("open: {e}"))?;
        let dev = sys::fstat(fd.as_fd()).map_err(|e| format!("fstat: {e}"))?.st_dev;
        let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("mountinfo: {e}"))?;
        let fstype = mountinfo::parse_mountinfo(&text)
            .into_iter()
            .find(|m| m.st_dev() == dev)
            .map(|m| m.fstype)
            .ok_or("not in /proc/self/mountinfo")?;
        if unwatchable(&fstype) {
            return Err(format!("{fstype}: changes made elsewhere are not reported there"));
        }
        let path = sys::proc_path(fd.as_fd());
        sys::fanotify_mark(
            self.0.as_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            MASK,
            &path,
        )
        .map_err(|e| format!("fanotify_mark: {e}"))
    }
}

/// The mount points of the filesystem holding `source` and of every mount
/// below it, with their types, each filesystem once (by device).
fn filesystems_under(mounts: &[MountEntry], source: &Path) -> Vec<(PathBuf, String)> {
    // The mount holding the source: the longest mount point that is a
    // prefix of it (later lines win on equal points: they are mounted over).
    let holder = mounts
        .iter()
        .filter(|m| source.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len());
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let mut devs = Vec::new();
    if let Some(h) = holder {
        out.push((source.to_path_buf(), h.fstype.clone()));
        devs.push(h.dev);
    }
    for m in mounts {
        if m.mount_point != source && m.mount_point.starts_with(source) && !devs.contains(&m.dev) {
            devs.push(m.dev);
            out.push((m.mount_point.clone(), m.fstype.clone()));
        }
    }
    out
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    u32_at(b, at) as i32
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

/// One info record's handle and, for `DFID_NAME`, the name after it.
fn parse_fid(rec: &[u8]) -> Option<(Handle<'_>, &[u8])> {
    // header (4) + fsid (8) + handle_bytes (4) + handle_type (4) + bytes + [name NUL pad]
    if rec.len() < 20 {
        return None;
    }
    let fsid = sys::fsid_of([i32_at(rec, 4), i32_at(rec, 8)]);
    let len = u32_at(rec, 12) as usize;
    let handle_type = i32_at(rec, 16);
    let bytes = rec.get(20..20 + len)?;
    let rest = &rec[20 + len..];
    let name = rest.split(|&c| c == 0).next().unwrap_or_default();
    Some((
        Handle {
            fsid,
            handle_type,
            bytes,
        },
        name,
    ))
}

/// Parses the events in `buf` (whole events, as `read` returns them) into
/// `out`, skipping those caused by `own_pid` and anything malformed. Adds
/// to `dirs_moved` the name each directory moved had before (`FAN_MOVED_FROM`
/// with `FAN_ONDIR`; empty if the event gave none; those the daemon moved,
/// within the source, are skipped).
pub fn parse<'a>(buf: &'a [u8], own_pid: i32, out: &mut Vec<Event<'a>>, dirs_moved: &mut Vec<&'a [u8]>) {
    let mut at = 0;
    while at + METADATA_LEN <= buf.len() {
        let event_len = u32_at(buf, at) as usize;
        if event_len < METADATA_LEN || at + event_len > buf.len() {
            break;
        }
        let ev = &buf[at..at + event_len];
        at += event_len;
        let metadata_len = u16_at(ev, 6) as usize;
        let mask = u64_at(ev, 8);
        let pid = i32_at(ev, 20);
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            out.push(Event::Overflow);
            continue;
        }
        if pid == own_pid {
            continue;
        }
        let mut dfid_name = None;
        let mut fid = None;
        let mut rat = metadata_len.max(METADATA_LEN);
        while rat + 4 <= ev.len() {
            let info_type = ev[rat];
            let len = u16_at(ev, rat + 2) as usize;
            if len < 4 || rat + len > ev.len() {
                break;
            }
            let rec = &ev[rat..rat + len];
            rat += len;
            match info_type {
                INFO_DFID_NAME => dfid_name = parse_fid(rec),
                INFO_DFID if dfid_name.is_none() => dfid_name = parse_fid(rec).map(|(h, _)| (h, &b"."[..])),
                INFO_FID => fid = parse_fid(rec).map(|(h, _)| h),
                _ => {}
            }
        }
        if mask & NAME_EVENTS != 0
            && let Some((dir, name)) = dfid_name
            && !name.is_empty()
            && name != b"."
        {
            out.push(Event::Name { dir, name });
        }
        if mask & libc::FAN_MOVED_FROM != 0 && mask & libc::FAN_ONDIR != 0 {
            dirs_moved.push(dfid_name.map_or(&b""[..], |(_, name)| name));
        }
        // The object: the FID record, or for an event on a directory
        // reported only by its own handle, that handle (name ".").
        let obj = fid.or_else(|| dfid_name.filter(|(_, n)| *n == b".").map(|(h, _)| h));
        if mask & NAME_EVENTS == 0
            && let Some(obj) = obj
        {
            if mask & ATTRIB_EVENTS != 0 {
                out.push(Event::Attrib(obj));
            }
            if mask & DATA_EVENTS != 0 {
                out.push(Event::Data(obj));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, fsid: [i32; 2], handle: &[u8], name: Option<&[u8]>) -> Vec<u8> {
        let mut r = vec![kind, 0, 0, 0];
        r.extend_from_slice(&fsid[0].to_ne_bytes());
        r.extend_from_slice(&fsid[1].to_ne_bytes());
        r.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        r.extend_from_slice(&1i32.to_ne_bytes());
        r.extend_from_slice(handle);
        if let Some(n) = name {
            r.extend_from_slice(n);
            r.push(0);
        }
        while r.len() % 4 != 0 {
            r.push(0);
        }
        let len = r.len() as u16;
        r[2..4].copy_from_slice(&len.to_ne_bytes());
        r
    }

    fn event(mask: u64, pid: i32, records: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = records.concat();
        let mut e = Vec::new();
        e.extend_from_slice(&((METADATA_LEN + body.len()) as u32).to_ne_bytes());
        e.push(3); // vers
        e.push(0);
        e.extend_from_slice(&(METADATA_LEN as u16).to_ne_bytes());
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes());
        e.extend_from_slice(&pid.to_ne_bytes());
        e.extend_from_slice(&body);
        e
    }

    #[test]
    fn events_become_names_attributes_data_and_overflow() {
        let dir = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let file = [9u8, 9, 9, 9, 9, 9, 9, 9];
        let mut buf = Vec::new();
        buf.extend(event(
            libc::FAN_CREATE,
            77,
            &[
                record(INFO_DFID_NAME, [5, 6], &dir, Some(b"new.txt")),
                record(INFO_FID, [5, 6], &dir, None),
            ],
        ));
        buf.extend(event(
            libc::FAN_MODIFY | libc::FAN_ATTRIB,
            77,
            &[
                record(INFO_DFID_NAME, [5, 6], &dir, Some(b"f")),
                record(INFO_FID, [5, 6], &file, None),
            ],
        ));
        // The daemon's own change: skipped.
        buf.extend(event(
            libc::FAN_DELETE,
            42,
            &[record(INFO_DFID_NAME, [5, 6], &dir, Some(b"x"))],
        ));
        // An attribute change of a directory reported by its own handle.
        buf.extend(event(
            libc::FAN_ATTRIB | libc::FAN_ONDIR,
            77,
            &[record(INFO_DFID_NAME, [5, 6], &dir, Some(b"."))],
        ));
        // A renamed file: its ctime moved.
        buf.extend(event(libc::FAN_MOVE_SELF, 77, &[record(INFO_FID, [5, 6], &file, None)]));
        buf.extend(event(libc::FAN_Q_OVERFLOW, -1, &[]));
        // The daemon's own directory move: skipped, and no directory moved
        // as far as the mount watch is concerned.
        buf.extend(event(
            libc::FAN_MOVED_FROM | libc::FAN_ONDIR,
            42,
            &[record(INFO_DFID_NAME, [5, 6], &dir, Some(b"d"))],
        ));
        let (mut out, mut moved) = (Vec::new(), Vec::new());
        parse(&buf, 42, &mut out, &mut moved);
        assert!(moved.is_empty(), "no directory moved but the daemon's: {moved:?}");
        let h = |b: &'static [u8]| Handle {
            fsid: sys::fsid_of([5, 6]),
            handle_type: 1,
            bytes: b,
        };
        assert_eq!(
            out,
            vec![
                Event::Name {
                    dir: h(&[1, 2, 3, 4, 5, 6, 7, 8]),
                    name: b"new.txt"
                },
                Event::Attrib(h(&[9; 8])),
                Event::Data(h(&[9; 8])),
                Event::Attrib(h(&[1, 2, 3, 4, 5, 6, 7, 8])),
                Event::Attrib(h(&[9; 8])),
                Event::Overflow,
            ]
        );
        // A file moved away, a directory moved in, then one moved away.
        let moved = |mask| event(mask, 77, &[record(INFO_DFID_NAME, [5, 6], &dir, Some(b"m"))]);
        let dirs_moved = |mask| {
            let buf = moved(mask);
            let mut names = Vec::new();
            parse(&buf, 42, &mut Vec::new(), &mut names);
            names.iter().map(|n| n.to_vec()).collect::<Vec<_>>()
        };
        assert!(dirs_moved(libc::FAN_MOVED_FROM).is_empty(), "a file moved");
        assert!(dirs_moved(libc::FAN_MOVED_TO | libc::FAN_ONDIR).is_empty());
        assert_eq!(dirs_moved(libc::FAN_MOVED_FROM | libc::FAN_ONDIR), [b"m".to_vec()]);
    }

    #[test]
    fn a_truncated_buffer_yields_the_whole_events_only() {
        let dir = [1u8; 8];
        let mut buf = event(libc::FAN_CREATE, 1, &[record(INFO_DFID_NAME, [0, 0], &dir, Some(b"a"))]);
        let whole = buf.len();
        buf.extend(event(
            libc::FAN_CREATE,
            1,
            &[record(INFO_DFID_NAME, [0, 0], &dir, Some(b"b"))],
        ));
        let mut out = Vec::new();
        parse(&buf[..whole + 10], 0, &mut out, &mut Vec::new());
        assert_eq!(out.len(), 1);
        // A record claiming more bytes than the event has is ignored.
        let mut bad = event(libc::FAN_CREATE, 1, &[record(INFO_DFID_NAME, [0, 0], &dir, Some(b"c"))]);
        bad[METADATA_LEN + 2] = 0xff;
        out.clear();
        parse(&bad, 0, &mut out, &mut Vec::new());
        assert!(out.is_empty());
    }

    #[test]
    fn the_filesystems_under_a_source_are_its_own_and_the_mounts_below() {
        let m = |dev: (u32, u32), point: &str, fstype: &str| MountEntry {
            id: 0,
            parent_id: 1,
            dev,
            root: "/".into(),
            mount_point: point.into(),
            fstype: fstype.into(),
            source: "x".into(),
        };
        let mounts = vec![
            m((8, 1), "/", "ext4"),
            m((0, 40), "/srv", "xfs"),
            m((0, 41), "/srv/data/nfs", "nfs4"),
            m((0, 40), "/srv/data/bind", "xfs"),
            m((0, 42), "/srvother", "tmpfs"),
        ];
        let got = filesystems_under(&mounts, Path::new("/srv/data"));
        assert_eq!(
            got,
            vec![
                (PathBuf::from("/srv/data"), "xfs".to_string()),
                (PathBuf::from("/srv/data/nfs"), "nfs4".to_string()),
            ]
        );
        assert!(unwatchable("nfs4") && unwatchable("fuse.sshfs") && !unwatchable("ext4"));
    }

    /// Needs root (fanotify filesystem marks); CI runs as root and sets
    /// `RCUFS_REQUIRE_MOUNT`, which turns the skip into a failure.
    fn root() -> bool {
        if sys::is_root() {
            return true;
        }
        assert!(
            std::env::var_os("RCUFS_REQUIRE_MOUNT").is_none(),
            "a fanotify watch needs root, and RCUFS_REQUIRE_MOUNT is set"
        );
        eprintln!("SKIPPED: a fanotify watch needs root");
        false
    }

    #[test]
    fn a_sync_returns_once_the_events_queued_before_it_are_applied() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let w = Watcher::new(dir.path(), false).expect("watching a local temporary directory");
        let syncer = w.syncer().unwrap();
        let stopper = w.stopper().unwrap();
        let seen = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
        let runner = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                w.run(|events| {
                    let ours: Vec<Vec<u8>> = events
                        .iter()
                        .filter_map(|e| match e {
                            Event::Name { name, .. } if name.starts_with(b"made-before-sync-") => Some(name.to_vec()),
                            _ => None,
                        })
                        .collect();
                    if !ours.is_empty() {
                        // A slow applier: a sync that did not wait for it
                        // would return before the names are recorded. (The
                        // mark covers the whole filesystem: other events are
                        // passed over at once.)
                        std::thread::sleep(Duration::from_millis(100));
                        seen.lock().extend(ours);
                    }
                })
            })
        };
        for round in 0..3 {
            let name = format!("made-before-sync-{round}");
            // Created by another process: the watcher skips this one's own.
            let status = std::process::Command::new("touch")
                .arg(dir.path().join(&name))
                .status()
                .unwrap();
            assert!(status.success());
            assert!(
                syncer.sync(Duration::from_secs(10)),
                "round {round}: the sync timed out"
            );
            assert!(
                seen.lock().iter().any(|n| n == name.as_bytes()),
                "round {round}: the sync returned before the create of {name} was applied"
            );
        }
        stopper.stop();
        runner.join().unwrap().unwrap();
        // A stopped watch lets a sync time out rather than hang.
        assert!(!syncer.sync(Duration::from_millis(20)));
    }
}
