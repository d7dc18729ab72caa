//! `xtask soak-worker`: one process of the soak, started by `cargo xtask soak`.
//!
//! The worker owns the directory `w<ID>` of the mount and keeps an exact
//! in-memory model of it: the directories, and each file's bytes. No other
//! process changes anything under `w<ID>` (other workers only drop caches of
//! it), so every read must return exactly what the model holds; any
//! difference, and any error from a call that should succeed, ends the worker
//! with a message naming the file, the offset, the expected and the read
//! bytes, and the last operations it did.
//!
//! Changes made directly in the source (under `SRC/w<ID>`) are made visible
//! only in the ways `fuse-fs/SEMANTICS.md` documents: a fresh `open` after the
//! size changed, or a drop of the file's directory; the model is updated as
//! the documented outcome says.
//!
//! Every loop is bounded: the worker stops at the absolute deadline it is
//! given or after `--max-ops` operations, whichever is first; files are at
//! most [`MAX_FILE`] bytes, there are at most [`MAX_FILES`] files and
//! [`MAX_DIRS`] directories.
//!
//! The worker writes its counts (operations by kind, bytes verified) as JSON
//! to the `--stats` file every 2 s and at the end, marked `final` when it
//! finished without a failure.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::util::Rng;

/// Largest file the worker makes.
const MAX_FILE: usize = 512 * 1024;
/// Most files and directories (its root included) a worker keeps.
const MAX_FILES: usize = 24;
const MAX_DIRS: usize = 10;
/// Operations remembered for the failure report.
const HISTORY: usize = 40;

/// `_IOWR('R', 1, struct DropArgs)`, the drop ioctl of
/// `fuse-fs/src/protocol.rs` (`IOC_DROP`, checked there against the C macro):
/// (3 << 30) | (64 << 16) | ('R' << 8) | 1. The argument is 64 bytes: u32
/// version (1), u32 mode (1 pages, 2 dentries, 3 both), u32 flags (0), u32
/// reserved, then six u64 counters the filesystem fills in.
const IOC_DROP: u32 = 0xC040_5201;
const XATTR_DROP: &str = "user.rcufs.drop";

/// Every kind of operation, in the order the summary prints them.
pub const KINDS: &[&str] = &[
    "read-fd1",
    "read-fd2",
    "read-fresh",
    "write",
    "write-fresh",
    "append",
    "truncate",
    "mmap",
    "fsync",
    "create",
    "unlink",
    "rename",
    "rename-over",
    "rename-dir",
    "mkdir",
    "rmdir",
    "stat",
    "stat-gone",
    "readdir",
    "drop-ioctl",
    "drop-xattr",
    "src-reopen",
    "src-drop",
];

/// The classes `--skip` accepts, each a group of kinds.
pub const CLASSES: &[(&str, &[&str])] = &[
    ("mmap", &["mmap"]),
    ("truncate", &["truncate"]),
    (
        "namespace",
        &[
            "create",
            "unlink",
            "rename",
            "rename-over",
            "rename-dir",
            "mkdir",
            "rmdir",
        ],
    ),
    ("drops", &["drop-ioctl", "drop-xattr"]),
    ("src-reopen", &["src-reopen"]),
    ("src-drop", &["src-drop"]),
];

/// The worker's last operations, for the failure report. A static so that
/// the SIGBUS handler can print them too.
static LAST_OPS: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// A SIGBUS (a mapped page beyond what the kernel thinks is the end of the
/// file) ends the worker with its last operations on stderr instead of a bare
/// signal. The worker is single-threaded and faults only while touching a
/// mapping, never inside `LAST_OPS`'s lock, so `try_lock` finds it free; the
/// process exits right after, so nothing runs on after the formatting.
extern "C" fn on_sigbus(_: libc::c_int) {
    let mut msg = String::from(
        "SIGBUS touching a MAP_SHARED mapping inside the file's size (by the model): \
         the mapped file is shorter than the model says\nlast operations (oldest first):",
    );
    if let Ok(h) = LAST_OPS.try_lock() {
        for op in h.iter() {
            msg.push_str("\n  ");
            msg.push_str(op);
        }
    }
    msg.push('\n');
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is alive.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(3);
    }
}

fn install_sigbus_handler() {
    // SAFETY: `on_sigbus` has the signature `signal` expects; installing a
    // handler in this single-threaded process races with nothing.
    unsafe {
        libc::signal(
            libc::SIGBUS,
            on_sigbus as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// The command line of one worker.
struct Args {
    id: usize,
    workers: usize,
    mnt: PathBuf,
    src: PathBuf,
    seed: u64,
    until_ms: u64,
    max_ops: u64,
    skip: BTreeSet<String>,
    stats: PathBuf,
    /// `--src-lock`: see [`SrcLock`].
    src_lock: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        id: 0,
        workers: 1,
        mnt: PathBuf::new(),
        src: PathBuf::new(),
        seed: 1,
        until_ms: 0,
        max_ops: u64::MAX,
        skip: BTreeSet::new(),
        stats: PathBuf::new(),
        src_lock: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => a.id = value.parse()?,
            "--workers" => a.workers = value.parse()?,
            "--mnt" => a.mnt = value.into(),
            "--src" => a.src = value.into(),
            "--seed" => a.seed = value.parse()?,
            "--until-ms" => a.until_ms = value.parse()?,
            "--max-ops" => a.max_ops = value.parse()?,
            "--stats" => a.stats = value.into(),
            "--src-lock" => a.src_lock = Some(value.into()),
            "--skip" => a.skip = value.split(',').filter(|s| !s.is_empty()).map(String::from).collect(),
            _ => bail!("soak-worker: unknown argument {flag}"),
        }
    }
    if a.mnt.as_os_str().is_empty() || a.src.as_os_str().is_empty() || a.stats.as_os_str().is_empty() || a.until_ms == 0
    {
        bail!("soak-worker needs --mnt, --src, --stats and --until-ms");
    }
    Ok(a)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The entry point of `xtask soak-worker ARGS`.
pub fn main(args: &[String]) -> Result<()> {
    let args = parse(args)?;
    install_sigbus_handler();
    let mut w = Worker::new(&args);
    let result = w.run(&args);
    // The failure's message matters more than the counts: a stats file
    // that cannot be written fails only a run that otherwise passed.
    let stats = w.write_stats(result.is_ok());
    match result {
        Ok(()) => stats,
        Err(e) => {
            let mut msg = format!(
                "worker {}: {e:#}\nlast operations of worker {} (oldest first):",
                args.id, args.id
            );
            for h in LAST_OPS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                msg.push_str("\n  ");
                msg.push_str(h);
            }
            bail!("{msg}")
        }
    }
}

/// One file of the model.
struct FileM {
    /// Path relative to the worker's root, e.g. `d3/f17`.
    path: String,
    data: Vec<u8>,
    /// The content before the last change made directly in the source (for
    /// the miscompare report: stale data or something else).
    prev: Option<Vec<u8>>,
    /// The long-lived read-write descriptor and a second, read-only one.
    rw: Option<File>,
    ro: Option<File>,
}

struct Worker {
    id: usize,
    workers: usize,
    /// `MNT/w<ID>` and `SRC/w<ID>`.
    mnt_root: PathBuf,
    src_root: PathBuf,
    mnt: PathBuf,
    files: Vec<FileM>,
    /// Directories relative to the worker's root; `""` is the root itself.
    dirs: Vec<String>,
    /// Names recently removed (they must not exist unless in the model again).
    gone: VecDeque<String>,
    next_name: u64,
    rng: Rng,
    ops: BTreeMap<&'static str, u64>,
    bytes_verified: u64,
    enabled: Vec<&'static str>,
    /// Where the counts go (see `write_stats`).
    stats: PathBuf,
    src_lock: Option<SrcLock>,
}

/// `--kernel-cache` only: keeps other workers' drops (of the mount root or
/// of another worker's root, which cover this worker's files) from running
/// while this worker makes a change in the source visible and reads it back
/// (the `src-reopen` and `src-drop` sequences), by an `flock` on a file
/// outside the mount: exclusive for the sequence, shared for such a drop.
///
/// Why: in the kernel, a read refreshes the file's invalidated attributes
/// with a GETATTR (`fuse_update_attributes`), and if another invalidation of
/// that inode lands while the GETATTR is in flight, the kernel discards the
/// reply as possibly stale (`fuse_change_attributes`: `fi->attr_version`
/// moved) and the read goes on with the size it had: after the file shrank
/// in the source, it reads past the new end (zeros). rcufs cannot prevent
/// that from user space; `fuse-fs/SEMANTICS.md` ("Limits") documents it.
/// Without the lock the soak finds it every 10-20 s (4 workers); with the
/// other workers' drops skipped instead, 600,000 operations in 2 minutes
/// passed.
struct SrcLock(File);

impl SrcLock {
    fn lock(&self, exclusive: bool) -> Result<SrcLockGuard<'_>> {
        let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(self.0.as_raw_fd(), op) } != 0 {
            return Err(std::io::Error::last_os_error()).context("flock of the soak's source-change lock");
        }
        Ok(SrcLockGuard(self))
    }
}

struct SrcLockGuard<'a>(&'a SrcLock);

impl Drop for SrcLockGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `lock`.
        unsafe { libc::flock(self.0.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn io_err(op: &str, path: &Path, e: std::io::Error) -> anyhow::Error {
    IoFailure {
        op: op.to_string(),
        path: path.to_path_buf(),
        to: None,
        error: e,
    }
    .into()
}

/// [`io_err`] of a rename of `from` to `to` (both are diagnosed).
fn rename_err(what: &str, from: &Path, to: &Path, e: std::io::Error) -> anyhow::Error {
    IoFailure {
        op: format!("{what} to {}", to.display()),
        path: from.to_path_buf(),
        to: Some(to.to_path_buf()),
        error: e,
    }
    .into()
}

/// A system call that failed where the model said it must succeed.
#[derive(Debug)]
struct IoFailure {
    op: String,
    path: PathBuf,
    /// A rename's target.
    to: Option<PathBuf>,
    error: std::io::Error,
}

impl std::fmt::Display for IoFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UNEXPECTED ERROR: {} {}: {} (errno {})",
            self.op,
            self.path.display(),
            self.error,
            self.error.raw_os_error().unwrap_or(0)
        )
    }
}

impl std::error::Error for IoFailure {}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

impl Worker {
    fn new(a: &Args) -> Worker {
        // A class name skips its kinds; a kind's name skips that kind.
        let skipped: BTreeSet<&str> = CLASSES
            .iter()
            .filter(|(c, _)| a.skip.contains(*c))
            .flat_map(|(_, kinds)| kinds.iter().copied())
            .chain(KINDS.iter().copied().filter(|k| a.skip.contains(*k)))
            .collect();
        Worker {
            id: a.id,
            workers: a.workers,
            mnt_root: a.mnt.join(format!("w{}", a.id)),
            src_root: a.src.join(format!("w{}", a.id)),
            mnt: a.mnt.clone(),
            files: Vec::new(),
            dirs: vec![String::new()],
            gone: VecDeque::new(),
            next_name: 0,
            rng: Rng((a.seed ^ (a.id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1),
            ops: BTreeMap::new(),
            bytes_verified: 0,
            enabled: KINDS.iter().copied().filter(|k| !skipped.contains(k)).collect(),
            stats: a.stats.clone(),
            src_lock: a.src_lock.as_ref().map(|p| {
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(p)
                    .map(SrcLock)
                    .unwrap_or_else(|e| panic!("opening the source-change lock {}: {e}", p.display()))
            }),
        }
    }

    /// Takes the source-change lock shared, if there is one (see [`SrcLock`]).
    fn src_lock_shared(&self) -> Result<Option<SrcLockGuard<'_>>> {
        self.src_lock.as_ref().map(|l| l.lock(false)).transpose()
    }

    /// Runs `op` (a source-change check) holding the source-change lock
    /// exclusively, if there is one (see [`SrcLock`]).
    fn with_src_lock(&mut self, op: fn(&mut Self) -> Result<()>) -> Result<()> {
        // Out of `self` while held: `op` needs `self` mutably.
        let lock = self.src_lock.take();
        let r = match lock.as_ref().map(|l| l.lock(true)).transpose() {
            Ok(held) => {
                let r = op(self);
                drop(held);
                r
            }
            Err(e) => Err(e),
        };
        self.src_lock = lock;
        r
    }

    fn below(&mut self, n: usize) -> usize {
        (self.rng.next() % n.max(1) as u64) as usize
    }

    fn rand_dir(&mut self) -> String {
        let k = self.below(self.dirs.len());
        self.dirs[k].clone()
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next() % 100 < percent
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.rng.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    fn fresh_name(&mut self, prefix: char) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    fn note(&mut self, s: String) {
        let mut h = LAST_OPS.lock().unwrap_or_else(|e| e.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(s);
    }

    fn count(&mut self, kind: &'static str) {
        *self.ops.entry(kind).or_default() += 1;
    }

    fn mp(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.mnt_root.clone()
        } else {
            self.mnt_root.join(rel)
        }
    }

    fn sp(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.src_root.clone()
        } else {
            self.src_root.join(rel)
        }
    }

    /// Writes the counts so far to the stats file (whole, by rename), with
    /// `final` set once the worker has finished without a failure.
    fn write_stats(&self, last: bool) -> Result<()> {
        let ops: serde_json::Map<String, serde_json::Value> =
            self.ops.iter().map(|(k, v)| ((*k).to_string(), (*v).into())).collect();
        let v = serde_json::json!({"ops": ops, "bytes_verified": self.bytes_verified, "final": last});
        let tmp = self.stats.with_extension("tmp");
        fs::write(&tmp, v.to_string()).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &self.stats).with_context(|| format!("renaming to {}", self.stats.display()))?;
        Ok(())
    }

    fn run(&mut self, a: &Args) -> Result<()> {
        // A starting set: three directories, eight files.
        for _ in 0..3 {
            self.op_mkdir()?;
        }
        for _ in 0..8 {
            self.op_create()?;
        }
        let mut done = 0u64;
        let mut next_stats = now_ms() + 2000;
        while done < a.max_ops && now_ms() < a.until_ms {
            let k = self.below(self.enabled.len());
            let kind = self.enabled[k];
            self.step(kind).map_err(|e| self.diagnose(e))?;
            done += 1;
            if now_ms() >= next_stats {
                // A snapshot, so that a worker killed after another one
                // failed still shows what it verified.
                self.write_stats(false)?;
                next_stats += 2000;
            }
        }
        Ok(())
    }

    /// Adds to a failure what the mount and the source say of each
    /// component of a path (both, for a rename) that the mount said does
    /// not exist (`ENOENT`),
    /// at once and again after a drop of the dentries under the deepest
    /// directory the mount still shows: whether the name is missing in the
    /// source too (a fault of the model or of an earlier operation), missing
    /// only through the mount for a moment, or until a drop (a stale entry
    /// in the dcache).
    fn diagnose(&self, e: anyhow::Error) -> anyhow::Error {
        let Some(f) = e.downcast_ref::<IoFailure>() else {
            return e;
        };
        if f.error.raw_os_error() != Some(libc::ENOENT) {
            return e;
        }
        let mut report = String::new();
        for path in std::iter::once(&f.path).chain(f.to.as_ref()) {
            if let Ok(rel) = path.strip_prefix(&self.mnt_root) {
                report.push_str(&self.components(rel));
            }
        }
        if report.is_empty() {
            return e;
        }
        anyhow::anyhow!("{f}{report}")
    }

    /// What the mount and the source show for each component of `rel` (a
    /// path under this worker's directory): at once, 20 ms later and after
    /// a dentry drop of the deepest directory the mount still shows.
    fn components(&self, rel: &Path) -> String {
        let show = |p: &Path| match fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => "a directory".to_string(),
            Ok(_) => "present".to_string(),
            Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
        };
        let mut report = format!("\nwhat each component of w{}/{} is:", self.id, rel.display());
        let walk = |when: &str, report: &mut String| -> PathBuf {
            let mut deepest = PathBuf::new();
            let mut at = PathBuf::new();
            for c in rel.components() {
                at.push(c);
                let (mnt, src) = (show(&self.mnt_root.join(&at)), show(&self.src_root.join(&at)));
                report.push_str(&format!("\n  {when}: {}: mount {mnt}, source {src}", at.display()));
                if mnt == "a directory" {
                    deepest = at.clone();
                }
            }
            deepest
        };
        let deepest = walk("at once", &mut report);
        std::thread::sleep(Duration::from_millis(20));
        walk("20 ms later", &mut report);
        let dir = self.mp(&deepest.to_string_lossy());
        match drop_dir(&dir, 2, false) {
            Ok(()) => {
                walk(
                    &format!("after a dentry drop of w{}/{}", self.id, deepest.display()),
                    &mut report,
                );
            }
            Err(d) => report.push_str(&format!("\n  the dentry drop of {} failed: {d:#}", dir.display())),
        }
        report
    }

    fn step(&mut self, kind: &'static str) -> Result<()> {
        match kind {
            "read-fd1" | "read-fd2" | "read-fresh" => {
                // Reads are the point: do several per pick.
                for _ in 0..3 {
                    let i = self.below(self.files.len());
                    self.op_read(i, kind)?;
                }
                return Ok(());
            }
            "write" | "write-fresh" => self.op_write(kind == "write-fresh")?,
            "append" => self.op_append()?,
            "truncate" => self.op_truncate()?,
            "mmap" => self.op_mmap()?,
            "fsync" => self.op_fsync()?,
            "create" => {
                if self.files.len() >= MAX_FILES {
                    return Ok(());
                }
                self.op_create()?
            }
            "unlink" => {
                if self.files.len() <= 2 {
                    return Ok(());
                }
                self.op_unlink()?
            }
            "rename" => self.op_rename(false)?,
            "rename-over" => {
                if self.files.len() < 2 {
                    return Ok(());
                }
                self.op_rename(true)?
            }
            "rename-dir" => {
                if !self.op_rename_dir()? {
                    return Ok(());
                }
            }
            "mkdir" => {
                if self.dirs.len() >= MAX_DIRS {
                    return Ok(());
                }
                self.op_mkdir()?
            }
            "rmdir" => {
                if !self.op_rmdir()? {
                    return Ok(());
                }
            }
            "stat" => self.op_stat()?,
            "stat-gone" => {
                if !self.op_stat_gone()? {
                    return Ok(());
                }
            }
            "readdir" => self.op_readdir()?,
            "drop-ioctl" | "drop-xattr" => self.op_drop_random(kind == "drop-xattr")?,
            "src-reopen" => self.op_src_reopen()?,
            "src-drop" => self.op_src_drop()?,
            other => bail!("unknown operation kind {other}"),
        }
        self.count(kind);
        Ok(())
    }

    // ------------------------------------------------------------ descriptors

    fn open_rw(&self, rel: &str) -> Result<File> {
        let p = self.mp(rel);
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| io_err("open O_RDWR", &p, e))
    }

    fn open_ro(&self, rel: &str) -> Result<File> {
        let p = self.mp(rel);
        File::open(&p).map_err(|e| io_err("open O_RDONLY", &p, e))
    }

    /// The long-lived read-write descriptor of file `i`, opened on first use.
    fn rw(&mut self, i: usize) -> Result<&File> {
        if self.files[i].rw.is_none() {
            let f = self.open_rw(&self.files[i].path)?;
            self.files[i].rw = Some(f);
        }
        Ok(self.files[i].rw.as_ref().expect("just opened"))
    }

    fn ro(&mut self, i: usize) -> Result<&File> {
        if self.files[i].ro.is_none() {
            let f = self.open_ro(&self.files[i].path)?;
            self.files[i].ro = Some(f);
        }
        Ok(self.files[i].ro.as_ref().expect("just opened"))
    }

    // ------------------------------------------------------------ verification

    /// Reads `[off, off + len)` of `f` (until EOF) and checks it against the
    /// model of file `i`.
    fn verify(&mut self, i: usize, f: &File, off: usize, len: usize, how: &str) -> Result<()> {
        let mut got = vec![0u8; len];
        let mut n = 0;
        // Bounded: at most `len` bytes, and every pass reads at least one
        // byte or stops at EOF.
        while n < len {
            match f.read_at(&mut got[n..], (off + n) as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&format!("pread ({how})"), &self.mp(&self.files[i].path), e)),
            }
        }
        got.truncate(n);
        self.check(i, off, &got, len, how)
    }

    /// Compares `got`, read at `off` with `asked` bytes asked for, with the model.
    fn check(&mut self, i: usize, off: usize, got: &[u8], asked: usize, how: &str) -> Result<()> {
        let data = &self.files[i].data;
        let end = (off + asked).min(data.len()).max(off.min(data.len()));
        let want = &data[off.min(data.len())..end];
        if got == want {
            self.bytes_verified += got.len() as u64;
            return Ok(());
        }
        let path = self.files[i].path.clone();
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        let lo = first.saturating_sub(8);
        let show = |v: &[u8]| {
            let start = lo.min(v.len());
            hex(&v[start..(first + 24).min(v.len()).max(start)])
        };
        let mut msg = format!(
            "MISCOMPARE w{}/{path} ({how}): read {} bytes at offset {off} (asked {asked}, model size {}), \
             expected {} bytes; first difference at file offset {}\n  expected [{}..]: {}\n  got      [{}..]: {}",
            self.id,
            got.len(),
            data.len(),
            want.len(),
            off + first,
            off + lo,
            show(want),
            off + lo,
            show(got),
        );
        if let Some(prev) = &self.files[i].prev
            && first >= got.len()
        {
            msg.push_str(&format!(
                "\n  the read stopped short at offset {}; the file's size before the last change made in the source \
                 was {} bytes",
                off + got.len(),
                prev.len()
            ));
        } else if let Some(prev) = &self.files[i].prev {
            let at = off + first;
            let k = got.len().min(want.len()).max(first + 1).min(got.len());
            let stale = prev.len() >= off + k && got[first..k] == prev[at..off + k];
            msg.push_str(&format!(
                "\n  the bytes read from offset {at} on {} the content before the last change made in the source",
                if stale { "EQUAL" } else { "differ from" }
            ));
        }
        // What the source holds, to tell a stale cache from a lost write.
        match fs::read(self.sp(&path)) {
            Ok(src) => {
                let same = src == *data;
                msg.push_str(&format!(
                    "\n  the source file holds {} bytes and {} the model",
                    src.len(),
                    if same { "matches" } else { "DIFFERS from" }
                ));
            }
            Err(e) => msg.push_str(&format!("\n  the source file cannot be read: {e}")),
        }
        // Read again through a fresh descriptor after a pause: a transient
        // difference (an invalidation not yet applied) reads right then.
        std::thread::sleep(Duration::from_secs(2));
        if let Ok(f) = File::open(self.mp(&path)) {
            let mut again = vec![0u8; asked];
            let mut n = 0;
            while n < asked {
                match f.read_at(&mut again[n..], (off + n) as u64) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            again.truncate(n);
            msg.push_str(&format!(
                "\n  re-read through a fresh open 2 s later: {}",
                if again == want {
                    "matches the model"
                } else {
                    "still differs"
                }
            ));
        }
        bail!("{msg}")
    }

    /// A random range to read: sometimes the whole file, sometimes past EOF.
    fn read_range(&mut self, size: usize) -> (usize, usize) {
        if self.chance(20) {
            return (0, size + 100);
        }
        let off = self.below(size + 1);
        let len = 1 + self.below(128 * 1024);
        (off, len)
    }

    fn op_read(&mut self, i: usize, kind: &'static str) -> Result<()> {
        let (off, len) = self.read_range(self.files[i].data.len());
        self.note(format!("{kind} {} off={off} len={len}", self.files[i].path));
        let f = match kind {
            "read-fd1" => self.rw(i)?.try_clone()?,
            "read-fd2" => self.ro(i)?.try_clone()?,
            _ => self.open_ro(&self.files[i].path.clone())?,
        };
        self.verify(i, &f, off, len, kind)?;
        self.count(kind);
        Ok(())
    }

    // ------------------------------------------------------------ data changes

    fn op_write(&mut self, fresh: bool) -> Result<()> {
        let i = self.below(self.files.len());
        let size = self.files[i].data.len();
        // Mostly inside the file, sometimes past its end (a hole).
        let off = if self.chance(80) {
            self.below(size + 1)
        } else {
            self.below(MAX_FILE)
        };
        let len = (1 + self.below(64 * 1024)).min(MAX_FILE - off.min(MAX_FILE - 1));
        let buf = self.bytes(len);
        let path = self.files[i].path.clone();
        self.note(format!(
            "write{} {path} off={off} len={len}",
            if fresh { "-fresh" } else { "" }
        ));
        let f = if fresh {
            let p = self.mp(&path);
            OpenOptions::new()
                .write(true)
                .open(&p)
                .map_err(|e| io_err("open O_WRONLY", &p, e))?
        } else {
            self.rw(i)?.try_clone()?
        };
        f.write_all_at(&buf, off as u64)
            .map_err(|e| io_err("pwrite", &self.mp(&path), e))?;
        let data = &mut self.files[i].data;
        if data.len() < off + len {
            data.resize(off + len, 0);
        }
        data[off..off + len].copy_from_slice(&buf);
        Ok(())
    }

    fn op_append(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let size = self.files[i].data.len();
        if size >= MAX_FILE {
            return self.op_truncate();
        }
        let len = (1 + self.below(16 * 1024)).min(MAX_FILE - size);
        let buf = self.bytes(len);
        let path = self.files[i].path.clone();
        self.note(format!("append {path} len={len} (at {size})"));
        let p = self.mp(&path);
        let mut f = OpenOptions::new()
            .append(true)
            .open(&p)
            .map_err(|e| io_err("open O_APPEND", &p, e))?;
        f.write_all(&buf).map_err(|e| io_err("write O_APPEND", &p, e))?;
        self.files[i].data.extend_from_slice(&buf);
        Ok(())
    }

    fn op_truncate(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let size = self.files[i].data.len();
        let new = if self.chance(70) {
            self.below(size + 1)
        } else {
            self.below(MAX_FILE + 1)
        };
        let path = self.files[i].path.clone();
        let by_path = self.chance(50);
        self.note(format!(
            "truncate {path} {size} -> {new} ({})",
            if by_path { "path" } else { "fd" }
        ));
        let p = self.mp(&path);
        if by_path {
            OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|f| f.set_len(new as u64))
                .map_err(|e| io_err("truncate (open, ftruncate)", &p, e))?;
        } else {
            self.rw(i)?
                .set_len(new as u64)
                .map_err(|e| io_err("ftruncate", &p, e))?;
        }
        self.files[i].data.resize(new, 0);
        Ok(())
    }

    /// Maps a range of the file MAP_SHARED, checks what the mapping shows,
    /// writes new bytes through it, and `msync(MS_SYNC)`s before unmapping.
    fn op_mmap(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let size = self.files[i].data.len();
        if size == 0 {
            return self.op_write(false);
        }
        let page = 4096usize;
        let off = self.below(size);
        let len = (1 + self.below(32 * 1024)).min(size - off);
        let map_off = off / page * page;
        let map_len = off + len - map_off;
        let path = self.files[i].path.clone();
        self.note(format!(
            "mmap-write {path} off={off} len={len} (map {map_off}+{map_len})"
        ));
        let buf = self.bytes(len);
        let fd = self.rw(i)?.as_raw_fd();
        let p = self.mp(&path);
        let seen = self.rw(i)?.metadata().map_err(|e| io_err("fstat", &p, e))?.len();
        if seen != size as u64 {
            // Which object each view is (node ids through the mount), to
            // tell stale attributes from two kernel inodes for one file.
            use std::os::unix::fs::MetadataExt;
            let desc = |m: std::io::Result<fs::Metadata>| match m {
                Ok(m) => format!("inode {} of {} bytes", m.ino(), m.len()),
                Err(e) => format!("error {e}"),
            };
            let by_fd = desc(self.rw(i)?.metadata());
            let by_path = desc(fs::metadata(&p));
            let in_source = desc(fs::metadata(self.sp(&path)));
            std::thread::sleep(Duration::from_millis(1500));
            let by_fd_later = desc(self.rw(i)?.metadata());
            bail!(
                "WRONG ATTRIBUTES: fstat of {} says {seen} bytes, the model {size}\n  \
                 fstat again: {by_fd}; stat of the path: {by_path}; the source: {in_source}; \
                 fstat 1.5 s later: {by_fd_later}",
                p.display()
            );
        }
        // SAFETY: `fd` is an open read-write descriptor of a regular file of
        // `size >= map_off + map_len` bytes; the mapping is private to this
        // function and unmapped below before anything else touches the file.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                map_off as libc::off_t,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io_err("mmap MAP_SHARED", &p, std::io::Error::last_os_error()));
        }
        // SAFETY: `addr` is a fresh mapping of `map_len` readable and writable
        // bytes; nothing else in this process aliases it.
        let view = unsafe { std::slice::from_raw_parts_mut(addr.cast::<u8>(), map_len) };
        let shown = view[off - map_off..].to_vec();
        let checked = self.check(i, off, &shown, len, "read through mmap");
        if checked.is_ok() {
            view[off - map_off..].copy_from_slice(&buf);
        }
        // SAFETY: `addr`/`map_len` are the mapping made above.
        let synced = unsafe { libc::msync(addr, map_len, libc::MS_SYNC) };
        let sync_err = std::io::Error::last_os_error();
        // SAFETY: as above; `view` is not used after this.
        unsafe { libc::munmap(addr, map_len) };
        checked?;
        if synced != 0 {
            return Err(io_err("msync MS_SYNC", &p, sync_err));
        }
        self.files[i].data[off..off + len].copy_from_slice(&buf);
        Ok(())
    }

    fn op_fsync(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let path = self.files[i].path.clone();
        self.note(format!("fsync {path}"));
        let p = self.mp(&path);
        self.rw(i)?.sync_all().map_err(|e| io_err("fsync", &p, e))
    }

    // ------------------------------------------------------------ namespace

    fn op_create(&mut self) -> Result<()> {
        // Sometimes reuse a removed name whose directory still exists.
        let reuse = self
            .gone
            .iter()
            .position(|g| self.dirs.iter().any(|d| d == parent(g)) && !self.exists(g));
        let path = match reuse {
            Some(k) if self.chance(30) => self.gone.remove(k).expect("index from position"),
            _ => {
                let d = self.rand_dir();
                join(&d, &self.fresh_name('f'))
            }
        };
        let len = self.below(MAX_FILE / 4);
        let data = self.bytes(len);
        self.note(format!("create {path} len={len}"));
        let p = self.mp(&path);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .map_err(|e| io_err("create O_EXCL", &p, e))?;
        f.write_all_at(&data, 0).map_err(|e| io_err("pwrite", &p, e))?;
        self.files.push(FileM {
            path,
            data,
            prev: None,
            rw: Some(f),
            ro: None,
        });
        Ok(())
    }

    fn exists(&self, rel: &str) -> bool {
        self.files.iter().any(|f| f.path == rel) || self.dirs.iter().any(|d| d == rel)
    }

    fn ancestor_is_file(&self, rel: &str) -> bool {
        let mut p = parent(rel);
        while !p.is_empty() {
            if self.files.iter().any(|f| f.path == p) {
                return true;
            }
            p = parent(p);
        }
        false
    }

    fn forget(&mut self, rel: String) {
        if self.gone.len() == 16 {
            self.gone.pop_front();
        }
        self.gone.push_back(rel);
    }

    fn op_unlink(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let path = self.files[i].path.clone();
        self.note(format!("unlink {path}"));
        let p = self.mp(&path);
        fs::remove_file(&p).map_err(|e| io_err("unlink", &p, e))?;
        self.files.swap_remove(i);
        self.forget(path);
        Ok(())
    }

    fn op_rename(&mut self, over: bool) -> Result<()> {
        let i = self.below(self.files.len());
        let from = self.files[i].path.clone();
        let (to, victim) = if over {
            let mut j = self.below(self.files.len() - 1);
            if j >= i {
                j += 1;
            }
            (self.files[j].path.clone(), Some(j))
        } else {
            let d = self.rand_dir();
            (join(&d, &self.fresh_name('f')), None)
        };
        self.note(format!(
            "rename {from} -> {to}{}",
            if over { " (over an existing file)" } else { "" }
        ));
        let (pf, pt) = (self.mp(&from), self.mp(&to));
        fs::rename(&pf, &pt).map_err(|e| rename_err("rename", &pf, &pt, e))?;
        self.files[i].path = to;
        if let Some(j) = victim {
            self.files.swap_remove(j);
        }
        self.forget(from);
        Ok(())
    }

    /// Renames a directory (not the root) to a fresh name under a directory
    /// outside it. Returns false if there was none to rename.
    fn op_rename_dir(&mut self) -> Result<bool> {
        if self.dirs.len() < 2 {
            return Ok(false);
        }
        let k = 1 + self.below(self.dirs.len() - 1);
        let x = self.dirs[k].clone();
        let under = format!("{x}/");
        let targets: Vec<String> = self
            .dirs
            .iter()
            .filter(|d| **d != x && !d.starts_with(&under) && d.matches('/').count() < 2)
            .cloned()
            .collect();
        if targets.is_empty() {
            return Ok(false);
        }
        let p = targets[self.below(targets.len())].clone();
        let to = join(&p, &self.fresh_name('d'));
        self.note(format!("rename-dir {x} -> {to}"));
        let (pf, pt) = (self.mp(&x), self.mp(&to));
        fs::rename(&pf, &pt).map_err(|e| rename_err("rename (directory)", &pf, &pt, e))?;
        let moved = |s: &str| -> Option<String> {
            if s == x {
                Some(to.clone())
            } else {
                s.strip_prefix(&under).map(|rest| format!("{to}/{rest}"))
            }
        };
        for d in &mut self.dirs {
            if let Some(n) = moved(d) {
                *d = n;
            }
        }
        for f in &mut self.files {
            if let Some(n) = moved(&f.path) {
                f.path = n;
            }
        }
        self.forget(x);
        Ok(true)
    }

    fn op_mkdir(&mut self) -> Result<()> {
        let d = self.rand_dir();
        let path = join(&d, &self.fresh_name('d'));
        self.note(format!("mkdir {path}"));
        let p = self.mp(&path);
        fs::create_dir(&p).map_err(|e| io_err("mkdir", &p, e))?;
        self.dirs.push(path);
        Ok(())
    }

    fn op_rmdir(&mut self) -> Result<bool> {
        let empty: Vec<usize> = (1..self.dirs.len())
            .filter(|&k| {
                let d = &self.dirs[k];
                !self.files.iter().any(|f| parent(&f.path) == d) && !self.dirs.iter().any(|e| parent(e) == d && e != d)
            })
            .collect();
        if empty.is_empty() {
            return Ok(false);
        }
        let k = empty[self.below(empty.len())];
        let path = self.dirs[k].clone();
        self.note(format!("rmdir {path}"));
        let p = self.mp(&path);
        fs::remove_dir(&p).map_err(|e| io_err("rmdir", &p, e))?;
        self.dirs.swap_remove(k);
        self.forget(path);
        Ok(true)
    }

    // ------------------------------------------------------------ metadata

    fn op_stat(&mut self) -> Result<()> {
        if self.chance(30) {
            let d = self.rand_dir();
            self.note(format!("stat {d}/ (directory)"));
            let p = self.mp(&d);
            let m = fs::symlink_metadata(&p).map_err(|e| io_err("lstat", &p, e))?;
            if !m.is_dir() {
                bail!(
                    "WRONG ATTRIBUTES: {} is a directory in the model, lstat says {:?}",
                    p.display(),
                    m.file_type()
                );
            }
            return Ok(());
        }
        let i = self.below(self.files.len());
        let path = self.files[i].path.clone();
        self.note(format!("stat {path}"));
        let p = self.mp(&path);
        let m = fs::symlink_metadata(&p).map_err(|e| io_err("lstat", &p, e))?;
        let want = self.files[i].data.len() as u64;
        if !m.is_file() || m.len() != want {
            bail!(
                "WRONG ATTRIBUTES: {}: lstat says {:?} of {} bytes, the model a file of {want} bytes",
                p.display(),
                m.file_type(),
                m.len()
            );
        }
        Ok(())
    }

    fn op_stat_gone(&mut self) -> Result<bool> {
        let candidates: Vec<String> = self.gone.iter().filter(|g| !self.exists(g)).cloned().collect();
        if candidates.is_empty() {
            return Ok(false);
        }
        let g = candidates[self.below(candidates.len())].clone();
        self.note(format!("stat-gone {g}"));
        let p = self.mp(&g);
        match fs::symlink_metadata(&p) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
            // A former directory's name may now be a file's.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) && self.ancestor_is_file(&g) => Ok(true),
            Err(e) => Err(io_err("lstat of a removed name", &p, e)),
            Ok(m) => bail!(
                "STALE NAME: {} was removed (rename, unlink or rmdir) but lstat finds a {:?}",
                p.display(),
                m.file_type()
            ),
        }
    }

    fn op_readdir(&mut self) -> Result<()> {
        let d = self.rand_dir();
        self.note(format!("readdir {d}/"));
        let p = self.mp(&d);
        let mut got = BTreeSet::new();
        for e in fs::read_dir(&p).map_err(|e| io_err("opendir", &p, e))? {
            let e = e.map_err(|e| io_err("readdir", &p, e))?;
            got.insert(e.file_name().to_string_lossy().into_owned());
        }
        let want: BTreeSet<String> = self
            .files
            .iter()
            .map(|f| f.path.as_str())
            .chain(self.dirs.iter().map(String::as_str))
            .filter(|s| !s.is_empty() && parent(s) == d)
            .map(|s| s.rsplit('/').next().unwrap_or(s).to_string())
            .collect();
        if got != want {
            bail!(
                "WRONG LISTING of {}: readdir gives {:?}, the model has {:?}",
                p.display(),
                got,
                want
            );
        }
        Ok(())
    }

    // ------------------------------------------------------------ drops

    /// Drops a random directory: the mount root, one of this worker's, or
    /// another worker's root (never removed, so no error is expected).
    fn op_drop_random(&mut self, xattr: bool) -> Result<()> {
        let dir = match self.below(3) {
            0 => self.mnt.clone(),
            1 => {
                let d = self.rand_dir();
                self.mp(&d)
            }
            _ => {
                let j = self.below(self.workers);
                self.mnt.join(format!("w{j}"))
            }
        };
        let mode = 1 + self.below(3) as u32;
        self.note(format!(
            "drop mode {mode} by {} of {}",
            if xattr { "xattr" } else { "ioctl" },
            dir.display()
        ));
        // The mount root and other workers' roots cover their files.
        let _shared = if dir.starts_with(&self.mnt_root) {
            None
        } else {
            self.src_lock_shared()?
        };
        drop_dir(&dir, mode, xattr)
    }

    // ------------------------------------------------------------ source changes

    /// New content written directly in the source, with a size that differs
    /// from the old one, made visible by opening the file again (SEMANTICS.md:
    /// "file data (size, mtime or ctime moves): at the next open").
    fn op_src_reopen(&mut self) -> Result<()> {
        self.with_src_lock(Self::src_reopen)
    }

    fn src_reopen(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let old = self.files[i].data.len();
        let mut new = self.below(MAX_FILE / 2);
        if new == old {
            new += 1;
        }
        let data = self.bytes(new);
        let path = self.files[i].path.clone();
        if self.chance(50) {
            // First a pages drop of its directory and a read through a
            // descriptor that stays open (which fills the cache again): the
            // change below must still be seen at the next open.
            let mode = if self.chance(50) { 1 } else { 3 };
            self.note(format!(
                "drop mode {mode} by ioctl of {}/, then read {path} through fd2",
                parent(&path)
            ));
            drop_dir(&self.mp(parent(&path)), mode, false)?;
            let f = self.ro(i)?.try_clone()?;
            self.verify(i, &f, 0, old + 100, "descriptor open across a drop")?;
        }
        self.note(format!("src-write {path} {old} -> {new} bytes, then reopen"));
        let sp = self.sp(&path);
        fs::write(&sp, &data).map_err(|e| io_err("write in the source", &sp, e))?;
        self.files[i].prev = Some(std::mem::replace(&mut self.files[i].data, data));
        // Close this worker's descriptors of the file: the documented way is
        // a new open.
        self.files[i].rw = None;
        self.files[i].ro = None;
        let f = self.open_ro(&path)?;
        let len = new + 100;
        self.verify(i, &f, 0, len, "fresh open after a size-changing write in the source")?;
        Ok(())
    }

    /// New content written directly in the source (often the same size),
    /// made visible by a drop of the file's directory (pages, or all; by
    /// ioctl or xattr); then read through the descriptors already open and
    /// through a fresh open.
    fn op_src_drop(&mut self) -> Result<()> {
        self.with_src_lock(Self::src_drop)
    }

    fn src_drop(&mut self) -> Result<()> {
        let i = self.below(self.files.len());
        let old = self.files[i].data.len();
        let new = if self.chance(60) { old } else { self.below(MAX_FILE / 2) };
        let data = self.bytes(new);
        let path = self.files[i].path.clone();
        let mode = if self.chance(50) { 1 } else { 3 };
        let xattr = self.chance(50);
        self.note(format!(
            "src-write {path} {old} -> {new} bytes, then drop mode {mode} by {} of {}/",
            if xattr { "xattr" } else { "ioctl" },
            parent(&path)
        ));
        let sp = self.sp(&path);
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&sp)
            .and_then(|f| {
                f.write_all_at(&data, 0)?;
                f.set_len(new as u64)
            })
            .map_err(|e| io_err("write in the source", &sp, e))?;
        self.files[i].prev = Some(std::mem::replace(&mut self.files[i].data, data));
        let dir = self.mp(parent(&path));
        drop_dir(&dir, mode, xattr)?;
        let len = new + 100;
        let open: Vec<(File, &str)> = [
            self.files[i]
                .rw
                .as_ref()
                .map(|f| (f, "descriptor open before the drop (rw)")),
            self.files[i]
                .ro
                .as_ref()
                .map(|f| (f, "descriptor open before the drop (ro)")),
        ]
        .into_iter()
        .flatten()
        .map(|(f, how)| f.try_clone().map(|f| (f, how)))
        .collect::<std::io::Result<_>>()?;
        for (f, how) in open {
            self.verify(i, &f, 0, len, &format!("{how}, after a write in the source and a drop"))?;
        }
        let f = self.open_ro(&path)?;
        self.verify(i, &f, 0, len, "fresh open after a write in the source and a drop")?;
        Ok(())
    }
}

/// Drops the caches under `dir` by the drop ioctl or the `user.rcufs.drop`
/// extended attribute, with `mode` 1, 2 or 3.
pub fn drop_dir(dir: &Path, mode: u32, xattr: bool) -> Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes())?;
    if xattr {
        let value = match mode {
            1 => "pages",
            2 => "2",
            _ => "all",
        };
        let name = CString::new(XATTR_DROP).expect("no NUL");
        // SAFETY: `c` and `name` are NUL-terminated strings alive for the
        // call; `value` is `value.len()` readable bytes.
        let rc = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if rc != 0 {
            return Err(io_err(
                &format!("setxattr {XATTR_DROP}={value}"),
                dir,
                std::io::Error::last_os_error(),
            ));
        }
        return Ok(());
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .map_err(|e| io_err("open O_DIRECTORY", dir, e))?;
    let mut args = [0u8; 64];
    args[0..4].copy_from_slice(&1u32.to_ne_bytes());
    args[4..8].copy_from_slice(&mode.to_ne_bytes());
    // SAFETY: `f` is an open descriptor; the drop ioctl reads and writes
    // exactly 64 bytes (its size is encoded in the command), and `args` is 64
    // bytes alive for the call.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), IOC_DROP as _, args.as_mut_ptr()) };
    if rc != 0 {
        return Err(io_err(
            &format!("ioctl IOC_DROP mode {mode}"),
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    let skipped = u64::from_ne_bytes(args[40..48].try_into().expect("8 bytes"));
    if skipped != 0 {
        bail!("drop of {} as root skipped {skipped} entries", dir.display());
    }
    Ok(())
}
