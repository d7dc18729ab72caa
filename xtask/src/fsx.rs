//! `cargo xtask fsx [--ops N] [--mode default|kernel-cache|both] [--seed S]
//! [--release] [--size BYTES] [--io-uring on|idle]`: fsx-style random I/O on
//! one file of an rcufs mount, checked against an exact model of the file
//! (`--io-uring`: the mount serves through FUSE over io_uring, with the fuse
//! module's `enable_uring` set for the run).
//!
//! After the classic fsx (Apple/NeXT, then xfstests' `ltp/fsx.c`): one
//! process, one file, a sequence of random operations, each read compared
//! byte for byte with an in-memory copy of what the file must hold. The
//! operations, drawn with fixed weights: `read` (`pread` of up to 64 KiB at
//! a random offset, past the end included), `write` (`pwrite` of up to
//! 64 KiB, extending the file up to `--size`), `mapread` and `mapwrite`
//! (a `MAP_SHARED` mapping of a random range inside the current size,
//! compared or written through it, then `msync(MS_SYNC)` and unmapped),
//! `truncate` (to a random size up to `--size`), `fsync`, and `reopen`
//! (close and open the file again, as fsx's `-c`). Every 1,000 operations
//! and at the end the whole file is read back and compared, through the
//! mount and in the source directly (the source must hold every byte the
//! model does: nothing acknowledged lives only in rcufs).
//!
//! The first miscompare stops the run with the offset, the expected and
//! the read bytes and the last 32 operations. Each mode mounts the real
//! `rcufs` (debug build unless `--release`) with a 16 MiB page cache, so
//! the file's pages are evicted and refilled as the run goes on.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::mount::{Daemon, target_dir};
use crate::util::{Rng, cargo, run};

/// Largest read or write.
const MAX_IO: u64 = 64 << 10;

#[derive(Clone, Copy, Debug)]
enum Op {
    Read,
    Write,
    MapRead,
    MapWrite,
    Truncate,
    Fsync,
    Reopen,
}

/// Weights out of 100: reads and writes dominate, as in fsx.
const OPS: &[(Op, u64)] = &[
    (Op::Read, 31),
    (Op::Write, 31),
    (Op::MapRead, 12),
    (Op::MapWrite, 12),
    (Op::Truncate, 8),
    (Op::Fsync, 1),
    (Op::Reopen, 5),
];

struct Fsx {
    path: PathBuf,
    src_path: PathBuf,
    file: File,
    model: Vec<u8>,
    rng: Rng,
    size_limit: u64,
    log: VecDeque<String>,
    counts: [u64; 7],
}

impl Fsx {
    fn note(&mut self, s: String) {
        if self.log.len() == 32 {
            self.log.pop_front();
        }
        self.log.push_back(s);
    }

    fn fail(&self, what: &str, off: u64, want: &[u8], got: &[u8]) -> anyhow::Error {
        let i = want
            .iter()
            .zip(got)
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(got.len()));
        let show = |b: &[u8]| {
            b.iter()
                .skip(i)
                .take(16)
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        anyhow::anyhow!(
            "MISCOMPARE ({what}) at file offset {}: expected {} bytes, read {}; from there expected [{}] read [{}]\nlast operations:\n  {}",
            off + i as u64,
            want.len(),
            got.len(),
            show(want),
            show(got),
            self.log.iter().cloned().collect::<Vec<_>>().join("\n  ")
        )
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next() % n.max(1)
    }

    /// `len` bytes of a pattern no earlier write is likely to have left:
    /// a fresh random word, each copy of it xored with its position.
    fn random_bytes(&mut self, len: usize) -> Vec<u8> {
        let tag = self.rng.next();
        let mut v = vec![0u8; len];
        for (i, c) in v.chunks_mut(8).enumerate() {
            let w = (tag ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
        v
    }

    fn expected(&self, off: u64, len: u64) -> &[u8] {
        let a = (off as usize).min(self.model.len());
        let b = ((off + len) as usize).min(self.model.len());
        &self.model[a..b]
    }

    fn step(&mut self, n: u64) -> Result<()> {
        let mut pick = self.below(100);
        let op = OPS
            .iter()
            .find(|(_, w)| {
                if pick < *w {
                    true
                } else {
                    pick -= w;
                    false
                }
            })
            .map_or(Op::Read, |(o, _)| *o);
        let size = self.model.len() as u64;
        match op {
            Op::Read => {
                let off = self.below(size + MAX_IO);
                let len = 1 + self.below(MAX_IO);
                self.note(format!("{n}: read {off} +{len} (size {size})"));
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    let k = self.file.read_at(&mut buf[got..], off + got as u64)?;
                    if k == 0 {
                        break;
                    }
                    got += k;
                }
                buf.truncate(got);
                if buf != self.expected(off, len) {
                    return Err(self.fail("read", off, self.expected(off, len), &buf));
                }
            }
            Op::Write => {
                let off = self.below(self.size_limit - 1);
                let len = (1 + self.below(MAX_IO)).min(self.size_limit - off);
                let data = self.random_bytes(len as usize);
                self.note(format!("{n}: write {off} +{len} (size {size})"));
                self.file.write_all_at(&data, off)?;
                let end = (off + len) as usize;
                if end > self.model.len() {
                    self.model.resize(end, 0);
                }
                self.model[off as usize..end].copy_from_slice(&data);
            }
            Op::MapRead | Op::MapWrite if size == 0 => self.note(format!("{n}: map (empty file, skipped)")),
            Op::MapRead | Op::MapWrite => {
                let off = self.below(size);
                let len = (1 + self.below(MAX_IO)).min(size - off);
                let write = matches!(op, Op::MapWrite);
                self.note(format!(
                    "{n}: {} {off} +{len} (size {size})",
                    if write { "mapwrite" } else { "mapread" }
                ));
                let data = write.then(|| self.random_bytes(len as usize));
                let got = map_io(&self.file, off, len as usize, data.as_deref())?;
                match data {
                    Some(d) => self.model[off as usize..(off + len) as usize].copy_from_slice(&d),
                    None => {
                        if got != self.expected(off, len) {
                            return Err(self.fail("mapread", off, self.expected(off, len), &got));
                        }
                    }
                }
            }
            Op::Truncate => {
                let to = self.below(self.size_limit + 1);
                self.note(format!("{n}: truncate {size} -> {to}"));
                self.file.set_len(to)?;
                self.model.resize(to as usize, 0);
            }
            Op::Fsync => {
                self.note(format!("{n}: fsync"));
                self.file.sync_all()?;
            }
            Op::Reopen => {
                self.note(format!("{n}: reopen"));
                self.file = OpenOptions::new().read(true).write(true).open(&self.path)?;
            }
        }
        self.counts[op as usize] += 1;
        Ok(())
    }

    /// The whole file, through the mount and in the source, against the model.
    fn check_all(&self, n: u64) -> Result<()> {
        let through = std::fs::read(&self.path)?;
        if through != self.model {
            return Err(self.fail(
                &format!("whole file through the mount after op {n}"),
                0,
                &self.model,
                &through,
            ));
        }
        let src = std::fs::read(&self.src_path)?;
        if src != self.model {
            return Err(self.fail(&format!("whole file in the source after op {n}"), 0, &self.model, &src));
        }
        Ok(())
    }
}

/// Maps `len` bytes of `f` at `off` shared; writes `data` through the
/// mapping (then `msync`) or returns a copy of the mapped bytes.
fn map_io(f: &File, off: u64, len: usize, data: Option<&[u8]>) -> Result<Vec<u8>> {
    let page = 4096u64;
    let base = off / page * page;
    let skip = (off - base) as usize;
    let maplen = skip + len;
    let prot = if data.is_some() {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: a fresh shared mapping of an open file inside its current
    // size; nothing else in this process maps or shrinks the file meanwhile.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            maplen,
            prot,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            base as i64,
        )
    };
    if p == libc::MAP_FAILED {
        bail!("mmap: {}", std::io::Error::last_os_error());
    }
    let p = p.cast::<u8>();
    let out = match data {
        Some(d) => {
            // SAFETY: `skip + d.len()` is inside the mapping made above.
            unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), p.add(skip), d.len()) };
            // SAFETY: exactly the mapping made above.
            let r = unsafe { libc::msync(p.cast(), maplen, libc::MS_SYNC) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                // SAFETY: exactly the mapping made above, not used after.
                unsafe { libc::munmap(p.cast(), maplen) };
                bail!("msync: {e}");
            }
            Vec::new()
        }
        // SAFETY: `skip + len` bytes are mapped readable.
        None => unsafe { std::slice::from_raw_parts(p.add(skip), len) }.to_vec(),
    };
    // SAFETY: exactly the mapping made above, not used after.
    unsafe { libc::munmap(p.cast(), maplen) };
    Ok(out)
}

fn run_mode(
    rcufs: &Path,
    kernel_cache: bool,
    io_uring: Option<&str>,
    ops: u64,
    seed: u64,
    size_limit: u64,
) -> Result<()> {
    let name = if kernel_cache { "kernel-cache" } else { "default" };
    let work = tempfile_dir(name)?;
    let (src, mnt) = (work.join("src"), work.join("mnt"));
    std::fs::create_dir_all(&src)?;
    std::fs::create_dir_all(&mnt)?;
    let mut args = vec!["--page-cache-size", "16M", "--coherence", "ttl"];
    if kernel_cache {
        args.push("--kernel-cache");
    }
    if let Some(mode) = io_uring {
        args.extend(["--io-uring", mode]);
    }
    let log = target_dir().join(format!("rcufs-fsx/{name}.log"));
    std::fs::create_dir_all(log.parent().expect("a parent"))?;
    let daemon = Daemon::start(rcufs, &src, &mnt, &args, &log)?;
    let path = mnt.join("fsx.dat");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let mut fsx = Fsx {
        path,
        src_path: src.join("fsx.dat"),
        file,
        model: Vec::new(),
        rng: Rng(seed | 1),
        size_limit,
        log: VecDeque::new(),
        counts: [0; 7],
    };
    eprintln!(
        "xtask fsx: {name} mode: {ops} operations, seed {seed}, file up to {size_limit} bytes, 16 MiB page cache"
    );
    let start = Instant::now();
    let result = (|| -> Result<()> {
        for n in 1..=ops {
            fsx.step(n)?;
            if n % 1000 == 0 {
                fsx.check_all(n)?;
            }
            if n % 100_000 == 0 {
                eprintln!(
                    "xtask fsx: {name}: {n} operations, {:.0} s",
                    start.elapsed().as_secs_f64()
                );
            }
        }
        fsx.check_all(ops)
    })();
    drop(fsx.file);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&work);
    result.with_context(|| format!("{name} mode"))?;
    let names = ["read", "write", "mapread", "mapwrite", "truncate", "fsync", "reopen"];
    let counts: Vec<String> = names.iter().zip(fsx.counts).map(|(n, c)| format!("{n} {c}")).collect();
    eprintln!(
        "xtask fsx: {name} mode PASSED: {ops} operations in {:.1} s, 0 miscompares ({})",
        start.elapsed().as_secs_f64(),
        counts.join(", ")
    );
    Ok(())
}

/// A fresh directory for one mode's run, on the real disk.
fn tempfile_dir(name: &str) -> Result<PathBuf> {
    let base = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let dir = base.join(format!("rcufs-fsx-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub fn fsx(args: &[String]) -> Result<()> {
    let mut ops = 1_000_000u64;
    let mut modes = vec![false, true];
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut release = false;
    let mut size = 1u64 << 20;
    let mut io_uring = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |what: &str| it.next().with_context(|| format!("{what} needs a value")).cloned();
        match a.as_str() {
            "--ops" => ops = val("--ops")?.parse().context("--ops")?,
            "--seed" => seed = val("--seed")?.parse().context("--seed")?,
            "--size" => size = val("--size")?.parse().context("--size")?,
            "--release" => release = true,
            "--io-uring" => {
                let m = val("--io-uring")?;
                if m != "on" && m != "idle" {
                    bail!("--io-uring takes on or idle, not {m}");
                }
                io_uring = Some(m);
            }
            "--mode" => {
                modes = match val("--mode")?.as_str() {
                    "default" => vec![false],
                    "kernel-cache" => vec![true],
                    "both" => vec![false, true],
                    other => bail!("unknown mode {other}: default, kernel-cache or both"),
                }
            }
            other => bail!(
                "unknown argument {other}; usage: cargo xtask fsx [--ops N] [--mode default|kernel-cache|both] [--seed S] [--release] [--size BYTES] [--io-uring on|idle]"
            ),
        }
    }
    if size < 2 {
        bail!("--size must be at least 2 bytes");
    }
    let mut build = cargo();
    build.args(["build", "--locked", "-p", "fuse-fs", "--bin", "rcufs"]);
    if release {
        build.arg("--release");
    }
    run(&mut build)?;
    let rcufs = target_dir().join(if release { "release/rcufs" } else { "debug/rcufs" });
    // FUSE over io_uring needs the fuse module's `enable_uring` for the run.
    let _param = match io_uring {
        Some(_) => Some(crate::util::UringParam::set()?),
        None => None,
    };
    for kc in modes {
        run_mode(&rcufs, kc, io_uring.as_deref(), ops, seed, size)?;
    }
    Ok(())
}
