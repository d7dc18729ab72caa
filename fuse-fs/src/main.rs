//! `rcufs`: the command line of the passthrough filesystem.
//!
//! `rcufs mount` hands its options to the library's `mount()` and then waits,
//! in the foreground, for SIGINT/SIGTERM (then unmounts cleanly) or for an
//! unmount from outside (then reaps the session). `rcufs drop` and
//! `rcufs stats` are clients of a running mount (see `client.rs`).
//!
//! Exit codes: 0 on success, 1 on any failure (every failing directory of a
//! `drop` is reported and the others are still dropped), 2 on a usage error.

mod cli;
mod client;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use clap::Parser;

use cli::{Cli, Command, DropCmd, MountArgs, StatsCmd};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Mount(args) => mount(args),
        Command::Drop(args) => drop_dirs(&args),
        Command::Stats(args) => stats(&args),
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
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,rcufs=info,fuse_fs=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn mount(args: MountArgs) -> Result<()> {
    cli::preflight(&args, &client::mounts()?)?;
    let m = fuse_fs::mount(fuse_fs::MountOptions {
        source: args.source.clone(),
        mountpoint: args.mountpoint.clone(),
        threads: args.threads,
        dcache_entries: args.dcache_entries,
        dcache_negative: args.dcache_negative.unwrap_or(args.dcache_entries / 4),
        page_cache_bytes: args.page_cache_size,
        kernel_cache: args.kernel_cache,
        revalidate: args.revalidate,
        fuse_options: args.options.clone(),
    })?;
    m.wait()
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

fn stats(args: &StatsCmd) -> Result<()> {
    let mount = client::find_rcufs_mount(&args.path)?;
    let json = client::read_stats(&mount.mount_point)?;
    if args.json {
        println!("{}", json.trim_end());
    } else {
        print!("{}", client::format_stats(&json, &mount)?);
    }
    Ok(())
}
