//! Caller credentials: the daemon runs as root for every user of an
//! `allow_other` mount, and acts *as the caller* for each operation that
//! creates, opens, changes or lists something in the source, so that the
//! source filesystem itself decides permissions, ownership, setgid
//! inheritance, POSIX ACLs and the clearing of setuid/setgid bits.
//!
//! # How
//! The approach is virtiofsd's: for the duration of one operation, the
//! worker thread takes the caller's filesystem uid and gid and supplementary
//! groups, then gives them back ([`Guard`], an RAII guard). Only the calling
//! thread changes: the raw system calls `setfsuid`, `setfsgid` and
//! `setgroups` act on one thread, whereas glibc's `setgroups` wrapper
//! changes every thread of the process. Switching away from root the groups
//! and the gid change first, then the uid (a non-zero fsuid drops the
//! filesystem capabilities, `CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
//! `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_FSETID`, ...); restoring, the
//! uid comes back first. Because `CAP_DAC_READ_SEARCH` is gone while acting
//! as a user, `open_by_handle_at` cannot be used then: the request logic
//! takes `O_PATH` descriptors from the inode table as root first and does
//! the real operation relative to them (or reopens `/proc/self/fd/N`).
//!
//! FUSE tells the uid, gid and pid (thread id) of the caller, not its
//! supplementary groups nor its capabilities: those come from
//! `/proc/<pid>/status` (`Groups:` and `CapEff:`), kept for a short time
//! ([`TTL`]) in a bounded cache keyed by `(pid, uid, gid)`. A caller whose
//! process is gone gets no supplementary groups and no capabilities, and so
//! does one whose status names other filesystem ids than the request (its
//! pid reused by another process, or its identity changed since).
//!
//! Callers with uid 0 stay root (the daemon's own identity); only a non-zero
//! gid is taken (so that what root creates gets root's group as it would
//! locally).
//!
//! The umask: with `FUSE_DONT_MASK` the kernel leaves the caller's umask to
//! the filesystem (so that a directory's default ACL can override it, as for
//! a local process). [`Creds::act_as`] applies it with the thread's own
//! umask, after `unshare(CLONE_FS)` has given the worker thread an fs
//! context of its own (once per thread); if that ever fails the mode is
//! masked by hand instead ([`Guard::mode`]).
//!
//! # Invariants
//! - A worker thread leaves every operation with the daemon's identity and
//!   a umask of 0: [`Guard`]'s `Drop` restores them, and aborts the process
//!   if it cannot (a thread stuck with another identity would act wrongly
//!   for every later request).
//! - Nothing here changes another thread's credentials.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::FsResult;
use crate::fs::Caller;
use crate::sys;

/// How long what `/proc/<pid>/status` said is trusted.
pub const TTL: Duration = Duration::from_secs(1);

/// Most cached callers.
const CAPACITY: usize = 4096;

/// What `/proc/<pid>/status` says about a caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcCreds {
    /// Supplementary groups.
    pub groups: Box<[u32]>,
    /// Effective capabilities (`CapEff`).
    pub cap_eff: u64,
}

impl ProcCreds {
    /// Parses the `Groups:` and `CapEff:` lines of `/proc/<pid>/status`.
    pub fn parse(status: &str) -> Self {
        let mut out = Self::default();
        for line in status.lines() {
            if let Some(rest) = line.strip_prefix("Groups:") {
                out.groups = rest.split_whitespace().filter_map(|g| g.parse().ok()).collect();
            } else if let Some(rest) = line.strip_prefix("CapEff:") {
                out.cap_eff = u64::from_str_radix(rest.trim(), 16).unwrap_or(0);
            }
        }
        out
    }

    /// Reads them for `pid`, the caller of a request made with filesystem
    /// ids `uid` and `gid`. A process that is gone has none, and so has one
    /// whose filesystem ids are not the request's: the pid was reused (the
    /// caller died after sending it), or the caller changed identity since,
    /// and another process's groups must not be lent to the request.
    fn read(pid: u32, uid: u32, gid: u32) -> Self {
        if pid == 0 {
            return Self::default();
        }
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(s) if fs_ids(&s) == Some((uid, gid)) => {
                let mut p = Self::parse(&s);
                // `CapEff` counts in the caller's own user namespace: root
                // of a namespace a user made (`unshare -r`) has every
                // capability there and none over the daemon's files.
                if !in_daemons_user_ns(pid) {
                    p.cap_eff = 0;
                }
                p
            }
            _ => Self::default(),
        }
    }

    /// Whether capability `cap` is effective.
    pub fn has_cap(&self, cap: u32) -> bool {
        cap < 64 && self.cap_eff & (1 << cap) != 0
    }
}

/// The filesystem uid and gid in a `/proc/<pid>/status` text (the fourth
/// field of its `Uid:` and `Gid:` lines).
fn fs_ids(status: &str) -> Option<(u32, u32)> {
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
    };
    Some((field("Uid:")?, field("Gid:")?))
}

/// Whether process `pid` is in the daemon's user namespace (false if
/// either cannot be read).
fn in_daemons_user_ns(pid: u32) -> bool {
    // The daemon's own namespace, read once: a process cannot leave it
    // once it has threads.
    static OURS: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let ours = OURS.get_or_init(|| std::fs::read_link("/proc/self/ns/user").ok());
    match (std::fs::read_link(format!("/proc/{pid}/ns/user")), ours) {
        (Ok(theirs), Some(ours)) => &theirs == ours,
        _ => false,
    }
}

/// `(pid, uid, gid)` -> what `/proc/<pid>/status` said, and when.
type Cache = HashMap<(u32, u32, u32), (Arc<ProcCreds>, Instant)>;

/// The caller credentials of a filesystem: the cache, and whether switching
/// is possible at all (only a root daemon can take other identities).
#[derive(Debug)]
pub struct Creds {
    switch: bool,
    own_gid: u32,
    own_groups: Box<[u32]>,
    cache: Mutex<Cache>,
}

/// The per-thread state of the umask: not yet tried, own fs context, or
/// `unshare` failed (mask modes by hand).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Umask {
    Unknown,
    Own,
    Shared,
}

thread_local! {
    static UMASK: Cell<Umask> = const { Cell::new(Umask::Unknown) };
}

/// Whether this thread has a umask of its own (unsharing on first use).
fn own_umask() -> bool {
    UMASK.with(|u| {
        if u.get() == Umask::Unknown {
            match sys::unshare_fs() {
                Ok(()) => u.set(Umask::Own),
                Err(e) => {
                    tracing::warn!(error = %e, "unshare(CLONE_FS) failed: the umask is applied to modes by hand");
                    u.set(Umask::Shared);
                }
            }
        }
        u.get() == Umask::Own
    })
}

impl Creds {
    /// Caller credentials; `switch` when the daemon may take other identities (root).
    pub fn new(switch: bool) -> Self {
        Self {
            switch,
            own_gid: sys::egid(),
            own_groups: sys::thread_groups().unwrap_or_default().into(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether acting as `caller` changes the thread's uid (drops root's
    /// filesystem capabilities).
    pub fn takes_uid(&self, caller: Caller) -> bool {
        self.switch && caller.uid != 0
    }

    /// The caller's supplementary groups and capabilities (cached for [`TTL`]).
    pub fn proc_creds(&self, caller: Caller) -> Arc<ProcCreds> {
        let key = (caller.pid, caller.uid, caller.gid);
        if let Some((p, at)) = self.cache.lock().get(&key)
            && at.elapsed() < TTL
        {
            return p.clone();
        }
        self.proc_creds_fresh(caller)
    }

    /// [`proc_creds`](Self::proc_creds) read now, not from the cache (which
    /// it refreshes, so that the identity switch after it reads the same).
    fn proc_creds_fresh(&self, caller: Caller) -> Arc<ProcCreds> {
        let key = (caller.pid, caller.uid, caller.gid);
        let p = Arc::new(ProcCreds::read(caller.pid, caller.uid, caller.gid));
        let now = Instant::now();
        let mut cache = self.cache.lock();
        if cache.len() >= CAPACITY {
            cache.retain(|_, (_, at)| now.duration_since(*at) < TTL);
            if cache.len() >= CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (p.clone(), now));
        p
    }

    /// Whether the caller has `CAP_SYS_ADMIN` (sees `trusted.*` names).
    pub fn caller_is_admin(&self, caller: Caller) -> bool {
        self.proc_creds(caller).has_cap(sys::CAP_SYS_ADMIN)
    }

    /// Acts as `caller` on this thread until the guard is dropped, with the
    /// caller's umask (`caller.umask`) for what is created meanwhile.
    pub fn act_as(&self, caller: Caller) -> FsResult<Guard<'_>> {
        let mut g = Guard::unchanged(self);
        if caller.umask != 0 {
            if own_umask() {
                g.umask = Some(sys::set_thread_umask(caller.umask & 0o777));
            } else {
                g.mask_by_hand = caller.umask & 0o777;
            }
        }
        if !self.switch {
            return Ok(g);
        }
        if caller.uid != 0 {
            let p = self.proc_creds(caller);
            // Each credential change costs a few microseconds: skip the
            // groups when they are the daemon's already (often both empty).
            if p.groups != self.own_groups {
                sys::set_thread_groups(&p.groups)?;
                g.groups = true;
            }
        }
        if caller.gid != self.own_gid {
            sys::set_thread_fsgid(caller.gid)?;
            g.gid = true;
        }
        if caller.uid != 0 {
            sys::set_thread_fsuid(caller.uid)?;
            g.uid = true;
        }
        Ok(g)
    }

    /// For a write through an open descriptor by a caller other than root:
    /// only the filesystem uid becomes the caller's (one credential change
    /// each way), which is what a filesystem asks when it decides whether
    /// the write may use the blocks it reserves for root (ext4's
    /// `s_resuid`, compared with the fsuid). A write otherwise checks
    /// nothing of the writer's identity but `CAP_FSETID` and
    /// `CAP_SYS_RESOURCE` (the daemon does not hold the latter in effect,
    /// see `mount.rs`).
    /// With `keep_fsetid` (the writer holds `CAP_FSETID`), the capability,
    /// which the switch of the filesystem uid drops, is raised again, so
    /// that the write keeps setuid and setgid as it would locally.
    pub fn act_as_owner_of_write(&self, caller: Caller, keep_fsetid: bool) -> FsResult<Guard<'_>> {
        let mut g = Guard::unchanged(self);
        if self.takes_uid(caller) {
            sys::set_thread_fsuid(caller.uid)?;
            g.uid = true;
            if keep_fsetid {
                raise_fsetid();
            }
        }
        Ok(g)
    }

    /// As [`Creds::act_as`] for a change of a file's contents that the
    /// kernel sends without a kill flag (FALLOCATE, COPY_FILE_RANGE):
    /// setuid and setgid go as they would for `caller` locally, by the
    /// `CAP_FSETID` its `/proc` status shows in the daemon's user namespace
    /// (none when it cannot be read). Without it the change runs without
    /// the capability (a root caller as root without it); with it the
    /// capability, which the switch of identity drops, is raised again.
    ///
    /// The status is read afresh, not from the cache: a cached one may be a
    /// process's that has exited since, whose thread id the caller got,
    /// while the caller itself cannot exit during its request. (The read
    /// refreshes the cache, where the switch finds the caller's groups.)
    pub fn act_as_modifier(&self, caller: Caller) -> FsResult<Guard<'_>> {
        if !self.proc_creds_fresh(caller).has_cap(sys::CAP_FSETID) {
            return self.act_as_writer(caller, true);
        }
        let g = self.act_as(caller)?;
        if g.uid {
            raise_fsetid();
        }
        Ok(g)
    }

    /// As [`Creds::act_as`] for a write the kernel marked
    /// `FUSE_WRITE_KILL_SUIDGID` (the writer lacks `CAP_FSETID`): a root
    /// caller keeps root's identity but without `CAP_FSETID`, so that the
    /// source clears the bits as it would for that writer.
    pub fn act_as_writer(&self, caller: Caller, kill_suidgid: bool) -> FsResult<Guard<'_>> {
        let mut g = self.act_as(caller)?;
        if kill_suidgid && self.switch && !g.uid {
            g.fsetid = sys::set_thread_effective_cap(sys::CAP_FSETID, false)?;
        }
        Ok(g)
    }
}

/// Raises `CAP_FSETID` in this thread's effective set after a switch of the
/// filesystem uid dropped it (returning the uid to 0 raises it anyway, so
/// the guard has nothing more to restore). If it cannot be raised the
/// change clears setuid and setgid, as it did before: stricter, never
/// looser.
fn raise_fsetid() {
    if let Err(e) = sys::set_thread_effective_cap(sys::CAP_FSETID, true) {
        tracing::debug!("could not raise CAP_FSETID for a caller holding it: {e}");
    }
}

/// The caller's identity on this thread; dropping it restores the daemon's.
#[must_use = "the identity is given back when the guard is dropped"]
#[derive(Debug)]
pub struct Guard<'a> {
    creds: &'a Creds,
    groups: bool,
    gid: bool,
    uid: bool,
    /// The umask to restore, if one was set.
    umask: Option<u32>,
    mask_by_hand: u32,
    /// `CAP_FSETID` was dropped and must come back.
    fsetid: bool,
}

impl<'a> Guard<'a> {
    /// A guard that has changed nothing yet.
    fn unchanged(creds: &'a Creds) -> Self {
        Guard {
            creds,
            groups: false,
            gid: false,
            uid: false,
            umask: None,
            mask_by_hand: 0,
            fsetid: false,
        }
    }

    /// The mode to pass to a creating call: `mode` itself when the thread's
    /// umask is the caller's, masked by hand otherwise.
    pub fn mode(&self, mode: u32) -> u32 {
        mode & !self.mask_by_hand
    }

    /// Whether the thread's fsuid is not root's now.
    pub fn switched(&self) -> bool {
        self.uid
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let mut ok = true;
        if self.uid {
            ok &= sys::set_thread_fsuid(0).is_ok();
        }
        if self.gid {
            ok &= sys::set_thread_fsgid(self.creds.own_gid).is_ok();
        }
        if self.groups {
            ok &= sys::set_thread_groups(&self.creds.own_groups).is_ok();
        }
        if self.fsetid {
            ok &= sys::set_thread_effective_cap(sys::CAP_FSETID, true).is_ok();
        }
        if let Some(old) = self.umask {
            sys::set_thread_umask(old);
        }
        if !ok {
            tracing::error!("could not restore the daemon's identity on a worker thread: aborting");
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests;
