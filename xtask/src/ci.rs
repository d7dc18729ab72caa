//! `cargo xtask ci`, `cargo xtask loom`, `cargo xtask tidy`.
//!
//! `ci` runs fmt, clippy, the tests (installing Debian's `prometheus`
//! package first, for promtool and a real scrape; then the vendored
//! fuser's unit tests), a one-minute soak (30 s
//! of each mode), `netbench --ci` (rcufs over a latency-injected sshfs,
//! small, with its checks, and a 25,000-entry walk over a source without
//! file handles under a 512-descriptor limit; about a minute), the bench
//! build and the loom models.

use std::time::Instant;

use anyhow::{Result, bail};

use crate::util::{cargo, run};

/// The cfgs that route `dcache`'s and `pagecache`'s `sync` modules and
/// crossbeam-epoch through loom.
const LOOM_RUSTFLAGS: &str = "--cfg rcufs_loom --cfg crossbeam_loom";

/// Runs every step, even after a failure, then prints a summary and fails if
/// any step failed.
pub fn ci() -> Result<()> {
    type Step = (&'static str, fn() -> Result<()>);
    let steps: [Step; 7] = [
        ("fmt", fmt),
        ("clippy", clippy),
        ("test", test),
        ("soak", soak),
        ("netbench", netbench),
        ("bench-build", bench_build),
        ("loom", || loom(None)),
    ];
    let mut results = Vec::new();
    for (name, step) in steps {
        eprintln!("\nxtask ci: ===== {name} =====");
        let start = Instant::now();
        let result = step();
        if let Err(e) = &result {
            eprintln!("xtask ci: {name} FAILED: {e:#}");
        }
        results.push((name, result.is_ok(), start.elapsed()));
    }
    eprintln!("\nxtask ci: summary");
    for (name, ok, took) in &results {
        eprintln!(
            "  {:<12} {:<6} {:>7.1}s",
            name,
            if *ok { "ok" } else { "FAILED" },
            took.as_secs_f64()
        );
    }
    let failed: Vec<&str> = results.iter().filter(|r| !r.1).map(|r| r.0).collect();
    if !failed.is_empty() {
        bail!("failed steps: {}", failed.join(", "));
    }
    eprintln!("xtask ci: all steps passed");
    Ok(())
}

pub fn tidy() -> Result<()> {
    fmt()?;
    clippy()
}

fn fmt() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))
}

fn clippy() -> Result<()> {
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]))
}

fn test() -> Result<()> {
    // The daily-operation mount tests (`fuse-fs/tests/it/ops.rs`) run the
    // real util-linux tools.
    crate::util::ensure_programs(&[
        ("mount", "mount"),
        ("umount", "mount"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
    ])?;
    // The metrics tests check the exposition with promtool and scrape a mount
    // with a Prometheus server of their own (Debian's `prometheus` package
    // has both; its own service is not started).
    crate::util::ensure_programs_without_services(&[("promtool", "prometheus"), ("prometheus", "prometheus")])?;
    // The mount tests must run here: with these variables set they fail,
    // rather than skip, when they cannot mount or find the Prometheus tools.
    run(cargo()
        .args(["test", "--workspace", "--locked"])
        .env("RCUFS_REQUIRE_MOUNT", "1")
        .env("RCUFS_REQUIRE_PROMETHEUS", "1"))?;
    fuser_unit_tests()
}

/// The vendored fuser's unit tests (its additions' among them,
/// `vendor/fuser/PATCHES.md`). It is not a workspace member, so it is
/// tested as a package of its own, resolved from a copy of the
/// workspace's lock file (so that the versions it shares with rcufs are
/// the ones rcufs builds with), in a target directory of its own.
fn fuser_unit_tests() -> Result<()> {
    let root = crate::util::root();
    std::fs::copy(root.join("Cargo.lock"), root.join("vendor/fuser/Cargo.lock"))?;
    run(cargo().args([
        "test",
        "--lib",
        "--manifest-path",
        "vendor/fuser/Cargo.toml",
        "--target-dir",
        "target/vendor-fuser",
    ]))
}

/// One minute of `cargo xtask soak` on the debug binary: 30 seconds of each
/// mode, both watching the source (`--coherence auto`, as a user gets it).
/// The workers change files in the source and read them back at once
/// through the mount, which with `--kernel-cache` checks that an open
/// catches up with the watcher (`fuse-fs/SEMANTICS.md`, "Limits").
fn soak() -> Result<()> {
    let args = |mode: &str, coherence: &str| -> Vec<String> {
        ["--minutes", "0.5", "--mode", mode, "--coherence", coherence]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let default = crate::soak::soak(&args("default", "auto"));
    let kernel = crate::soak::soak(&args("kernel-cache", "auto"));
    default.and(kernel)
}

/// `cargo xtask netbench --ci` on the debug binary: every mode over the
/// latency-injected sshfs at a small scale, each result checked, changes
/// made on the server seen within each mode's promise, and a walk of
/// 25,000 entries with the daemon's descriptor limit at 512 (about a
/// minute; it fails loudly if sshfs cannot be installed or mounted).
fn netbench() -> Result<()> {
    crate::netbench::netbench(&["--ci".to_string()])
}

/// Builds the benches (release) so that a bench that no longer compiles or
/// links fails CI; running them is `cargo xtask bench`.
fn bench_build() -> Result<()> {
    run(cargo().args(["bench", "--workspace", "--locked", "--no-run"]))
}

/// Runs the loom models in release mode in a target directory of their own
/// (the cfgs change every crate's build, so sharing `target/` would rebuild
/// everything twice per CI run). A filter that names a model file
/// (`dcache`, `pagecache`: `loom-tests/tests/<name>.rs`) runs every model of
/// that file; any other filter selects models by name.
pub fn loom(filter: Option<&str>) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["test", "--release", "--locked", "-p", "loom-tests"])
        .env("RUSTFLAGS", LOOM_RUSTFLAGS)
        .env("CARGO_TARGET_DIR", crate::util::root().join("target/loom"));
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        cmd.env("LOOM_MAX_PREEMPTIONS", "2");
    }
    if let Some(f) = filter {
        let file = crate::util::root().join("loom-tests/tests").join(format!("{f}.rs"));
        if file.is_file() {
            cmd.args(["--test", f]);
        } else {
            cmd.args(["--", f]);
        }
    }
    run(&mut cmd)
}
