use std::time::Duration;

use clap::{CommandFactory, Parser};

use super::*;

#[track_caller]
fn size(input: &str, expected: u64) {
    assert_eq!(parse_size(input), Ok(expected), "parse_size({input:?})");
}

#[track_caller]
fn bad_size(input: &str) {
    assert!(
        parse_size(input).is_err(),
        "parse_size({input:?}) should fail, got {:?}",
        parse_size(input)
    );
}

#[test]
fn sizes_in_bytes_and_binary_units() {
    size("4096", 4096);
    size("0", 0);
    size("512K", 512 << 10);
    size("512M", 512 << 20);
    size("512m", 512 << 20);
    size("2G", 2 << 30);
    size("2GiB", 2 << 30);
    size("2gb", 2 << 30);
    size("1T", 1 << 40);
    size("100b", 100);
    size(" 8M ", 8 << 20);
}

#[test]
fn fractional_sizes_round_down_to_bytes() {
    size("1.5G", 3 << 29);
    size("0.5K", 512);
    size(".5M", 512 << 10);
    size("1.", 1);
    size("1.5T", 3 << 39);
    // 0.1 KiB is 102.4 bytes.
    size("0.1K", 102);
    // Fraction digits past the twelfth are ignored, not an error.
    size("1.00000000000000000001K", 1024);
}

#[test]
fn bad_sizes_are_rejected() {
    bad_size("");
    bad_size("M");
    bad_size(".");
    bad_size("12X");
    bad_size("-1");
    bad_size("1.5");
    bad_size("1.2.3M");
    bad_size("1 M M");
    bad_size("99999999999999999999");
    bad_size("20000000T");
}

#[test]
fn page_cache_needs_one_page() {
    assert!(parse_page_cache_size("4095").is_err());
    assert_eq!(parse_page_cache_size("4K"), Ok(4096));
}

#[test]
fn seconds() {
    assert_eq!(parse_secs("1"), Ok(Duration::from_secs(1)));
    assert_eq!(parse_secs("0"), Ok(Duration::ZERO));
    assert_eq!(parse_secs("0.25"), Ok(Duration::from_millis(250)));
    assert!(parse_secs("-1").is_err());
    assert!(parse_secs("soon").is_err());
    assert!(parse_secs("inf").is_err());
    assert!(parse_secs("NaN").is_err());
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn mount_defaults() {
    let cli = Cli::try_parse_from(["rcufs", "mount", "/src", "/mnt"]).unwrap();
    let Command::Mount(m) = cli.command else {
        panic!("not a mount: {cli:?}")
    };
    assert_eq!(m.source, PathBuf::from("/src"));
    assert_eq!(m.mountpoint, PathBuf::from("/mnt"));
    // Chosen at mount time by the kind of source (`slow_source.rs`).
    assert_eq!(m.threads, None);
    assert_eq!(m.poll_us, 0, "no polling unless asked for");
    assert_eq!(m.io_uring, IoUring::Off, "/dev/fuse unless io_uring is asked for");
    assert!(default_threads() >= 2);
    assert_eq!(m.dcache_entries, 1_000_000);
    assert_eq!(m.dcache_negative, None);
    assert_eq!(m.page_cache_size, 512 << 20);
    assert!(!m.kernel_cache);
    assert_eq!(m.revalidate, None);
    assert!(m.options.is_empty());
}

#[test]
fn mount_options_split_on_commas_and_repeat() {
    let cli = Cli::try_parse_from([
        "rcufs",
        "mount",
        "/s",
        "/m",
        "-o",
        "ro,allow_other",
        "-o",
        "default_permissions",
        "--threads",
        "8",
        "--page-cache-size",
        "1.5G",
        "--kernel-cache",
        "--revalidate",
        "0.5",
        "--dcache-entries",
        "1000",
        "--poll-us",
        "10000",
        "--io-uring",
        "on",
    ])
    .unwrap();
    let Command::Mount(m) = cli.command else {
        panic!("not a mount")
    };
    assert_eq!(m.options, ["ro", "allow_other", "default_permissions"]);
    assert_eq!(m.threads, Some(8));
    assert_eq!(m.page_cache_size, 3 << 29);
    assert!(m.kernel_cache);
    assert_eq!(m.revalidate, Some(Duration::from_millis(500)));
    assert_eq!(m.dcache_entries, 1000);
    assert_eq!(m.poll_us, 10_000);
    assert_eq!(m.io_uring, IoUring::On);
}

#[test]
fn mount_rejects_bad_numbers() {
    for bad in [
        &["--threads", "0"][..],
        &["--threads", "many"],
        &["--dcache-entries", "0"],
        &["--page-cache-size", "12Q"],
        &["--revalidate", "-3"],
        &["--poll-us", "10001"],
        &["--poll-us", "-1"],
        &["--poll-us", "5.5"],
    ] {
        let mut argv = vec!["rcufs", "mount", "/s", "/m"];
        argv.extend_from_slice(bad);
        assert!(Cli::try_parse_from(&argv).is_err(), "{argv:?} should be rejected");
    }
}

#[test]
fn drop_modes() {
    let mode = |argv: &[&str]| match Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(Command::Drop(d)) => Ok(d.mode()),
        Ok(other) => panic!("not a drop: {other:?}"),
        Err(e) => Err(e.kind()),
    };
    assert_eq!(mode(&["rcufs", "drop", "d"]), Ok(DropMode::All));
    assert_eq!(mode(&["rcufs", "drop", "--all", "d"]), Ok(DropMode::All));
    assert_eq!(mode(&["rcufs", "drop", "--pages", "d"]), Ok(DropMode::Pages));
    assert_eq!(mode(&["rcufs", "drop", "--dentries", "d", "e"]), Ok(DropMode::Dentries));
    assert_eq!(
        mode(&["rcufs", "drop", "--pages", "--dentries", "d"]),
        Err(clap::error::ErrorKind::ArgumentConflict)
    );
    assert_eq!(
        mode(&["rcufs", "drop"]),
        Err(clap::error::ErrorKind::MissingRequiredArgument)
    );
}

#[test]
fn sizes_show_in_the_largest_exact_unit() {
    assert_eq!(show_size(512 << 20), "512M");
    assert_eq!(show_size(2 << 30), "2G");
    assert_eq!(show_size(3 << 29), "1536M");
    assert_eq!(show_size(4096), "4K");
    assert_eq!(show_size(1000), "1000");
    assert_eq!(show_size(0), "0");
    for n in [4096, 512 << 20, 3 << 29, 12345 << 10, 1 << 40] {
        assert_eq!(parse_size(&show_size(n)), Ok(n), "round trip of {n}");
    }
}

#[test]
fn warm_modes_and_jobs() {
    use crate::warm::WarmMode;
    let parse = |argv: &[&str]| match Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(Command::Warm(w)) => Ok((w.mode(), w.jobs, w.dirs.len())),
        Ok(other) => panic!("not a warm: {other:?}"),
        Err(e) => Err(e.kind()),
    };
    assert_eq!(parse(&["rcufs", "warm", "d"]), Ok((WarmMode::All, 4, 1)));
    assert_eq!(
        parse(&["rcufs", "warm", "--pages", "-j", "2", "d", "e"]),
        Ok((WarmMode::Pages, 2, 2))
    );
    assert_eq!(
        parse(&["rcufs", "warm", "--dentries", "d"]),
        Ok((WarmMode::Dentries, 4, 1))
    );
    assert_eq!(
        parse(&["rcufs", "warm", "--pages", "--all", "d"]),
        Err(clap::error::ErrorKind::ArgumentConflict)
    );
    assert!(parse(&["rcufs", "warm", "--jobs", "0", "d"]).is_err());
    assert_eq!(
        parse(&["rcufs", "warm"]),
        Err(clap::error::ErrorKind::MissingRequiredArgument)
    );
}

#[test]
fn stats_formats_and_metrics_listen() {
    let format = |argv: &[&str]| match Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(Command::Stats(s)) => Ok((s.format, s.json)),
        Ok(other) => panic!("not stats: {other:?}"),
        Err(e) => Err(e.kind()),
    };
    assert_eq!(format(&["rcufs", "stats", "p"]), Ok((StatsFormat::Table, false)));
    assert_eq!(
        format(&["rcufs", "stats", "p", "--json"]),
        Ok((StatsFormat::Table, true))
    );
    assert_eq!(
        format(&["rcufs", "stats", "p", "--format", "prometheus"]),
        Ok((StatsFormat::Prometheus, false))
    );
    assert_eq!(
        format(&["rcufs", "stats", "p", "--json", "--format", "table"]),
        Err(clap::error::ErrorKind::ArgumentConflict)
    );
    assert!(format(&["rcufs", "stats", "p", "--format", "xml"]).is_err());

    let listen = |extra: &[&str]| {
        let mut argv = vec!["rcufs", "mount", "/s", "/m"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(&argv).map(|c| c.command) {
            Ok(Command::Mount(m)) => Ok((m.metrics_listen, m.metrics_allow_remote)),
            Ok(other) => panic!("not a mount: {other:?}"),
            Err(e) => Err(e.kind()),
        }
    };
    assert_eq!(listen(&[]), Ok((None, false)));
    assert_eq!(
        listen(&["--metrics-listen", ":9101"]),
        Ok((Some("127.0.0.1:9101".parse().unwrap()), false))
    );
    assert_eq!(
        listen(&["--metrics-listen", "0.0.0.0:9101", "--metrics-allow-remote"]),
        Ok((Some("0.0.0.0:9101".parse().unwrap()), true))
    );
    assert!(listen(&["--metrics-listen", "nowhere"]).is_err());
    // --metrics-allow-remote alone changes nothing (an fstab line may keep it
    // while the endpoint is switched off).
    assert_eq!(listen(&["--metrics-allow-remote"]), Ok((None, true)));
}
