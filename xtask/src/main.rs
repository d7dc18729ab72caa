//! Project automation for rcufs, in the cargo-xtask style: `cargo xtask <task>`.
//!
//! Every task that needs a tool the preinstalled Rust toolchain does not ship
//! installs it first (Debian packages through `apt-get`), so the tasks work on
//! a fresh machine. Dependencies stay few so that this crate compiles fast.

mod bench;
mod ci;
mod demo;
mod fsbench;
mod fsx;
mod install;
mod mount;
mod netbench;
mod soak;
mod util;

use anyhow::{Result, bail};

const HELP: &str = "\
cargo xtask <TASK>

Tasks:
  ci              everything CI runs: fmt check, clippy -D warnings, all tests
                  (mount tests included), a one-minute soak (30 s per mode),
                  netbench --ci (about a minute), loom models at preemption
                  bound 2
  loom [FILTER]   the loom models (release, LOOM_MAX_PREEMPTIONS=2 unless set);
                  FILTER: a model file (dcache, pagecache) or part of a model's name
  bench [--quick] [--paper] [BENCH...]
                  criterion benches of the cache crates against their peers,
                  and seed 002's table (--paper: at 16,777,216 indexes)
  fsbench [--quick] [--keep] [--paper] [--skip PART,...] [--modes MODE,...] [--name NAME]
                  the mount against the native source filesystem (--paper:
                  also seeds 001 and 004 at the papers' scales, as curves);
                  a partial run writes fsbench_partial.{md,json}, --name NAME.{md,json}
  fsx [--ops N] [--mode default|kernel-cache|both] [--seed S] [--release]
      [--size BYTES]
                  fsx-style random reads, writes, mapped reads and writes,
                  truncates, fsyncs and reopens of one file of a mount,
                  every read checked against a model (default 1,000,000
                  operations per mode, both modes, debug build)
  netbench [--ci] [--rounds N] [--delay-ms MS] [--ttl SECS] [--keep]
                  rcufs in front of a network filesystem: sshfs over a loopback
                  SFTP server with an added delay (0.5 ms each way), raw sshfs
                  against rcufs in both modes (find+stat, git status, a cargo
                  build, re-reads, an include search); --ci: small, with checks
  netbench --walk N [--walk-source rcufs|sshfs]
                  a find | xargs stat walk of N entries over a source without
                  file handles, with the daemon's descriptors and RSS sampled
  demo            mount a generated example tree and show what rcufs does
  install [--prefix DIR] [--sbin DIR] [--debug]
                  build rcufs (release unless --debug) and install it as
                  PREFIX/bin/rcufs (default /usr/local) with the mount(8)
                  helper links SBIN/mount.fuse.rcufs and SBIN/mount.rcufs
                  (default /sbin)
  soak [--minutes N] [--mode default|kernel-cache|both] [--seed S] [--workers W]
       [--page-cache-size SIZE] [--release] [--keep] [--skip CLASS,...]
                  rcufs under a verified multi-process load, each mode in turn
                  (defaults: 10 minutes per mode, both modes, 4 workers, 16M,
                  debug build); every byte read checked against a model; RSS
                  and descriptors every second in target/rcufs-soak/MODE.csv;
                  fails on a miscompare, an unexpected errno, a hang, an ERROR
                  log line, RSS over the bound or pages a full drop leaves.
                  --skip takes classes (mmap, truncate, namespace, drops,
                  src-reopen, src-drop) or single kinds; none by default
  tidy            fmt check and clippy only
  help            this text
";

fn main() {
    if let Err(e) = run() {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let task = args.next();
    let rest: Vec<String> = args.collect();
    match task.as_deref() {
        Some("ci") => ci::ci(),
        Some("loom") => ci::loom(rest.first().map(String::as_str)),
        Some("tidy") => ci::tidy(),
        Some("bench") => bench::bench(&rest),
        Some("fsbench") => fsbench::fsbench(&rest),
        Some("fsx") => fsx::fsx(&rest),
        Some("netbench") => netbench::netbench(&rest),
        Some("demo") => demo::demo(),
        Some("install") => install::install(&rest),
        Some("soak") => soak::soak(&rest),
        // Started by `soak` itself, one process per worker.
        Some("soak-worker") => soak::worker::main(&rest),
        None | Some("help" | "-h" | "--help") => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => bail!("unknown task `{other}`\n\n{HELP}"),
    }
}
