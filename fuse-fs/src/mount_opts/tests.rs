use std::ffi::OsString;

use clap::Parser;

use super::*;
use crate::cli::{Cli, Command, MountArgs};

/// A sample value for each key (`None` for a switch). A new mount flag
/// needs a line here: the identity test below checks every key.
const SAMPLES: &[(&str, Option<&str>)] = &[
    ("threads", Some("3")),
    ("poll_us", Some("50")),
    ("io_uring", Some("idle")),
    ("dcache_entries", Some("1000")),
    ("dcache_negative", Some("17")),
    ("page_cache_size", Some("1.5G")),
    ("kernel_cache", None),
    ("revalidate", Some("0.25")),
    ("coherence", Some("ttl")),
    ("log_file", Some("/var/log/x.log")),
    ("log_format", Some("json")),
    ("metrics_listen", Some("127.0.0.1:9101")),
    ("metrics_allow_remote", None),
];

fn parse(args: &[&str]) -> Result<MountArgs, String> {
    let mut argv: Vec<OsString> = vec!["rcufs".into(), "mount".into(), "/s".into(), "/m".into()];
    argv.extend(args.iter().map(OsString::from));
    let expanded = expand(argv, false)?;
    match Cli::try_parse_from(&expanded.args).map_err(|e| e.to_string())?.command {
        Command::Mount(m) => Ok(m),
        other => panic!("not a mount: {other:?}"),
    }
}

#[track_caller]
fn same(flags: &[&str], opts: &[&str]) {
    let (a, b) = (parse(flags).unwrap(), parse(opts).unwrap());
    assert_eq!(format!("{a:?}"), format!("{b:?}"), "{flags:?} and {opts:?} differ");
}

#[test]
fn every_flag_has_a_key_and_the_issue_names_them() {
    let keys: Vec<String> = keys().into_iter().map(|k| k.key).collect();
    for k in [
        "dcache_entries",
        "dcache_negative",
        "page_cache_size",
        "kernel_cache",
        "revalidate",
        "threads",
        "log_file",
        "log_format",
    ] {
        assert!(keys.iter().any(|x| x == k), "no -o key {k} in {keys:?}");
    }
    assert!(!keys.iter().any(|k| k == "help" || k == "o"), "{keys:?}");
    for k in &keys {
        assert!(
            SAMPLES.iter().any(|(s, _)| s == k),
            "the mount flag behind -o key `{k}` has no sample value in SAMPLES; add one"
        );
    }
}

#[test]
fn each_key_parses_exactly_as_its_flag() {
    for k in keys() {
        let (_, sample) = SAMPLES.iter().find(|(s, _)| *s == k.key).expect("a sample");
        let flag = format!("--{}", k.long);
        match sample {
            Some(v) => {
                let item = format!("{}={v}", k.key);
                same(&[&flag, v], &["-o", &item]);
                same(&[&flag, v], &[&format!("-o{item}")]);
                // The value really arrives (it is not the default).
                assert_ne!(
                    format!("{:?}", parse(&[]).unwrap()),
                    format!("{:?}", parse(&["-o", &item]).unwrap()),
                    "-o {item} changed nothing"
                );
            }
            None => {
                same(&[&flag], &["-o", &k.key]);
                assert_ne!(
                    format!("{:?}", parse(&[]).unwrap()),
                    format!("{:?}", parse(&["-o", &k.key]).unwrap())
                );
            }
        }
    }
    // All at once, mixed with FUSE and ignored options, in one list.
    same(
        &[
            "--threads",
            "3",
            "--dcache-entries",
            "1000",
            "--kernel-cache",
            "--page-cache-size",
            "16M",
            "-o",
            "ro",
            "-o",
            "allow_other",
        ],
        &[
            "-o",
            "defaults,threads=3,ro,nofail,dcache_entries=1000,_netdev,kernel_cache,x-systemd.automount,page_cache_size=16M,allow_other,comment=x",
        ],
    );
}

#[test]
fn the_last_option_wins() {
    let m = parse(&["--threads", "2", "-o", "threads=5"]).unwrap();
    assert_eq!(m.threads, Some(5));
    let m = parse(&["-o", "threads=5", "--threads", "2"]).unwrap();
    assert_eq!(m.threads, Some(2));
    let m = parse(&["-o", "threads=5,threads=7"]).unwrap();
    assert_eq!(m.threads, Some(7));
}

#[track_caller]
fn fails(opts: &str, needle: &str) {
    let e = parse(&["-o", opts]).unwrap_err();
    assert!(e.contains(needle), "-o {opts}: expected {needle:?} in {e:?}");
}

#[test]
fn bad_options_name_the_key() {
    fails("no_such_key=1", "unknown mount option `no_such_key`");
    fails("no_such_key", "rcufs options: threads=...");
    fails("threads", "`threads` needs a value");
    fails("kernel_cache=1", "`kernel_cache` takes no value");
    fails("threads=0", "at least 1");
    fails("page_cache_size=lots", "lots");
    fails("log_format=xml", "xml");
}

#[test]
fn sloppy_drops_unknown_options_and_notes_origins() {
    let argv: Vec<OsString> = ["rcufs", "mount", "/s", "/m", "-o", "bogus,ro,threads=0"]
        .iter()
        .map(OsString::from)
        .collect();
    let e = expand(argv, true).unwrap();
    assert_eq!(e.dropped, ["bogus"]);
    assert_eq!(
        e.origin_note("error: invalid value '0' for '--threads <N>': must be at least 1")
            .as_deref(),
        Some("(given as the mount option `threads=0`)")
    );
    // Other subcommands and `--` are left alone.
    let drop: Vec<OsString> = ["rcufs", "drop", "-o", "x"].iter().map(OsString::from).collect();
    assert_eq!(expand(drop.clone(), false).unwrap().args, drop);
    let after: Vec<OsString> = ["rcufs", "mount", "--", "-o", "x"].iter().map(OsString::from).collect();
    assert_eq!(expand(after.clone(), false).unwrap().args, after);
}
