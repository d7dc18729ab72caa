//! `rcufs`: the command line of the passthrough filesystem.
//!
//! `rcufs mount` hands its options to the library's `mount()` and then waits,
//! in the foreground, until the mount goes away. An unmount from outside
//! ends the session directly. The first SIGINT/SIGTERM unmounts from a
//! signal thread: a plain unmount if nothing on the mount is in use, else a
//! lazy one (the mount leaves the namespace at once, open files keep working
//! and the daemon exits when the last one closes, as libfuse does); a second
//! signal exits at once, which aborts the FUSE connection. `rcufs drop`,
//! `rcufs stats` and `rcufs warm` are clients of a running mount (see
//! `client.rs` and `warm.rs`). With `--metrics-listen` the daemon also
//! serves `/metrics` (`fuse_fs::metrics_http`) until the mount goes away.
//!
//! Exit codes: 0 on success, 1 on any failure (every failing directory of a
//! `drop` is reported and the others are still dropped), 2 on a usage error.

mod cli;
mod client;
mod warm;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use fuse_fs::MountOptions;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use cli::{Cli, Command, DropCmd, MountArgs, StatsCmd, StatsFormat, WarmCmd};
use fuse_fs::metrics_http;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Mount(args) => mount(args),
        Command::Drop(args) => drop_dirs(&args),
        Command::Stats(args) => stats(&args),
        Command::Warm(args) => warm_dirs(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rcufs: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default: info for rcufs, warnings
/// for everything else).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    // fuser's mount guard warns "Unmount failed" whenever the mount is already
    // gone when the session ends, which is every ordinary exit here (the
    // unmount comes from outside the session), so its module logs errors only.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,fuser::mnt=error,rcufs=info,fuse_fs=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Mounts, then serves until the mount goes away: unmounted from outside, or
/// unmounted by the signal thread on SIGINT/SIGTERM.
fn mount(args: MountArgs) -> Result<()> {
    let dcache_negative = args.dcache_negative.unwrap_or(args.dcache_entries / 4);
    let opts = MountOptions {
        source: args.source,
        mountpoint: args.mountpoint,
        threads: args.threads,
        dcache_entries: args.dcache_entries,
        dcache_negative,
        page_cache_bytes: args.page_cache_size,
        kernel_cache: args.kernel_cache,
        revalidate: args.revalidate,
        fuse_options: args.options,
    };
    // Register before mounting, so that a signal that arrives while the
    // mount is being set up is queued rather than killing the process with
    // a mount half made.
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("installing the SIGINT/SIGTERM handlers")?;
    // Bound before mounting, so that a taken port or a refused address
    // fails before anything is mounted.
    let metrics_bound = args
        .metrics_listen
        .map(|addr| metrics_http::bind(addr, args.metrics_allow_remote))
        .transpose()?;
    let mounted = fuse_fs::mount(opts)?;
    let mountpoint = std::fs::canonicalize(mounted.mountpoint()).context("resolving the mount point")?;
    let metrics_server = match metrics_bound {
        Some(bound) => {
            let (fs, label) = (mounted.fs().clone(), mountpoint.to_string_lossy().into_owned());
            Some(metrics_http::MetricsServer::start(bound, move || {
                fuse_fs::metrics::render(&fs.stats_json(), &label)
            })?)
        }
        None => None,
    };
    tracing::info!(mountpoint = %mountpoint.display(), "serving; unmount it or send SIGINT/SIGTERM to stop");

    let handle = signals.handle();
    let signal_thread = std::thread::Builder::new()
        .name("rcufs-signals".into())
        .spawn(move || {
            let mut seen = 0;
            for sig in signals.forever() {
                seen += 1;
                if seen == 1 {
                    tracing::info!(signal = sig, "unmounting");
                    if let Err(e) = client::unmount(&mountpoint) {
                        tracing::error!("{e:#}");
                    }
                } else {
                    // Exiting closes every /dev/fuse descriptor, which makes
                    // the kernel abort the connection (no fusectl needed).
                    tracing::warn!(
                        signal = sig,
                        "second signal: exiting now; files still open on the mount fail"
                    );
                    std::process::exit(1);
                }
            }
        })
        .context("starting the signal thread")?;
    let result = mounted.wait();
    // The endpoint ends with the mount.
    if let Some(server) = metrics_server {
        server.stop();
    }
    handle.close();
    // The thread leaves its loop once the handle is closed.
    let _ = signal_thread.join();
    result?;
    tracing::info!("unmounted");
    Ok(())
}

fn drop_dirs(args: &DropCmd) -> Result<()> {
    let mode = args.mode();
    let mut failed = 0usize;
    for dir in &args.dirs {
        let start = Instant::now();
        match client::drop_dir(dir, mode) {
            Ok(out) => {
                let wall = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                println!("{}", client::format_drop(dir, mode, &out, wall));
            }
            Err(e) => {
                tracing::debug!(dir = %dir.display(), errno = e.errno, "drop failed");
                eprintln!("rcufs: drop: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} directories could not be dropped", args.dirs.len());
    }
    Ok(())
}

fn warm_dirs(args: &WarmCmd) -> Result<()> {
    let mode = args.mode();
    let mut failed = 0usize;
    for dir in &args.dirs {
        match warm::warm(dir, mode, args.jobs) {
            Ok(report) => println!("{}", warm::format_report(dir, mode, &report)),
            Err(e) => {
                eprintln!("rcufs: warm: {e:#}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} directories could not be warmed", args.dirs.len());
    }
    Ok(())
}

fn stats(args: &StatsCmd) -> Result<()> {
    let mount = client::find_rcufs_mount(&args.path)?;
    let json = client::read_stats(&mount.mount_point)?;
    let format = if args.json { StatsFormat::Json } else { args.format };
    match format {
        StatsFormat::Json => println!("{}", json.trim_end()),
        StatsFormat::Table => print!("{}", client::format_stats(&json, &mount)?),
        StatsFormat::Prometheus => {
            let value: serde_json::Value = serde_json::from_str(&json).context("the stats are not valid JSON")?;
            print!(
                "{}",
                fuse_fs::metrics::render(&value, &mount.mount_point.to_string_lossy())
            );
        }
    }
    Ok(())
}
