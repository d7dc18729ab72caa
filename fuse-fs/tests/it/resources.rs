//! Every resource the daemon takes for a caller is bounded and given back:
//! memory after files are deleted, descriptors under many opens by an
//! unprivileged user, and the work of a directory drop.
//!
//! The numbers these tests print (RSS per round, descriptor counts, drop
//! times) are measurements for the report; the assertions are counts and
//! ratios with wide margins, never timings.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use fuse_fs::protocol::DropMode;

use std::time::Duration;

use crate::harness::{Mount, can_switch_users, eventually};
use crate::sys;

const NOBODY: u32 = 65534;

/// A field of `/proc/<pid>/status` in kB (e.g. `VmRSS`).
fn status_kb(pid: i32, field: &str) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Descriptors the process `pid` holds.
fn fd_count(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

fn warn_lines(m: &Mount) -> usize {
    m.log_text().lines().filter(|l| l.contains("WARN")).count()
}

#[test]
fn create_read_delete_churn_gives_memory_back() {
    const ROUNDS: usize = 5;
    const FILES: usize = 20_000;
    const DIRS: usize = 4;
    let Some(m) = Mount::with(&["--page-cache-size", "64K"], |src| {
        for d in 0..DIRS {
            fs::create_dir(src.join(format!("d{d}"))).unwrap();
        }
    }) else {
        return;
    };
    let body = vec![7u8; 300];
    let mut rss = Vec::new();
    for round in 0..ROUNDS {
        for i in 0..FILES {
            let p = m.at(&format!("d{}/r{round}-f{i}", i % DIRS));
            fs::write(&p, &body).unwrap();
            assert_eq!(fs::read(&p).unwrap().len(), body.len());
            fs::remove_file(&p).unwrap();
        }
        let kb = status_kb(m.pid(), "VmRSS");
        eprintln!(
            "round {}: VmRSS {kb} kB, inodes known {}, page-cache bytes {}",
            round + 1,
            m.stat("inodes", "known"),
            m.stat("pagecache", "bytes_cached")
        );
        rss.push(kb);
    }
    eprintln!("VmRSS per round (kB): {rss:?}");
    let cached_inodes = m.stat("pagecache", "inodes");
    assert!(
        cached_inodes <= 16,
        "{cached_inodes} page-cache inode entries left after every file was deleted"
    );
    let (first, last) = (rss[0], rss[ROUNDS - 1]);
    assert!(
        last * 10 <= first * 11,
        "the daemon's RSS grew from {first} kB after round 1 to {last} kB after round {ROUNDS}: {rss:?}; stats {}",
        m.stats()
    );
}

/// Python run as nobody: opens the paths it reads from stdin (one a line,
/// `open PATH COUNT`), keeps every descriptor, prints `opened N errno E`
/// (E = 0 if all succeeded, else the first error, after which it retries
/// that path 2,000 times and stops), then
/// waits for a line on stdin before exiting.
const OPENER: &str = r#"
import os, sys, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
err = 0
for line in sys.stdin:
    cmd, path, count = line.split()
    if cmd != "open":
        break
    # After a refusal the other jobs are read and skipped: this process
    # must hold its descriptors until told "done", and a job line left
    # unread would end the readline below (and the process) at once.
    if err:
        continue
    for _ in range(int(count)):
        try:
            held.append(os.open(path, os.O_RDONLY))
        except OSError as e:
            err = e.errno
            # Keep knocking: the daemon must not log every refusal.
            for _ in range(2000):
                try:
                    held.append(os.open(path, os.O_RDONLY))
                except OSError:
                    pass
            break
print("opened %d errno %d" % (len(held), err), flush=True)
sys.stdin.readline()
"#;

struct Opener {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Opener {
    fn spawn() -> Self {
        Self::spawn_as(NOBODY)
    }

    /// The opener run as `uid` (and gid `uid`).
    fn spawn_as(uid: u32) -> Self {
        let mut child = Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(OPENER)
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 as nobody");
        let out = BufReader::new(child.stdout.take().unwrap());
        Self { child, out }
    }

    /// Sends the open commands and waits for the count.
    fn open(&mut self, jobs: &[(&Path, usize)]) -> (usize, i32) {
        let stdin = self.child.stdin.as_mut().unwrap();
        for (p, n) in jobs {
            writeln!(stdin, "open {} {n}", p.display()).unwrap();
        }
        writeln!(stdin, "end - 0").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.first(), Some(&"opened"), "opener said {line:?}");
        (w[1].parse().unwrap(), w[3].parse().unwrap())
    }

    fn finish(mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        let _ = writeln!(stdin, "done");
        let _ = self.child.wait();
    }
}

#[test]
fn many_opens_of_one_file_by_nobody_share_one_descriptor() {
    if !can_switch_users() {
        return;
    }
    const OPENS_EACH: usize = 10_000;
    let Some(m) = Mount::with(&["-o", "allow_other"], |src| {
        fs::write(src.join("shared"), b"shared").unwrap();
        fs::set_permissions(src.join("shared"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::write(src.join("roots"), b"root's").unwrap();
    }) else {
        return;
    };
    let before = fd_count(m.pid());
    let warns_before = warn_lines(&m);
    // Two children: each one's own limit stays below the hard limit.
    let mut openers = [Opener::spawn(), Opener::spawn()];
    let mut opened = 0;
    for o in openers.iter_mut() {
        let (n, err) = o.open(&[(&m.at("shared"), OPENS_EACH)]);
        eprintln!("nobody opened {n} (errno {err})");
        assert_eq!(err, 0, "nobody's open failed after {n} opens");
        opened += n;
    }
    assert_eq!(opened, 2 * OPENS_EACH);
    let during = fd_count(m.pid());
    eprintln!("daemon descriptors: {before} before, {during} with {opened} opens of one file");
    // Root can still open (and read) while nobody holds them all.
    let roots = fs::read(m.at("roots"));
    let warns = warn_lines(&m) - warns_before;
    for o in openers {
        o.finish();
    }
    assert_eq!(roots.unwrap(), b"root's");
    assert!(
        during <= before + 8,
        "{opened} opens of one file took {} descriptors",
        during - before
    );
    assert!(warns <= 10, "{warns} warning lines logged during the opens");
}

#[test]
fn nobody_opening_many_files_is_refused_before_root() {
    if !can_switch_users() {
        return;
    }
    const NOFILE: u64 = 1024;
    const FILES: usize = 1500;
    let Some(m) = Mount::with_nofile(&["-o", "allow_other"], Some(NOFILE), |src| {
        fs::create_dir(src.join("many")).unwrap();
        fs::set_permissions(src.join("many"), fs::Permissions::from_mode(0o755)).unwrap();
        for i in 0..FILES {
            let p = src.join(format!("many/f{i:04}"));
            fs::write(&p, b"x").unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        }
        fs::write(src.join("roots"), b"root's").unwrap();
    }) else {
        return;
    };
    let warns_before = warn_lines(&m);
    let mut o = Opener::spawn();
    let paths: Vec<_> = (0..FILES).map(|i| m.at(&format!("many/f{i:04}"))).collect();
    let jobs: Vec<(&Path, usize)> = paths.iter().map(|p| (p.as_path(), 1)).collect();
    let (n, err) = o.open(&jobs);
    let fds = fd_count(m.pid());
    eprintln!("nobody opened {n} files before errno {err}; the daemon holds {fds} descriptors");
    // Root's opens still work while nobody holds everything it could get.
    let roots = fs::read(m.at("roots"));
    let listed = fs::read_dir(m.at("many")).map(|r| r.count());
    let warns = warn_lines(&m) - warns_before;
    o.finish();
    assert!(
        err == libc::EMFILE || err == libc::ENFILE,
        "nobody's opens ended with errno {err} after {n}"
    );
    assert!(n < FILES, "nobody opened all {n} files under a limit of {NOFILE}");
    assert_eq!(roots.expect("root's open after nobody's refusal"), b"root's");
    assert_eq!(listed.expect("root's readdir after nobody's refusal"), FILES);
    assert!(warns <= 10, "{warns} warning lines logged during the opens");
    assert!(m.stat("inodes", "fd_refusals") >= 1);
    // The descriptors come back when nobody closes them: every one its
    // opens took (a few of the inode pool's may come and go meanwhile).
    let mut after = fds;
    let back = eventually(Duration::from_secs(10), || {
        after = fd_count(m.pid());
        after + n <= fds + 16
    });
    assert!(
        back,
        "{after} descriptors still held 10 s after nobody closed {n} (had {fds})"
    );
}

const NOFILE: u64 = 1024;
const FILES: usize = 1000;
const OTHERS: usize = 100;

/// A mount, with a descriptor limit of `NOFILE`, of `many/` (`FILES` files)
/// and `others/` (`OTHERS` files), all readable by anyone, for the tests
/// of each user's share of the descriptors.
fn share_mount() -> Option<Mount> {
    Mount::with_nofile(&["-o", "allow_other"], Some(NOFILE), |src| {
        for (dir, n) in [("many", FILES), ("others", OTHERS)] {
            fs::create_dir(src.join(dir)).unwrap();
            fs::set_permissions(src.join(dir), fs::Permissions::from_mode(0o755)).unwrap();
            for i in 0..n {
                let p = src.join(format!("{dir}/f{i:04}"));
                fs::write(&p, b"x").unwrap();
                fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
    })
}

/// One user holding as many files open as the daemon lets it does not
/// lock another user out: each non-root user may hold half of the
/// descriptors below the reserve (`open_files.rs`).
#[test]
fn one_user_holding_its_share_of_descriptors_leaves_room_for_another() {
    if !can_switch_users() {
        return;
    }
    /// Any unprivileged uid other than nobody's.
    const OTHER: u32 = 61000;
    let Some(m) = share_mount() else {
        return;
    };
    let share = m.stat("inodes", "fd_user_max");
    let threshold = m.stat("inodes", "fd_threshold");
    assert!(
        share > 0 && share * 2 <= threshold,
        "share {share}, threshold {threshold}"
    );
    let mut greedy = Opener::spawn();
    let paths: Vec<_> = (0..FILES).map(|i| m.at(&format!("many/f{i:04}"))).collect();
    let jobs: Vec<(&Path, usize)> = paths.iter().map(|p| (p.as_path(), 1)).collect();
    let (n, err) = greedy.open(&jobs);
    eprintln!("nobody opened {n} files before errno {err} (its share: {share})");
    assert_eq!(err, libc::EMFILE, "nobody's opens ended with errno {err} after {n}");
    assert!(
        n as u64 <= share,
        "nobody held {n} descriptors, past its share of {share}"
    );
    assert!(m.stat("inodes", "fd_user_refusals") >= 1, "{}", m.stats());
    // Nobody can still list a directory: a handle that reads the listing
    // read at OPENDIR keeps no descriptor, so it takes no share.
    let mut lister = Opener::spawn();
    let listed = lister.open(&[(&m.at("others"), 1)]);
    lister.finish();
    assert_eq!(listed, (1, 0), "nobody's OPENDIR was refused: {}", m.stats());
    // While nobody holds its share, another user opens what it needs.
    let mut other = Opener::spawn_as(OTHER);
    let paths: Vec<_> = (0..OTHERS).map(|i| m.at(&format!("others/f{i:04}"))).collect();
    let jobs: Vec<(&Path, usize)> = paths.iter().map(|p| (p.as_path(), 1)).collect();
    let (got, err) = other.open(&jobs);
    other.finish();
    greedy.finish();
    assert_eq!(
        (got, err),
        (OTHERS, 0),
        "uid {OTHER} was locked out by nobody's {n} open files"
    );
}

/// A user cannot use up another user's share by keeping open what that
/// user opened: a shared descriptor counts against each user with a handle
/// on it, and no longer against its opener once the opener's handles are
/// gone (`open_files.rs`).
#[test]
fn keeping_open_what_another_user_opened_does_not_use_up_its_share() {
    if !can_switch_users() {
        return;
    }
    /// The user whose files the other keeps open.
    const OWNER: u32 = 61001;
    let Some(m) = share_mount() else {
        return;
    };
    let share = m.stat("inodes", "fd_user_max") as usize;
    assert!(share + OTHERS <= FILES, "share {share}");
    let paths: Vec<_> = (0..share).map(|i| m.at(&format!("many/f{i:04}"))).collect();
    let jobs: Vec<(&Path, usize)> = paths.iter().map(|p| (p.as_path(), 1)).collect();
    // The owner opens its whole share; nobody opens the same files (each
    // open reuses the owner's descriptor) and keeps them.
    let mut owner = Opener::spawn_as(OWNER);
    assert_eq!(owner.open(&jobs), (share, 0), "the owner's own share");
    let mut keeper = Opener::spawn();
    assert_eq!(keeper.open(&jobs), (share, 0), "nobody's opens of the same files");
    let reuses = m.stat("inodes", "shared_fd_reuses");
    assert!(reuses >= share as u64, "nobody's opens made descriptors: {}", m.stats());
    assert_eq!(m.stat("inodes", "fd_charged"), 2 * share as u64, "{}", m.stats());
    // The owner closes everything; nobody keeps the descriptors open.
    owner.finish();
    assert!(
        eventually(Duration::from_secs(10), || m.stat("inodes", "fd_charged")
            == share as u64),
        "the owner's charges outlived its handles: {}",
        m.stats()
    );
    // So the owner can open files again, up to its share.
    let paths: Vec<_> = (0..OTHERS).map(|i| m.at(&format!("others/f{i:04}"))).collect();
    let jobs: Vec<(&Path, usize)> = paths.iter().map(|p| (p.as_path(), 1)).collect();
    let mut owner = Opener::spawn_as(OWNER);
    let got = owner.open(&jobs);
    owner.finish();
    keeper.finish();
    assert_eq!(
        got,
        (OTHERS, 0),
        "uid {OWNER} was refused after its own files were closed: {}",
        m.stats()
    );
}

#[test]
fn dropping_an_empty_directory_visits_only_it() {
    const DIRS: usize = 30;
    const PER_DIR: usize = 1000;
    const DROPS: usize = 21;
    let Some(m) = Mount::with(&["--revalidate", "3600"], |src| {
        for d in 0..DIRS {
            let dir = src.join(format!("other/d{d:02}"));
            fs::create_dir_all(&dir).unwrap();
            for f in 0..PER_DIR {
                fs::write(dir.join(format!("f{f:04}")), b"x").unwrap();
            }
        }
        fs::create_dir(src.join("empty")).unwrap();
    }) else {
        return;
    };
    for d in 0..DIRS {
        for e in fs::read_dir(m.at(&format!("other/d{d:02}"))).unwrap() {
            e.unwrap().metadata().unwrap();
        }
    }
    let known = m.stat("inodes", "known");
    assert!(known >= (DIRS * PER_DIR) as u64, "only {known} inodes known");
    let mut times = Vec::new();
    let mut visited = Vec::new();
    for _ in 0..DROPS {
        let before = m.stats()["drops"]["visited"].as_u64();
        let out = sys::drop_dir(&m.at("empty"), DropMode::All).unwrap();
        times.push(out.elapsed_ns);
        let after = m.stats()["drops"]["visited"].as_u64();
        visited.push(after.zip(before).map(|(a, b)| a - b));
    }
    times.sort_unstable();
    eprintln!(
        "drop of an empty directory with {known} inodes known: median {} ns (min {}, max {}) over {DROPS} drops",
        times[DROPS / 2],
        times[0],
        times[DROPS - 1]
    );
    for v in &visited {
        let v = v.expect("stats have drops.visited");
        assert!(v <= 4, "a drop of an empty directory visited {v} inodes");
    }
    // The drop still finds what is under a directory.
    let out = sys::drop_dir(&m.at("other/d03"), DropMode::All).unwrap();
    assert!(out.dentries_dropped + out.busy >= PER_DIR as u64, "{out:?}");
}

#[test]
fn an_unlinked_open_file_loses_its_pages_at_its_last_close() {
    let body = crate::harness::content(9, 100_000);
    let Some(m) = Mount::with(&[], |src| fs::write(src.join("f"), &body).unwrap()) else {
        return;
    };
    let base = m.stat("pagecache", "inodes");
    let f = fs::File::open(m.at("f")).unwrap();
    let mut buf = vec![0u8; body.len()];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
    assert_eq!(buf, body);
    assert_eq!(m.stat("pagecache", "inodes"), base + 1);
    fs::remove_file(m.at("f")).unwrap();
    // Still open: still readable, pages still cached.
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
    assert_eq!(buf, body);
    assert_eq!(m.stat("pagecache", "inodes"), base + 1);
    drop(f);
    let mut left = 0;
    let gone = eventually(Duration::from_secs(20), || {
        left = m.stat("pagecache", "bytes_cached");
        m.stat("pagecache", "inodes") == base && left == 0
    });
    assert!(
        gone,
        "{left} bytes of the unlinked file still cached 20 s after its last close"
    );
}
