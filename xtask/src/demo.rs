//! `cargo xtask demo`: what rcufs does, in about a minute, on a generated tree.
//!
//! Builds `rcufs` (release), writes a sample source tree into a temporary
//! directory, mounts it, walks and reads it twice (cold, then from the
//! caches), shows the stats, makes a file appear directly in the source and
//! shows that the cached negative entry hides it until the directory is
//! dropped with `rcufs drop`, drops another directory with
//! `setfattr -n user.rcufs.drop -v 3`, shows the stats again and unmounts.
//!
//! Whatever happens, the mount is taken down before the task ends (the
//! [`Daemon`] guard of `mount.rs`); the temporary tree is removed only once
//! nothing is mounted on it.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::mount::{Daemon, mounted_at, target_dir};
use crate::util::{cargo, ensure_programs, run};

/// Top-level directories of the sample tree, with (subdirectories, files per
/// subdirectory).
const LAYOUT: [(&str, usize, usize); 4] = [("src", 6, 20), ("docs", 3, 15), ("data", 4, 25), ("logs", 2, 10)];

pub fn demo() -> Result<()> {
    ensure_programs(&[("kill", "procps"), ("umount", "mount")])?;
    section("1. build rcufs (release)");
    run(cargo().args(["build", "--release", "--locked", "-p", "fuse-fs", "--bin", "rcufs"]))?;
    let rcufs = target_dir().join("release/rcufs");
    if !rcufs.is_file() {
        bail!("the build did not produce {}", rcufs.display());
    }

    let base = std::env::temp_dir().join(format!("rcufs-demo-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base)?;
    let result = demo_in(&rcufs, &base);
    // Remove the tree only if nothing is mounted on it any more.
    if mounted_at(&base.join("mnt")).is_none() {
        let _ = fs::remove_dir_all(&base);
    } else {
        eprintln!(
            "demo: {} is still mounted; leaving {} in place",
            base.join("mnt").display(),
            base.display()
        );
    }
    result
}

fn demo_in(rcufs: &Path, base: &Path) -> Result<()> {
    let (src, mnt) = (base.join("source"), base.join("mnt"));
    section("2. generate a sample source tree");
    let (files, bytes) = generate(&src)?;
    println!(
        "{}: {files} files, {} in {} directories",
        src.display(),
        human(bytes),
        LAYOUT.len()
    );
    fs::create_dir(&mnt)?;

    section("3. mount it");
    // A long revalidation interval so that the demo of the negative entry
    // below does not depend on how fast it runs.
    let args = ["--revalidate", "600", "--page-cache-size", "64M"];
    println!("$ rcufs mount {} {} {}", src.display(), mnt.display(), args.join(" "));
    let mut daemon = Daemon::start(rcufs, &src, &mnt, &args, &base.join("rcufs.log"))?;
    println!("mounted: {}", mnt.display());

    section("4. walk and read the whole tree, twice");
    let s0 = stats(rcufs, &mnt)?;
    let cold = walk(&mnt)?;
    let s1 = stats(rcufs, &mnt)?;
    let warm = walk(&mnt)?;
    let s2 = stats(rcufs, &mnt)?;
    if (cold.files, cold.bytes) != (files, bytes) || (warm.files, warm.bytes) != (files, bytes) {
        bail!("the walks saw {cold:?} and {warm:?}, the source has {files} files of {bytes} bytes");
    }
    println!(
        "pass 1 (cold caches: lookups and reads go to the source): {}",
        cold.show()
    );
    println!("        {}", delta(&s0, &s1));
    println!(
        "pass 2 (warm caches: lookups and reads answered by rcufs's caches): {}",
        warm.show()
    );
    println!("        {}", delta(&s1, &s2));
    println!(
        "(the source was just written, so the host's page cache already holds it and pass 1 is not slow \
         for lack of disk I/O; the counters show where each answer came from)"
    );

    section("5. rcufs stats");
    println!("$ rcufs stats {}", mnt.display());
    run_shown(Command::new(rcufs).arg("stats").arg(&mnt))?;

    section("6. a name created directly in the source, and `rcufs drop`");
    let late = mnt.join("docs/NEWS");
    println!("$ stat {}   -> {}", late.display(), stat_result(&late));
    fs::write(src.join("docs/NEWS"), b"written directly in the source\n")?;
    println!("(created {} directly in the source)", src.join("docs/NEWS").display());
    let before = stat_result(&late);
    let why = if before == "exists" {
        "already visible: rcufs cached no negative entry for it"
    } else {
        "still hidden: the cached negative entry answers, the source is not asked"
    };
    println!("$ stat {}   -> {before}   ({why})", late.display());
    println!("$ rcufs drop {}", mnt.join("docs").display());
    run_shown(Command::new(rcufs).arg("drop").arg(mnt.join("docs")))?;
    let after = stat_result(&late);
    println!("$ stat {}   -> {after}", late.display());
    if after != "exists" {
        bail!("{} is not visible after the drop", late.display());
    }

    section("7. drop by extended attribute");
    ensure_programs(&[("setfattr", "attr")])?;
    let data = mnt.join("data");
    println!("$ setfattr -n user.rcufs.drop -v 3 {}", data.display());
    run_shown(
        Command::new("setfattr")
            .args(["-n", "user.rcufs.drop", "-v", "3"])
            .arg(&data),
    )?;
    let s3 = stats(rcufs, &mnt)?;
    println!(
        "drops so far: {} requests, {} dentries and {} pages ({}) dropped",
        field(&s3, "drops", "requests"),
        field(&s3, "drops", "dentries_dropped") + field(&s3, "drops", "busy"),
        field(&s3, "drops", "pages_dropped"),
        human(field(&s3, "drops", "bytes_freed")),
    );
    let third = walk(&mnt)?;
    let s4 = stats(rcufs, &mnt)?;
    println!(
        "pass 3 (docs and data refilled from the source, the rest still cached): {}",
        third.show()
    );
    println!("        {}", delta(&s3, &s4));

    section("8. rcufs stats again");
    println!("$ rcufs stats {}", mnt.display());
    run_shown(Command::new(rcufs).arg("stats").arg(&mnt))?;

    section("9. unmount (SIGTERM to rcufs)");
    daemon.stop()?;
    println!("unmounted cleanly; the source is untouched at {}", src.display());
    Ok(())
}

fn section(title: &str) {
    println!("\n=== {title} ===");
}

/// Writes the sample tree; returns (files, bytes).
fn generate(src: &Path) -> Result<(usize, u64)> {
    let (mut files, mut bytes) = (0, 0u64);
    for (top, subdirs, per_dir) in LAYOUT {
        for d in 0..subdirs {
            let dir = src.join(top).join(format!("part{d:02}"));
            fs::create_dir_all(&dir)?;
            for f in 0..per_dir {
                // 1 KiB to 8 KiB, deterministic.
                let len = 1024 + (files * 1637) % (7 * 1024);
                let line = format!("{top}/part{d:02}/file{f:03}: sample line for the rcufs demo\n");
                let body: Vec<u8> = line.bytes().cycle().take(len).collect();
                fs::write(dir.join(format!("file{f:03}.txt")), &body)?;
                files += 1;
                bytes += len as u64;
            }
        }
    }
    Ok((files, bytes))
}

#[derive(Debug)]
struct Walk {
    files: usize,
    dirs: usize,
    bytes: u64,
    took: Duration,
}

impl Walk {
    fn show(&self) -> String {
        format!(
            "{} files, {} directories, {} in {:.1} ms",
            self.files,
            self.dirs,
            human(self.bytes),
            self.took.as_secs_f64() * 1e3
        )
    }
}

/// Lists every directory and reads every file under `root`.
fn walk(root: &Path) -> Result<Walk> {
    let start = Instant::now();
    let mut w = Walk {
        files: 0,
        dirs: 0,
        bytes: 0,
        took: Duration::ZERO,
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        w.dirs += 1;
        for entry in fs::read_dir(&dir).with_context(|| format!("readdir {}", dir.display()))? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else {
                w.bytes += fs::read(&path)
                    .with_context(|| format!("read {}", path.display()))?
                    .len() as u64;
                w.files += 1;
            }
        }
    }
    w.took = start.elapsed();
    // The walk counted the mount root itself.
    w.dirs -= 1;
    Ok(w)
}

fn stat_result(p: &Path) -> String {
    match fs::metadata(p) {
        Ok(_) => "exists".into(),
        Err(e) => format!("{e}"),
    }
}

/// `rcufs stats --json` for the mount.
fn stats(rcufs: &Path, mnt: &Path) -> Result<Value> {
    let out = Command::new(rcufs).args(["stats", "--json"]).arg(mnt).output()?;
    if !out.status.success() {
        bail!("rcufs stats failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).context("rcufs stats --json printed no JSON")
}

fn field(v: &Value, section: &str, key: &str) -> u64 {
    v[section][key].as_u64().unwrap_or(0)
}

/// The change of the hit and miss counters between two stats snapshots.
fn delta(a: &Value, b: &Value) -> String {
    let d = |s: &str, k: &str| field(b, s, k).saturating_sub(field(a, s, k));
    format!(
        "dcache: +{} hits, +{} misses; page cache: +{} hits, +{} misses",
        d("dcache", "hits"),
        d("dcache", "misses"),
        d("pagecache", "hits"),
        d("pagecache", "misses")
    )
}

fn run_shown(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{:?} failed: {status}", cmd.get_program());
    }
    Ok(())
}

fn human(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}
