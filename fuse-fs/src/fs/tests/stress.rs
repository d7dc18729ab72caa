//! The name layer under concurrent changes and drops, without a mount.
//!
//! Worker threads change their own subtrees (`w0`, `w1`, ...) as the
//! kernel drives the default mode, which keeps no entries: every path
//! component of every operation is a LOOKUP, each successful one takes a
//! reference, and references go back with FORGET (a subtree's all at once,
//! as the kernel evicts children before their parents). Meanwhile another
//! thread drops the root's caches in every mode, and the workers drop their
//! own directories. Every path a worker's model has must resolve to an
//! object of its kind, and every name it removed or renamed away must be
//! ENOENT: nothing else changes the source, so no answer may lag.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::AtomicUsize;

use super::*;

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
            "{}: {what}\nlast operations, oldest first:\n  {}",
            self.top,
            log.join("\n  ")
        );
    }

    fn full(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.top.clone()
        } else {
            format!("{}/{rel}", self.top)
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
                let on_disk = self.fs_root_path(rel);
                self.fail(format!("{rel}: {e} (in the source: {on_disk})"))
            }
        }
    }

    fn fs_root_path(&self, rel: &str) -> String {
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
                let on_disk = self.fs_root_path(rel);
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
                let dir = self.dirs[self.rng.below(self.dirs.len())].clone();
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
                let to_dir = self.dirs[self.rng.below(self.dirs.len())].clone();
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
            8..=10 if self.dirs.len() > 1 => {
                let from = self.dirs[1 + self.rng.below(self.dirs.len() - 1)].clone();
                // A target directory not under the one moved.
                let targets: Vec<String> = self
                    .dirs
                    .iter()
                    .filter(|d| **d != from && !d.starts_with(&format!("{from}/")))
                    .cloned()
                    .collect();
                let to_dir = targets[self.rng.below(targets.len())].clone();
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
                self.note(format!("unlink {rel}"));
                let (dir, name) = Self::split(&rel);
                let p = self.must_resolve(dir, Kind::Dir).ino;
                self.must_resolve(&rel, Kind::File);
                self.fs
                    .unlink(p, name.as_bytes(), ME)
                    .unwrap_or_else(|e| self.fail(format!("unlink {rel}: {e}")));
                self.forget_gone(&rel);
                self.must_be_gone(&rel);
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
                    self.note(format!("rmdir {rel}"));
                    let (dir, name) = Self::split(&rel);
                    let p = self.must_resolve(dir, Kind::Dir).ino;
                    self.must_resolve(&rel, Kind::Dir);
                    self.fs
                        .rmdir(p, name.as_bytes(), ME)
                        .unwrap_or_else(|e| self.fail(format!("rmdir {rel}: {e}")));
                    self.dirs.retain(|d| *d != rel);
                    self.forget_gone(&rel);
                    self.must_be_gone(&rel);
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
                    if self.dirs.iter().any(|d| d == dir) {
                        self.must_be_gone(&g);
                    }
                }
            }
        }
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
    let fs = &t.fs;
    let workers = 3;
    // Workers still running; the dropper stops when none is.
    let running = AtomicUsize::new(workers);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
        | 1;
    eprintln!("seed {seed}");
    let tops: Vec<String> = (0..workers).map(|i| format!("w{i}")).collect();
    let probes: Vec<Mutex<Option<(u64, String)>>> = (0..workers).map(|_| Mutex::new(None)).collect();
    for top in &tops {
        fs.mkdir(ROOT_INO, top.as_bytes(), 0o755, ME).expect("mkdir");
    }
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
        let handles: Vec<_> = tops
            .iter()
            .enumerate()
            .map(|(i, top)| {
                let running = &running;
                let src = t.src.as_path();
                let probe = &probes[i];
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
                        next_name: 0,
                        log: VecDeque::new(),
                        probe,
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
