//! Running commands, finding the workspace, installing Debian packages, a
//! small random number generator, a benchmark's work directory.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of this crate's manifest directory).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// A `cargo` command run from the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Runs `cmd` with inherited stdio and fails unless it exits with status 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {}", display(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{}`", display(cmd)))?;
    if !status.success() {
        bail!("`{}` failed: {status}", display(cmd));
    }
    Ok(())
}

fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Whether `program` is on `PATH`.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Installs the Debian packages that provide the missing `programs`
/// (`(program, package)` pairs). Runs `apt-get update` once, first.
#[allow(dead_code)] // Used by the tasks that need outside tools.
pub fn ensure_programs(programs: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = programs
        .iter()
        .filter(|(prog, _)| !have(prog))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !have("apt-get") {
        bail!("missing programs from packages {missing:?} and no apt-get to install them");
    }
    eprintln!("xtask: installing Debian packages {missing:?}");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// As [`ensure_programs`], but no service a package ships is started by the
/// install: a `policy-rc.d` that denies every start (exit 101, the Debian
/// policy interface that `invoke-rc.d` and `deb-systemd-invoke` obey) is in
/// place while `apt-get` runs, and removed afterwards if this wrote it.
pub fn ensure_programs_without_services(programs: &[(&str, &str)]) -> Result<()> {
    if programs.iter().all(|(prog, _)| have(prog)) {
        return Ok(());
    }
    let policy = std::path::Path::new("/usr/sbin/policy-rc.d");
    let ours = !policy.exists();
    if ours {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(
            policy,
            "#!/bin/sh\n# Written by cargo xtask for one apt-get install: start no service.\nexit 101\n",
        )
        .with_context(|| format!("writing {}", policy.display()))?;
        std::fs::set_permissions(policy, std::fs::Permissions::from_mode(0o755))?;
    }
    let result = ensure_programs(programs);
    if ours {
        let _ = std::fs::remove_file(policy);
    }
    result
}

/// A short description of this machine (CPU model, cores, memory, kernel) for
/// the benchmark summaries.
pub fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    serde_json::json!({
        "cpu": model,
        "cores": cores,
        "memory_gib": (mem_kib as f64 / (1024.0 * 1024.0)).round(),
        "kernel": kernel.trim(),
    })
}

/// The 1-minute load average (`/proc/loadavg`), or NaN if unreadable.
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// A small deterministic generator (xorshift64*), so the xtask needs no `rand`.
/// The state must not be zero.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A benchmark task's work directory under `$TMPDIR` (default `/var/tmp`,
/// which is on the root filesystem like the source trees users mount),
/// named after the task and the process; removed when dropped unless kept.
pub struct WorkDir {
    pub path: PathBuf,
    keep: bool,
    task: &'static str,
}

impl WorkDir {
    /// The path for `task` (`fsbench`, `netbench`); not created yet.
    pub fn new(task: &'static str, keep: bool) -> Self {
        let base = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
        Self {
            path: base.join(format!("rcufs-{task}-{}", std::process::id())),
            keep,
            task,
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("xtask {}: kept {}", self.task, self.path.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("xtask {}: cannot remove {}: {e}", self.task, self.path.display());
        }
    }
}

/// The fuse module's `enable_uring`, set for a run and put back when
/// dropped.
pub struct UringParam(String);

const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

impl UringParam {
    pub fn set() -> Result<UringParam> {
        let was = std::fs::read_to_string(URING_PARAM)
            .with_context(|| format!("reading {URING_PARAM} (a kernel with FUSE over io_uring is needed)"))?;
        std::fs::write(URING_PARAM, "1").with_context(|| format!("setting {URING_PARAM} (root is needed)"))?;
        Ok(UringParam(was.trim().to_string()))
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let back = if self.0 == "Y" { "1" } else { "0" };
        if let Err(e) = std::fs::write(URING_PARAM, back) {
            eprintln!("xtask: could not put {URING_PARAM} back to {}: {e}", self.0);
        }
    }
}
