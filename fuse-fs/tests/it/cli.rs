//! `rcufs drop`, `rcufs stats` and the errors of `rcufs mount`, end to end
//! through the binary.

use std::fs;
use std::process::Output;

use crate::harness::{Mount, rcufs, write_tree};
use crate::sys::errno;

#[track_caller]
fn run(args: &[&std::ffi::OsStr]) -> Output {
    rcufs().args(args).env("RUST_LOG", "warn").output().expect("run rcufs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn fails_with(args: &[&std::ffi::OsStr], needle: &str) {
    let out = run(args);
    assert!(!out.status.success(), "rcufs {args:?} should fail: {}", text(&out));
    assert!(
        text(&out).contains(needle),
        "rcufs {args:?}: expected {needle:?} in:\n{}",
        text(&out)
    );
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn drop_and_stats_through_the_binary() {
    let Some(m) = Mount::with(&["--revalidate", "3600"], |src| {
        write_tree(src, &[("a/x", b"xx"), ("a/y", b"yy"), ("b/z", b"zz"), ("file", b"f")]);
    }) else {
        return;
    };
    assert_eq!(fs::read(m.at("a/x")).unwrap(), b"xx");
    assert_eq!(errno(&fs::metadata(m.at("a/later"))), Some(libc::ENOENT));
    fs::write(m.src_at("a/later"), b"later").unwrap();

    let out = run(&[os("drop"), m.at("a").as_os_str(), m.at("b").as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "one line per directory:\n{stdout}");
    assert!(
        stdout.contains("dentries") && stdout.contains("pages") && stdout.contains("took"),
        "{stdout}"
    );
    assert_eq!(
        fs::read(m.at("a/later")).unwrap(),
        b"later",
        "`rcufs drop` did not drop the negative entry"
    );

    for flag in ["--pages", "--dentries", "--all"] {
        let out = run(&[os("drop"), os(flag), m.at("a").as_os_str()]);
        assert!(out.status.success(), "drop {flag}: {}", text(&out));
    }
    assert_eq!(m.stat("drops", "requests"), 5);

    // Errors: a file, a missing path, a directory on another filesystem; the
    // good directory in the same call is still dropped.
    fails_with(&[os("drop"), m.at("file").as_os_str()], "not a directory");
    fails_with(&[os("drop"), m.at("missing").as_os_str()], "no such directory");
    fails_with(
        &[os("drop"), m.src.as_os_str(), m.at("a").as_os_str()],
        "not on an rcufs mount",
    );
    assert_eq!(m.stat("drops", "requests"), 6);

    // Stats: the table, and the JSON verbatim, from the root or any path in it.
    let out = run(&[os("stats"), m.at("a/x").as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    for word in [
        "dcache",
        "pagecache",
        "inodes",
        "drops",
        "negative_hits",
        "bytes_cached",
    ] {
        assert!(table.contains(word), "the table lacks {word}:\n{table}");
    }
    assert!(table.contains(m.mnt.to_str().unwrap()), "{table}");
    let out = run(&[os("stats"), os("--json"), m.at("b").as_os_str()]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(v["drops"]["requests"].as_u64(), Some(6));

    fails_with(&[os("stats"), m.src.as_os_str()], "not on an rcufs mount");
    fails_with(&[os("stats"), m.at("nothing").as_os_str()], "nothing");
}

#[test]
fn mount_errors_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, mnt, file) = (tmp.path().join("src"), tmp.path().join("mnt"), tmp.path().join("file"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    fs::write(&file, b"").unwrap();
    let missing = tmp.path().join("missing");
    fails_with(&[os("mount"), missing.as_os_str(), mnt.as_os_str()], "does not exist");
    fails_with(&[os("mount"), file.as_os_str(), mnt.as_os_str()], "not a directory");
    fails_with(&[os("mount"), src.as_os_str(), missing.as_os_str()], "does not exist");
    fails_with(
        &[os("mount"), src.as_os_str(), src.join("..").join("src").as_os_str()],
        "inside the source",
    );
    fails_with(
        &[
            os("mount"),
            src.as_os_str(),
            mnt.as_os_str(),
            os("--page-cache-size"),
            os("lots"),
        ],
        "lots",
    );
    fails_with(
        &[os("mount"), src.as_os_str(), mnt.as_os_str(), os("--threads"), os("0")],
        "at least 1",
    );
    let out = run(&[os("mount"), os("--help")]);
    let help = text(&out);
    // `--revalidate`'s default depends on the source (`slow_source.rs`).
    for default in [
        "512M",
        "1000000",
        "[default: 1 for a local source, 10 for a network or FUSE source]",
    ] {
        assert!(
            help.contains(default),
            "--help does not show the default {default}:\n{help}"
        );
    }
}

#[test]
fn mounting_on_a_busy_mount_point_is_refused() {
    let Some(m) = Mount::start(&[]) else { return };
    let other = tempfile::tempdir().unwrap();
    fails_with(&[os("mount"), other.path().as_os_str(), m.mnt.as_os_str()], "busy");
}

#[test]
fn unknown_fuse_options_are_a_clear_error() {
    if !crate::harness::mount_possible() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let out = run(&[
        os("mount"),
        src.as_os_str(),
        mnt.as_os_str(),
        os("-o"),
        os("no_such_option"),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no_such_option"), "{}", text(&out));
    assert!(crate::harness::any_mount_at(&std::fs::canonicalize(&mnt).unwrap()).is_none());
}

#[test]
fn mounting_as_a_user_without_fusermount3_is_refused() {
    use std::os::unix::process::CommandExt;
    let Some((tmp, src, mnt)) = crate::harness::dirs_for_another_user() else {
        return;
    };
    let out = rcufs()
        .arg("mount")
        .arg(&src)
        .arg(&mnt)
        .env("PATH", tmp.path())
        .env("RUST_LOG", "warn")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("fusermount3"), "{}", text(&out));
    assert!(crate::harness::any_mount_at(&fs::canonicalize(&mnt).unwrap()).is_none());
}
