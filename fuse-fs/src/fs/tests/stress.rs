//! The name layer under concurrent changes and drops, without a mount.
//!
//! Worker threads change their own subtrees (`w0`, `w1`, ...) as the
//! kernel drives the default mode, which keeps no entries: every path
//! component of every operation is a LOOKUP, each successful one takes a
//! reference, and references go back with FORGET (all of a worker's at
//! once). Renames move files (also over another file) and directories
//! with their subtrees, and exchange a file with a directory
//! (`RENAME_EXCHANGE`: both objects move; the model swaps the two paths
//! and moves the directory's subtree).
//! Meanwhile another thread drops the root's caches in every mode,
//! the workers drop their own directories, and for each worker a prober
//! keeps looking up the name its create, mkdir or rename is about to make
//! (as another process's `stat` would), forgetting what it finds. Files
//! and directories also go into and out of one directory all workers
//! share, so changes under one directory come from several threads at
//! once. With the watch, workers also change the source directly and
//! report it to a stand-in for the watcher, which applies the events from
//! its own thread a little later. Every path a worker's model has must resolve to an
//! object of its kind, and every name it removed or renamed away must be
//! ENOENT: through the mount at once, in the source once the watcher has
//! applied the change. On a failure the message gives the worker's last
//! operations and what the name layer holds for the paths of the last one.
//!
//! `RCUFS_NAME_STRESS_OPS` sets the operations per worker (4,000), and
//! `RCUFS_NAME_STRESS_SEED` the seed (printed by each run).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::AtomicUsize;

use super::*;

/// A worker's paths starting with this are in the directory all workers
/// share (`/shared`).
const SHARED: &str = "@";

/// xorshift64*: enough randomness for choosing operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn mode(&mut self) -> DropMode {
        DropMode::from_u32(1 + self.below(3) as u32).expect("modes 1-3")
    }
}

/// One worker's view: what its subtree holds and what the kernel would
/// hold references to.
struct Worker<'a> {
    fs: &'a Fs,
    src: &'a Path,
    top: String,
    rng: Rng,
    /// Directories under `top` ("" is `top` itself), as paths.
    dirs: Vec<String>,
    files: Vec<String>,
    /// Paths removed or renamed away, recently.
    gone: VecDeque<String>,
    /// The kernel's references: node id → count.
    refs: HashMap<u64, u64>,
    next_name: u64,
    /// The last operations, for the failure message.
    log: VecDeque<String>,
    /// The name about to appear (parent node id, name), which another
    /// thread keeps looking up meanwhile, as a second process would.
    probe: &'a Mutex<Option<(u64, String)>>,
    /// With the watch: the emulated watcher this worker's changes made
    /// directly in the source are reported to, and this worker's index.
    watcher: Option<(&'a Watcher, usize)>,
    /// Events this worker reported.
    reported: u64,
}

/// A change reported to the [`Watcher`]: the worker, the directory's
/// handle bytes, handle type and fsid, and the name.
type Reported = (usize, Vec<u8>, i32, u64, Vec<u8>);

/// Stands in for the fanotify watcher: applies the events reported to it
/// from its own thread, a little later, in batches, as the real one does.
struct Watcher {
    queue: Mutex<Vec<Reported>>,
    /// Per worker: events applied.
    applied: Vec<AtomicUsize>,
}

impl Watcher {
    fn run(&self, fs: &Fs, running: &AtomicUsize, seed: u64) {
        let mut rng = Rng(seed);
        while running.load(Ordering::Relaxed) > 0 {
            let batch = std::mem::take(&mut *self.queue.lock());
            if batch.is_empty() {
                std::thread::yield_now();
                continue;
            }
            // Up to 200 µs late, as fanotify's events reach the watcher.
            std::thread::sleep(Duration::from_micros(rng.below(200) as u64));
            let events: Vec<crate::watch::Event<'_>> = batch
                .iter()
                .map(|(_, bytes, handle_type, fsid, name)| crate::watch::Event::Name {
                    dir: crate::watch::Handle {
                        fsid: *fsid,
                        handle_type: *handle_type,
                        bytes,
                    },
                    name,
                })
                .collect();
            fs.apply_source_events(&events);
            for (w, ..) in &batch {
                self.applied[*w].fetch_add(1, Ordering::Release);
            }
        }
    }
}

impl Worker<'_> {
    fn note(&mut self, what: String) {
        if self.log.len() == 24 {
            self.log.pop_front();
        }
        self.log.push_back(what);
    }

    #[track_caller]
    fn fail(&self, what: String) -> ! {
        let log: Vec<&str> = self.log.iter().map(String::as_str).collect();
        panic!(
            "{}: {what}\nlast operations, oldest first:\n  {}\nwhat the name layer holds now:{}",
            self.top,
            log.join("\n  "),
            self.state_of_last_paths()
        );
    }

    fn state_of_last_paths(&self) -> String {
        let mut out = String::new();
        let last = self.log.back().cloned().unwrap_or_default();
        let paths: Vec<String> = last
            .split(' ')
            .filter(|w| w.starts_with(['d', 'f', 's', '@']))
            .map(String::from)
            .collect();
        for rel in paths {
            let full = self.full(&rel);
            out += &format!("\n path {full}:");
            let mut ino = ROOT_INO;
            let mut sofar = String::new();
            for c in full.split('/') {
                sofar = if sofar.is_empty() {
                    c.to_string()
                } else {
                    format!("{sofar}/{c}")
                };
                let Ok(p) = self.fs.table.get(ino) else {
                    out += &format!(" [{c}: parent {ino} unknown]");
                    break;
                };
                let h = {
                    let slot = p.dentry.lock();
                    let h = slot
                        .handle
                        .as_ref()
                        .map(|d| (d.id(), d.is_hashed(), d.parent().map(|x| x.id())));
                    (h, slot.missed, slot.clean, slot.clean_at)
                };
                let hit = match self.fs.names.lookup(&p, c.as_bytes()) {
                    crate::names::Hit::Positive(i) => {
                        format!("pos ino {} stale {} nl {}", i.ino, i.is_stale(), i.nlookup())
                    }
                    crate::names::Hit::Negative => "neg".into(),
                    crate::names::Hit::Miss => "miss".into(),
                };
                let src = std::fs::symlink_metadata(self.src.join(&sofar)).is_ok();
                out += &format!("\n   [{c}: parent {ino} handle {h:?} hit {hit} src {src}]");
                match self.fs.lookup(ino, c.as_bytes()) {
                    Ok(e) => {
                        self.fs.forget(e.ino, 1);
                        ino = e.ino;
                    }
                    Err(e) => {
                        out += &format!(" lookup now: {e}");
                        break;
                    }
                }
            }
        }
        out
    }

    /// The path from the root of `rel`, a path in the worker's subtree or,
    /// starting with [`SHARED`], in the directory all workers share.
    fn full(&self, rel: &str) -> String {
        if let Some(rest) = rel.strip_prefix(SHARED) {
            format!("shared{rest}")
        } else if rel.is_empty() {
            self.top.clone()
        } else {
            format!("{}/{rel}", self.top)
        }
    }

    /// A directory for a file: one of the worker's, or now and then the
    /// shared one, where the other workers' changes come in between.
    fn file_dir(&mut self) -> String {
        if self.rng.below(4) == 0 {
            SHARED.to_string()
        } else {
            self.dirs[self.rng.below(self.dirs.len())].clone()
        }
    }

    fn lookup(&mut self, parent: u64, name: &str) -> FsResult<Entry> {
        let e = self.fs.lookup(parent, name.as_bytes())?;
        *self.refs.entry(e.ino).or_default() += 1;
        Ok(e)
    }

    /// Walks `rel` from the root, a LOOKUP per component.
    fn resolve(&mut self, rel: &str) -> FsResult<Entry> {
        let full = self.full(rel);
        let mut ino = ROOT_INO;
        let mut last = None;
        for c in full.split('/') {
            let e = self.lookup(ino, c)?;
            ino = e.ino;
            last = Some(e);
        }
        Ok(last.expect("a path has a component"))
    }

    #[track_caller]
    fn must_resolve(&mut self, rel: &str, kind: Kind) -> Entry {
        match self.resolve(rel) {
            Ok(e) if e.attr.kind == kind => e,
            Ok(e) => self.fail(format!("{rel} is a {:?}, the model has a {kind:?}", e.attr.kind)),
            Err(e) => {
                let on_disk = self.in_source(rel);
                self.fail(format!("{rel}: {e} (in the source: {on_disk})"))
            }
        }
    }

    fn in_source(&self, rel: &str) -> String {
        let src = self.src.join(self.full(rel));
        match std::fs::symlink_metadata(&src) {
            Ok(m) if m.is_dir() => "a directory".into(),
            Ok(_) => "a file".into(),
            Err(e) => e.to_string(),
        }
    }

    #[track_caller]
    fn must_be_gone(&mut self, rel: &str) {
        match self.resolve(rel) {
            Err(e) if e.errno() == libc::ENOENT => {}
            Err(e) => self.fail(format!("{rel} is gone, but the lookup says {e}")),
            Ok(e) => {
                let on_disk = self.in_source(rel);
                self.fail(format!(
                    "STALE: {rel} is gone, yet found as node {} ({:?}; in the source: {on_disk})",
                    e.ino, e.attr.kind
                ))
            }
        }
    }

    fn split(rel: &str) -> (&str, &str) {
        match rel.rfind('/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => ("", rel),
        }
    }

    fn join(dir: &str, name: &str) -> String {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    fn forget_all(&mut self) {
        for (ino, n) in std::mem::take(&mut self.refs) {
            self.fs.forget(ino, n);
        }
    }

    fn forget_gone(&mut self, rel: &str) {
        self.gone.push_back(rel.to_string());
        if self.gone.len() > 16 {
            self.gone.pop_front();
        }
    }

    fn step(&mut self) {
        match self.rng.below(20) {
            0..=2 => {
                let dir = self.file_dir();
                let name = self.fresh("f");
                let rel = Self::join(&dir, &name);
                self.note(format!("create {rel}"));
                let p = self.must_resolve(&dir, Kind::Dir).ino;
                if self.lookup(p, &name).is_ok() {
                    self.fail(format!("{rel} exists before its create"));
                }
                self.probe(p, &name);
                let (e, o) = self
                    .fs
                    .create(p, name.as_bytes(), 0o644, libc::O_CREAT | libc::O_RDWR, ME)
                    .unwrap_or_else(|e| self.fail(format!("create {rel}: {e}")));
                *self.refs.entry(e.ino).or_default() += 1;
                self.fs.release(o.fh).expect("release");
                self.end_probe();
                self.files.push(rel.clone());
                self.gone.retain(|g| *g != rel);
                self.must_resolve(&rel, Kind::File);
            }
            3..=4 if self.dirs.len() < 40 => {
                let dir = self.dirs[self.rng.below(self.dirs.len())].clone();
                let name = self.fresh("d");
                let rel = Self::join(&dir, &name);
                self.note(format!("mkdir {rel}"));
                let p = self.must_resolve(&dir, Kind::Dir).ino;
                self.probe(p, &name);
                let e = self
                    .fs
                    .mkdir(p, name.as_bytes(), 0o755, ME)
                    .unwrap_or_else(|e| self.fail(format!("mkdir {rel}: {e}")));
                self.end_probe();
                *self.refs.entry(e.ino).or_default() += 1;
                self.dirs.push(rel.clone());
                self.gone.retain(|g| *g != rel);
                self.must_resolve(&rel, Kind::Dir);
            }
            5..=7 if !self.files.is_empty() => {
                let i = self.rng.below(self.files.len());
                let from = self.files[i].clone();
                let to_dir = self.file_dir();
                let over = self.rng.below(3) == 0 && self.files.len() > 1;
                let to = if over {
                    let j = (i + 1 + self.rng.below(self.files.len() - 1)) % self.files.len();
                    self.files[j].clone()
                } else {
                    let n = self.fresh("f");
                    Self::join(&to_dir, &n)
                };
                self.note(format!("rename {from} -> {to}"));
                self.rename(&from, &to, Kind::File);
                self.files.retain(|f| *f != from && *f != to);
                self.files.push(to.clone());
                self.forget_gone(&from);
                self.must_resolve(&to, Kind::File);
                self.must_be_gone(&from);
            }
            10 if self.dirs.len() > 1 => {
                // RENAME_EXCHANGE of a directory and a file outside it:
                // both objects move, and the directory takes its subtree.
                let d = self.dirs[1 + self.rng.below(self.dirs.len() - 1)].clone();
                let under = format!("{d}/");
                let files: Vec<String> = self
                    .files
                    .iter()
                    .filter(|f| !f.starts_with(SHARED) && !f.starts_with(&under))
                    .cloned()
                    .collect();
                if files.is_empty() {
                    return;
                }
                let f = files[self.rng.below(files.len())].clone();
                self.note(format!("exchange {f} <-> {d}"));
                let (fd, fname) = Self::split(&f);
                let (dd, dname) = Self::split(&d);
                let fp = self.must_resolve(fd, Kind::Dir).ino;
                self.must_resolve(&f, Kind::File);
                let dp = self.must_resolve(dd, Kind::Dir).ino;
                self.must_resolve(&d, Kind::Dir);
                self.fs
                    .rename(fp, fname.as_bytes(), dp, dname.as_bytes(), libc::RENAME_EXCHANGE, ME)
                    .unwrap_or_else(|e| self.fail(format!("exchange {f} <-> {d}: {e}")));
                let swapped = |p: &String| {
                    if *p == f {
                        d.clone()
                    } else if *p == d {
                        f.clone()
                    } else if let Some(rest) = p.strip_prefix(&under) {
                        format!("{f}/{rest}")
                    } else {
                        p.clone()
                    }
                };
                self.dirs = self.dirs.iter().map(swapped).collect();
                self.files = self.files.iter().map(swapped).collect();
                self.must_resolve(&f, Kind::Dir);
                self.must_resolve(&d, Kind::File);
            }
            8..=9 if self.dirs.len() > 1 => {
                let from = self.dirs[1 + self.rng.below(self.dirs.len() - 1)].clone();
                // A target directory not under the one moved.
                let targets: Vec<String> = self
                    .dirs
                    .iter()
                    .filter(|d| **d != from && !d.starts_with(&format!("{from}/")))
                    .cloned()
                    .collect();
                // Now and then into the shared directory (and, chosen
                // again later, out of it), where the other workers' changes
                // come in between.
                let to_dir = if self.rng.below(4) == 0 {
                    SHARED.to_string()
                } else {
                    targets[self.rng.below(targets.len())].clone()
                };
                let name = self.fresh("d");
                let to = Self::join(&to_dir, &name);
                self.note(format!("rename-dir {from} -> {to}"));
                self.rename(&from, &to, Kind::Dir);
                let moved = |p: &String| {
                    if *p == from {
                        to.clone()
                    } else if let Some(rest) = p.strip_prefix(&format!("{from}/")) {
                        format!("{to}/{rest}")
                    } else {
                        p.clone()
                    }
                };
                self.dirs = self.dirs.iter().map(moved).collect();
                self.files = self.files.iter().map(moved).collect();
                self.forget_gone(&from);
                self.must_resolve(&to, Kind::Dir);
                self.must_be_gone(&from);
            }
            11 if !self.files.is_empty() => {
                let rel = self.files.swap_remove(self.rng.below(self.files.len()));
                self.remove(&rel, Kind::File);
            }
            12 => {
                // An empty directory, if there is one.
                let empty: Vec<String> = self.dirs[1..]
                    .iter()
                    .filter(|d| {
                        let pre = format!("{d}/");
                        !self.dirs.iter().chain(&self.files).any(|p| p.starts_with(&pre))
                    })
                    .cloned()
                    .collect();
                if let Some(rel) = empty.first().cloned() {
                    self.dirs.retain(|d| *d != rel);
                    self.remove(&rel, Kind::Dir);
                }
            }
            13..=14 => {
                let dir = self.dirs[self.rng.below(self.dirs.len())].clone();
                let mode = self.rng.mode();
                self.note(format!("drop mode {} of {}", mode as u32, self.full(&dir)));
                let d = self.must_resolve(&dir, Kind::Dir).ino;
                self.fs
                    .drop_dir(d, mode, ME)
                    .unwrap_or_else(|e| self.fail(format!("drop of {dir}: {e}")));
            }
            16..=17 if self.watcher.is_some() => self.step_in_source(),
            15 => {
                self.note("forget all".into());
                self.forget_all();
            }
            _ => {
                // Check a few paths the model has, and a few it lost.
                for _ in 0..3 {
                    if self.rng.below(2) == 0 && !self.files.is_empty() {
                        let f = self.files[self.rng.below(self.files.len())].clone();
                        self.must_resolve(&f, Kind::File);
                    } else {
                        let d = self.dirs[self.rng.below(self.dirs.len())].clone();
                        self.must_resolve(&d, Kind::Dir);
                    }
                }
                if !self.gone.is_empty() {
                    let g = self.gone[self.rng.below(self.gone.len())].clone();
                    let (dir, _) = Self::split(&g);
                    // Only while its directory is still where it was.
                    if dir == SHARED || self.dirs.iter().any(|d| d == dir) {
                        self.must_be_gone(&g);
                    }
                }
            }
        }
    }

    /// Reports a change of `name` in the model's directory `dir`, made
    /// directly in the source, to the watcher.
    fn report(&mut self, dir: &str, name: &str) {
        let (watcher, me) = self.watcher.expect("a watcher");
        let path = self.src.join(self.full(dir));
        let fd = sys::open_path(
            &sys::cstr(path.as_os_str().as_encoded_bytes()).expect("path"),
            libc::O_PATH,
        )
        .expect("open the directory in the source");
        let (handle, _) = sys::name_to_handle_at(fd.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH).expect("handle");
        let (fsid, _) = sys::fs_ids(fd.as_fd()).expect("fsid");
        watcher.queue.lock().push((
            me,
            handle.bytes().to_vec(),
            handle.handle_type(),
            fsid,
            name.as_bytes().to_vec(),
        ));
        self.reported += 1;
    }

    /// Looks `rel` up while the watcher may be applying the change (any
    /// answer goes), then waits until it has applied everything reported.
    fn race_and_wait(&mut self, rels: &[&str]) {
        for rel in rels {
            let _ = self.resolve(rel);
        }
        let (watcher, me) = self.watcher.expect("a watcher");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while (watcher.applied[me].load(Ordering::Acquire) as u64) < self.reported {
            if std::time::Instant::now() > deadline {
                self.fail("the watcher did not apply the reported events within 30 s".into());
            }
            let _ = self.resolve(rels[0]);
        }
    }

    /// The changes made directly in the source (with the watch only).
    fn step_in_source(&mut self) {
        match self.rng.below(3) {
            0 => {
                let dir = self.dirs[self.rng.below(self.dirs.len())].clone();
                let name = self.fresh("s");
                let rel = Self::join(&dir, &name);
                self.note(format!("src-create {rel}"));
                let _ = self.resolve(&rel);
                std::fs::write(self.src.join(self.full(&rel)), b"s").expect("create in the source");
                self.report(&dir, &name);
                self.race_and_wait(&[&rel]);
                self.files.push(rel.clone());
                self.must_resolve(&rel, Kind::File);
            }
            1 if !self.files.is_empty() => {
                let rel = self.files.swap_remove(self.rng.below(self.files.len()));
                self.note(format!("src-unlink {rel}"));
                self.must_resolve(&rel, Kind::File);
                std::fs::remove_file(self.src.join(self.full(&rel))).expect("unlink in the source");
                let (dir, name) = Self::split(&rel);
                let (dir, name) = (dir.to_string(), name.to_string());
                self.report(&dir, &name);
                self.race_and_wait(&[&rel]);
                self.forget_gone(&rel);
                self.must_be_gone(&rel);
            }
            _ if !self.files.is_empty() => {
                let i = self.rng.below(self.files.len());
                let from = self.files[i].clone();
                let to_dir = self.dirs[self.rng.below(self.dirs.len())].clone();
                let name = self.fresh("s");
                let to = Self::join(&to_dir, &name);
                self.note(format!("src-rename {from} -> {to}"));
                self.must_resolve(&from, Kind::File);
                let _ = self.resolve(&to);
                std::fs::rename(self.src.join(self.full(&from)), self.src.join(self.full(&to)))
                    .expect("rename in the source");
                let (od, on) = Self::split(&from);
                let (od, on) = (od.to_string(), on.to_string());
                self.report(&od, &on);
                self.report(&to_dir, &name);
                self.race_and_wait(&[&to, &from]);
                self.files[i] = to.clone();
                self.forget_gone(&from);
                self.must_resolve(&to, Kind::File);
                self.must_be_gone(&from);
            }
            _ => {}
        }
    }

    /// Unlinks (a file) or removes (a directory) `rel` through the
    /// filesystem; it must be gone afterwards.
    fn remove(&mut self, rel: &str, kind: Kind) {
        let what = if kind == Kind::Dir { "rmdir" } else { "unlink" };
        self.note(format!("{what} {rel}"));
        let (dir, name) = Self::split(rel);
        let p = self.must_resolve(dir, Kind::Dir).ino;
        self.must_resolve(rel, kind);
        let done = if kind == Kind::Dir {
            self.fs.rmdir(p, name.as_bytes(), ME)
        } else {
            self.fs.unlink(p, name.as_bytes(), ME)
        };
        done.unwrap_or_else(|e| self.fail(format!("{what} {rel}: {e}")));
        self.forget_gone(rel);
        self.must_be_gone(rel);
    }

    fn rename(&mut self, from: &str, to: &str, kind: Kind) {
        let (od, on) = Self::split(from);
        let (nd, nn) = Self::split(to);
        let op = self.must_resolve(od, Kind::Dir).ino;
        self.must_resolve(from, kind);
        let np = self.must_resolve(nd, Kind::Dir).ino;
        let _ = self.lookup(np, nn);
        self.probe(np, nn);
        self.fs
            .rename(op, on.as_bytes(), np, nn.as_bytes(), 0, ME)
            .unwrap_or_else(|e| self.fail(format!("rename {from} -> {to}: {e}")));
        self.end_probe();
    }

    fn probe(&self, parent: u64, name: &str) {
        *self.probe.lock() = Some((parent, name.to_string()));
    }

    fn end_probe(&self) {
        *self.probe.lock() = None;
    }
}

/// Operations per worker: `RCUFS_NAME_STRESS_OPS`, 4,000 by default.
fn ops() -> usize {
    std::env::var("RCUFS_NAME_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000)
}

#[test]
fn names_stay_exact_under_concurrent_renames_creates_and_drops() {
    if let Some(t) = watched() {
        stress(&t);
    }
}

/// With `ttl` and a 1 ms interval every lookup re-checks its directory
/// (`Fs::revalidate_dir`) and most find the entry's attributes expired.
#[test]
fn names_stay_exact_with_a_short_revalidation_interval() {
    stress(&setup(FsConfig {
        coherence: Coherence::Ttl,
        revalidate: Duration::from_millis(1),
        ..default_cfg()
    }));
}

/// Without file handles every inode is reopened by its recorded name
/// through its parents (`Backing::ByName`), and the pool of 16 descriptors
/// makes that happen all the time.
#[test]
fn names_stay_exact_when_inodes_are_reopened_by_name() {
    stress(&setup(FsConfig {
        coherence: Coherence::Ttl,
        revalidate: Duration::from_secs(3600),
        use_handles: false,
        ..default_cfg()
    }));
}

fn stress(t: &T) {
    let watching = t.fs.cfg.coherence == Coherence::Watch;
    let fs = &t.fs;
    let workers = 3;
    // Workers still running; the dropper stops when none is.
    let running = AtomicUsize::new(workers);
    let seed = std::env::var("RCUFS_NAME_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        })
        | 1;
    eprintln!("seed {seed}");
    let tops: Vec<String> = (0..workers).map(|i| format!("w{i}")).collect();
    let probes: Vec<Mutex<Option<(u64, String)>>> = (0..workers).map(|_| Mutex::new(None)).collect();
    let watcher = Watcher {
        queue: Mutex::new(Vec::new()),
        applied: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
    };
    for top in &tops {
        fs.mkdir(ROOT_INO, top.as_bytes(), 0o755, ME).expect("mkdir");
    }
    fs.mkdir(ROOT_INO, b"shared", 0o755, ME).expect("mkdir");
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
            while running.load(Ordering::Relaxed) > 0 {
                fs.drop_dir(ROOT_INO, rng.mode(), ME).expect("drop of the root");
                std::thread::yield_now();
            }
        });
        for probe in &probes {
            let running = &running;
            s.spawn(move || {
                while running.load(Ordering::Relaxed) > 0 {
                    let target = probe.lock().clone();
                    match target {
                        Some((parent, name)) => {
                            if let Ok(e) = fs.lookup(parent, name.as_bytes()) {
                                fs.forget(e.ino, 1);
                            }
                        }
                        None => std::thread::yield_now(),
                    }
                }
            });
        }
        if watching {
            let (watcher, running) = (&watcher, &running);
            s.spawn(move || watcher.run(fs, running, seed ^ 0x5851_f42d_4c95_7f2d));
        }
        let handles: Vec<_> = tops
            .iter()
            .enumerate()
            .map(|(i, top)| {
                let running = &running;
                let src = t.src.as_path();
                let probe = &probes[i];
                let watcher = watching.then_some((&watcher, i));
                s.spawn(move || {
                    let _done = Done(running);
                    let mut w = Worker {
                        fs,
                        src,
                        top: top.clone(),
                        rng: Rng(seed.wrapping_add(i as u64 * 0x1000_0001)),
                        dirs: vec![String::new()],
                        files: Vec::new(),
                        gone: VecDeque::new(),
                        refs: HashMap::new(),
                        // Names unique across workers (the shared directory).
                        next_name: i as u64 * 1_000_000,
                        log: VecDeque::new(),
                        probe,
                        watcher,
                        reported: 0,
                    };
                    for _ in 0..ops() {
                        w.step();
                    }
                    w.forget_all();
                })
            })
            .collect();
        for h in handles {
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
    });
}

/// Counts a worker out when it ends, panicking or not.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
