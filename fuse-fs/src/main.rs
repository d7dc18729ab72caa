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
//! Started as `mount.fuse.rcufs` (a symlink), the binary is the mount(8)
//! helper instead (`helper.rs`), which starts `rcufs mount` detached. The
//! `-o` keys of `rcufs mount` are rewritten into its flags before clap
//! parses (`mount_opts.rs`). `rcufs mount` sends the systemd readiness
//! notifications when `NOTIFY_SOCKET` is set (`notify.rs`).
//!
//! Logs go to stderr (or `--log-file`), as text without colours unless
//! stderr is a terminal, or as JSON lines (`--log-format json`). The mount
//! logs one line per event an operator needs: `mounted` (with the effective
//! options), `unmounting` (on a signal), `unmounted`, and errors.
//!
//! Exit codes: 0 on success, 1 on any failure (every failing directory of a
//! `drop` is reported and the others are still dropped), 2 on a usage error.
//! The helper follows mount(8): 1 for a usage error, 32 for a failed mount.

mod cli;
mod client;
mod helper;
mod mount_opts;
mod notify;
mod warm;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use fuse_fs::MountOptions;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use cli::{Cli, Command, DropCmd, LogFormat, MountArgs, StatsCmd, StatsFormat, WarmCmd};
use fuse_fs::metrics_http;

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.first().is_some_and(|a| helper::invoked_as_helper(a)) {
        return helper::main(argv);
    }
    let expanded = match mount_opts::expand(argv, false) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("rcufs: error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(&expanded.args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            if e.use_stderr()
                && let Some(note) = expanded.origin_note(&e.render().to_string())
            {
                eprintln!("{note}");
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let mut format = LogFormat::Text;
    if let Command::Mount(args) = &cli.command {
        format = args.log_format;
        if let Some(log) = &args.log_file
            && let Err(e) = redirect_output(log)
        {
            eprintln!("rcufs: error: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    init_tracing(format);
    let result = match cli.command {
        Command::Mount(args) => mount(args),
        Command::Drop(args) => drop_dirs(&args),
        Command::Stats(args) => stats(&args),
        Command::Warm(args) => warm_dirs(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if format == LogFormat::Json {
                // A collector reads only JSON lines.
                tracing::error!(error = format!("{e:#}"), "rcufs: error");
            } else {
                eprintln!("rcufs: error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default: info for rcufs, warnings
/// for everything else), in `format`; colours only when stderr is a terminal.
fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // fuser's mount guard warns "Unmount failed" whenever the mount is already
    // gone when the session ends, which is every ordinary exit here (the
    // unmount comes from outside the session), so its module logs errors only.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,fuser::mnt=error,rcufs=info,fuse_fs=info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => fmt.init(),
        LogFormat::Json => fmt.json().init(),
    }
}

/// Points stdout and stderr at `log` (appended to, created with its
/// directory if needed), so that the log, panic messages and anything else
/// the process prints land there.
fn redirect_output(log: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = log.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating the log directory {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(log)
        .with_context(|| format!("opening the log file {}", log.display()))?;
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 on two valid descriptors touches no memory; no other
        // thread runs yet that could be writing to the replaced descriptor.
        if unsafe { libc::dup2(file.as_raw_fd(), target) } == -1 {
            return Err(std::io::Error::last_os_error()).context("redirecting output to the log file");
        }
    }
    Ok(())
}

/// The library's mount options for `args` (shared with the mount helper).
pub(crate) fn mount_options(args: &MountArgs) -> MountOptions {
    MountOptions {
        source: args.source.clone(),
        mountpoint: args.mountpoint.clone(),
        threads: args.threads,
        poll: std::time::Duration::from_micros(args.poll_us),
        io_uring: args.io_uring,
        dcache_entries: args.dcache_entries,
        dcache_negative: args.dcache_negative.unwrap_or(args.dcache_entries / 4),
        page_cache_bytes: args.page_cache_size,
        kernel_cache: args.kernel_cache,
        revalidate: args.revalidate,
        fuse_options: args.options.clone(),
        coherence: args.coherence,
    }
}

/// Mounts, then serves until the mount goes away: unmounted from outside, or
/// unmounted by the signal thread on SIGINT/SIGTERM.
fn mount(args: MountArgs) -> Result<()> {
    let opts = mount_options(&args);
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
    // Serving before the readiness notification, so that a mount reported
    // ready answers scrapes.
    let metrics_server = match metrics_bound {
        Some(bound) => {
            let (fs, label) = (mounted.fs().clone(), mountpoint.to_string_lossy().into_owned());
            Some(metrics_http::MetricsServer::start(bound, move || {
                fuse_fs::metrics::render(&fs.stats_json(), &label)
            })?)
        }
        None => None,
    };
    if !fuse_fs::fault::withhold_ready() {
        notify::send_logged(&format!(
            "READY=1\nSTATUS=serving {}\nMAINPID={}",
            mountpoint.display(),
            std::process::id()
        ));
    }
    tracing::debug!(mountpoint = %mountpoint.display(), "serving; unmount it or send SIGINT/SIGTERM to stop");

    let shown = mountpoint.clone();
    let handle = signals.handle();
    let signal_thread = std::thread::Builder::new()
        .name("rcufs-signals".into())
        .spawn(move || {
            let mut seen = 0;
            for sig in signals.forever() {
                seen += 1;
                if seen == 1 {
                    tracing::info!(mountpoint = %mountpoint.display(), signal = sig, "unmounting");
                    notify::send_logged("STOPPING=1");
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
    notify::send_logged("STOPPING=1");
    result?;
    tracing::info!(mountpoint = %shown.display(), "unmounted");
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
