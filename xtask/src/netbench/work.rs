//! The generated data sets and the workloads `netbench` times on them.
//!
//! Everything is generated once in the directory the SFTP server serves
//! (on the real disk) and then only read through the mounts, except the
//! cargo build, whose target directory is on the local disk, and `git
//! status`, which may refresh the repository's index (each mode has its own
//! copy of the repository so that no mode refreshes another's index).

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::util::Rng;

/// Sizes of the data sets.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// The `find`+`stat` tree: top directories x subdirectories x files.
    pub top: usize,
    pub sub: usize,
    pub files: usize,
    /// The git repository: directories x files.
    pub git_dirs: usize,
    pub git_files: usize,
    /// The crate: modules.
    pub modules: usize,
    /// The data set: files x MiB.
    pub data_files: usize,
    pub data_mib: usize,
    /// The include search: directories on the path, headers per directory.
    pub inc_dirs: usize,
    pub inc_headers: usize,
}

impl Scale {
    pub fn full() -> Self {
        Scale {
            top: 20,
            sub: 10,
            files: 100,
            git_dirs: 50,
            git_files: 40,
            modules: 40,
            data_files: 16,
            data_mib: 4,
            inc_dirs: 8,
            inc_headers: 60,
        }
    }

    pub fn ci() -> Self {
        Scale {
            top: 5,
            sub: 4,
            files: 50,
            git_dirs: 10,
            git_files: 20,
            modules: 4,
            data_files: 4,
            data_mib: 1,
            inc_dirs: 4,
            inc_headers: 20,
        }
    }

    /// Files in the tree.
    pub fn tree_files(&self) -> usize {
        self.top * self.sub * self.files
    }

    /// Bytes in the data set.
    pub fn data_bytes(&self) -> u64 {
        (self.data_files * (self.data_mib << 20)) as u64
    }
}

/// Generates every data set under `root`; `repos` copies of the git
/// repository (`repo0`, `repo1`, ...).
pub fn generate(root: &Path, s: &Scale, repos: usize) -> Result<()> {
    let mut rng = Rng(0x6e65_7462_656e_6368);
    // The tree: small files, so that sizes differ.
    for t in 0..s.top {
        for u in 0..s.sub {
            let dir = root.join(format!("tree/t{t:02}/s{u:02}"));
            fs::create_dir_all(&dir)?;
            for f in 0..s.files {
                fs::write(dir.join(format!("f{f:04}.c")), &b"int x;\n"[..(f % 7) + 1])?;
            }
        }
    }
    // The git repository, committed, then copied per mode.
    let repo = root.join("repo0");
    for d in 0..s.git_dirs {
        let dir = repo.join(format!("src/m{d:03}"));
        fs::create_dir_all(&dir)?;
        for f in 0..s.git_files {
            let mut text = String::new();
            for l in 0..20 {
                let _ = writeln!(text, "// {d}/{f}/{l} {:016x}", rng.next());
            }
            fs::write(dir.join(format!("f{f:03}.rs")), text)?;
        }
    }
    fs::write(repo.join("README"), "netbench\n")?;
    git(&repo, &["init", "-q"])?;
    git(&repo, &["add", "."])?;
    git(
        &repo,
        &[
            "-c",
            "user.name=netbench",
            "-c",
            "user.email=netbench@localhost",
            "commit",
            "-qm",
            "data",
        ],
    )?;
    for i in 1..repos {
        let status = Command::new("cp")
            .arg("-a")
            .arg(&repo)
            .arg(root.join(format!("repo{i}")))
            .status()?;
        if !status.success() {
            bail!("copying the repository failed");
        }
    }
    // The crate: a binary with `modules` modules of a few functions each.
    let krate = root.join("crate");
    fs::create_dir_all(krate.join("src"))?;
    fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"netbench-crate\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )?;
    let mut main = String::new();
    for m in 0..s.modules {
        let _ = writeln!(main, "mod m{m};");
        let mut text = String::new();
        for f in 0..8 {
            let _ = writeln!(
                text,
                "pub fn f{f}(x: u64) -> u64 {{ x.wrapping_mul({}).rotate_left({}) ^ {} }}",
                rng.next() | 1,
                f + 1,
                rng.next()
            );
        }
        fs::write(krate.join(format!("src/m{m}.rs")), text)?;
    }
    main.push_str("fn main() {\n    let mut x = 1u64;\n");
    for m in 0..s.modules {
        let _ = writeln!(main, "    x = m{m}::f{}(x);", m % 8);
    }
    main.push_str("    println!(\"{x}\");\n}\n");
    fs::write(krate.join("src/main.rs"), main)?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["generate-lockfile", "--offline"])
        .current_dir(&krate)
        .status()?;
    if !status.success() {
        bail!("cargo generate-lockfile failed for the benchmark crate");
    }
    // The data set.
    fs::create_dir_all(root.join("data"))?;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..s.data_files {
        let mut f = File::create(root.join(format!("data/d{i:02}.bin")))?;
        for _ in 0..s.data_mib {
            for c in buf.chunks_mut(8) {
                c.copy_from_slice(&rng.next().to_le_bytes());
            }
            f.write_all(&buf)?;
        }
    }
    // The include path: header `h` lives only in directory `h % inc_dirs`.
    for d in 0..s.inc_dirs {
        let dir = root.join(format!("include/i{d}"));
        fs::create_dir_all(&dir)?;
        for h in (0..s.inc_dirs * s.inc_headers).filter(|h| h % s.inc_dirs == d) {
            fs::write(dir.join(format!("h{h:04}.h")), "#pragma once\n")?;
        }
    }
    let _ = Command::new("sync").status();
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(["-c", "core.checkStat=minimal", "-c", "core.trustctime=false"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running git {args:?}"))?;
    if !out.status.success() {
        bail!(
            "git {args:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `find DIR -print0 | xargs -0 stat -c '%n %s'`: returns the output
/// (the names with the tree's root cut off, and sizes), sorted.
pub fn find_stat(dir: &Path) -> Result<Vec<String>> {
    let out = Command::new("sh")
        .arg("-c")
        .arg("find \"$1\" -print0 | xargs -0 stat -c '%n %s'")
        .arg("sh")
        .arg(dir)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "find | xargs stat in {} failed ({}): {}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let prefix = dir.to_string_lossy().into_owned();
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_string())
        .collect();
    lines.sort();
    Ok(lines)
}

/// `git status --porcelain` in `repo` (with the index compared by size and
/// mtime only, as git advises for filesystems whose inode numbers change).
pub fn git_status(repo: &Path) -> Result<String> {
    git(repo, &["status", "--porcelain"])
}

/// `cargo build --offline` of the crate at `krate` with the target
/// directory `target` (on the local disk).
pub fn cargo_build(krate: &Path, target: &Path) -> Result<()> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline", "--quiet"])
        .current_dir(krate)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "cargo build in {} failed: {}",
            krate.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Reads every file of the data set to its end; returns a checksum of
/// the first 8 bytes of every 512 (position-weighted, so a page read at the
/// wrong offset changes it). Summing every byte cost more than the read
/// itself in this task's debug build: about 0.9 s for 64 MiB, the whole of
/// the `local` mode's time in the first recorded run.
pub fn read_data(data: &Path, s: &Scale) -> Result<u64> {
    let mut sum = 0u64;
    let mut buf = vec![0u8; 128 * 1024];
    let mut whole = Vec::new();
    for i in 0..s.data_files {
        let p = data.join(format!("d{i:02}.bin"));
        let mut f = File::open(&p).with_context(|| format!("opening {}", p.display()))?;
        whole.clear();
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            whole.extend_from_slice(&buf[..n]);
        }
        for (k, c) in whole.chunks(512).enumerate() {
            let mut w = [0u8; 8];
            let len = c.len().min(8);
            w[..len].copy_from_slice(&c[..len]);
            sum = sum.wrapping_mul(31).wrapping_add(u64::from_le_bytes(w) ^ k as u64);
        }
        sum = sum.wrapping_add(whole.len() as u64);
    }
    Ok(sum)
}

/// A compiler's include search: for each header, `stat` it in each
/// directory of the path in order until found. Returns (found, missing
/// stats).
pub fn include_search(include: &Path, s: &Scale) -> Result<(usize, usize)> {
    let dirs: Vec<PathBuf> = (0..s.inc_dirs).map(|d| include.join(format!("i{d}"))).collect();
    let (mut found, mut missing) = (0, 0);
    for h in 0..s.inc_dirs * s.inc_headers {
        let name = format!("h{h:04}.h");
        for d in &dirs {
            match fs::symlink_metadata(d.join(&name)) {
                Ok(_) => {
                    found += 1;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing += 1,
                Err(e) => bail!("stat {}: {e}", d.join(&name).display()),
            }
        }
    }
    Ok((found, missing))
}
