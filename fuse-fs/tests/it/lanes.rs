//! A filesystem under the source that stops answering holds its own lane
//! of workers, not the whole mount (`fs/lanes.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::{Mount, Submount, eventually, fuse_connection, write_tree};

/// Requests the kernel has sent on the connection `conn` (fusectl's
/// directory) and not yet had answered.
fn waiting(conn: &Path) -> u64 {
    fs::read_to_string(conn.join("waiting"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Stops (or continues) the daemon of `m`.
fn signal(m: &Mount, sig: i32) {
    // SAFETY: kill has no memory preconditions; the pid is the mount's live
    // daemon.
    assert_eq!(unsafe { libc::kill(m.pid(), sig) }, 0);
}

/// Stops the daemon of `m` and waits until every one of its threads has
/// stopped: `kill` only queues the signal, and a worker not yet stopped
/// would still answer a request sent meanwhile (on a loaded machine, well
/// after the `kill`).
fn stop(m: &Mount) {
    signal(m, libc::SIGSTOP);
    let task = PathBuf::from(format!("/proc/{}/task", m.pid()));
    let stopped = || {
        fs::read_dir(&task).unwrap().all(|t| {
            // The state follows the command name's closing parenthesis.
            let stat = fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    };
    assert!(eventually(Duration::from_secs(10), stopped), "the daemon did not stop");
}

/// Once nothing is in flight on the connection `conn` (the RELEASEs of
/// reads are sent asynchronously), so that what waits afterwards is what
/// the test sends: stops the daemon of `m`, which the returned guard
/// continues when dropped.
fn stop_when_quiet(conn: &Path, m: &Mount) -> Continue {
    assert!(
        eventually(Duration::from_secs(10), || waiting(conn) == 0),
        "requests still in flight on a quiet mount"
    );
    let guard = Continue(m.pid());
    stop(m);
    guard
}

/// Continues a stopped daemon when dropped, so that a failing test does not
/// leave the suite waiting on it.
struct Continue(i32);

impl Drop for Continue {
    fn drop(&mut self) {
        // SAFETY: as in `signal`.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[test]
fn a_stopped_filesystem_under_the_source_holds_its_lane_not_the_mount() {
    stopped_filesystem_holds_its_lane(true, &[]);
}

/// With a polling worker (`--poll-us`), whose token a worker gives back
/// before it runs a request of a lane: the lanes work the same (this does
/// not show which worker polls).
#[test]
fn a_stopped_filesystem_holds_its_lane_with_a_polling_worker() {
    stopped_filesystem_holds_its_lane(true, &["--poll-us", "200"]);
}

/// The filesystem stops before anything went into it through the mount: its
/// lane comes from the mount table at the start.
#[test]
fn a_filesystem_stopped_before_its_first_lookup_holds_its_lane_not_the_mount() {
    stopped_filesystem_holds_its_lane(false, &[]);
}

/// The lookups' threads (their `lstat` results), the reader's thread, and
/// what it read within 5 s.
type Waiting = (
    Vec<std::thread::JoinHandle<Result<(), Option<i32>>>>,
    std::thread::JoinHandle<()>,
    Result<Option<Vec<u8>>, mpsc::RecvTimeoutError>,
);

/// With the daemon of `inner` stopped, under `outer` (connection `conn`)
/// bound at `fuse` and `fuse2`: starts a lookup of a name not cached under
/// each (`fuse/d/new0`, `fuse2/e/new1`), waits until both reached the
/// daemon (the kernel waits for their two answers), then reads `other/f`.
fn lookups_wait_and_a_read_elsewhere(outer: &Mount, inner: &Mount, conn: &Path) -> Waiting {
    let stats: Vec<_> = ["fuse/d/new0", "fuse2/e/new1"]
        .into_iter()
        .map(|p| {
            let p = outer.at(p);
            std::thread::spawn(move || fs::symlink_metadata(p).map(|_| ()).map_err(|e| e.raw_os_error()))
        })
        .collect();
    let sent = eventually(Duration::from_secs(10), || waiting(conn) >= 2);
    if !sent {
        signal(inner, libc::SIGCONT);
        panic!("the two lookups never reached the daemon ({} waiting)", waiting(conn));
    }
    let (tx, rx) = mpsc::channel();
    let p = outer.at("other/f");
    let other = std::thread::spawn(move || tx.send(fs::read(p).ok()).unwrap());
    let answered = rx.recv_timeout(Duration::from_secs(5));
    (stats, other, answered)
}

/// The filesystem that stops: another rcufs mount (a FUSE filesystem, so
/// one that can stop answering) holding `d/keep` and `e/keep`; and a
/// source for the mount under test, holding `fuse` and `fuse2` to bind it
/// on, and `other/f`.
fn stopping_and_source() -> Option<(Mount, tempfile::TempDir)> {
    let inner = Mount::with(&[], |src| write_tree(src, &[("d/keep", b"keep"), ("e/keep", b"keep")]))?;
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("fuse")).unwrap();
    fs::create_dir(top.path().join("fuse2")).unwrap();
    write_tree(top.path(), &[("other/f", b"other")]);
    Some((inner, top))
}

/// Waits up to 5 s for `m` to record `n` mount points; fails with `why`.
fn recorded_soon(m: &Mount, n: u64, why: &str) {
    let recorded = eventually(Duration::from_secs(5), || m.stat("source", "lane_mount_points") == n);
    assert!(recorded, "{why} ({} recorded)", m.stat("source", "lane_mount_points"));
}

/// Once the filesystem continued: each lookup of
/// [`lookups_wait_and_a_read_elsewhere`] ended (`ENOENT`), and its read
/// elsewhere had been answered while `what` was stopped.
fn read_elsewhere_was_answered(
    stats: Vec<std::thread::JoinHandle<Result<(), Option<i32>>>>,
    answered: Result<Option<Vec<u8>>, mpsc::RecvTimeoutError>,
    what: &str,
) {
    for s in stats {
        assert_eq!(
            s.join().unwrap(),
            Err(Some(libc::ENOENT)),
            "a lookup in the continued filesystem"
        );
    }
    assert_eq!(
        answered,
        Ok(Some(b"other".to_vec())),
        "a read elsewhere in the mount waited for {what}"
    );
}

/// An rcufs mount with `--threads 2` over a source with another rcufs mount
/// bound under it at `fuse` and `fuse2`, which is stopped (after a first
/// read through the mount if `entered`); a lookup under each mount point
/// waits, and a read and a listing elsewhere in the mount are answered.
/// The two lookups go through different names at every step (`fuse/d`,
/// `fuse2/e`): the kernel sends one LOOKUP of a name in a directory at a
/// time, and `fuse` and `fuse2` are the same directory in the mirror, so
/// two lookups that share a step whose entry must be looked up again
/// would be one request. `args`: more options for the mount.
fn stopped_filesystem_holds_its_lane(entered: bool, args: &[&str]) {
    let Some((inner, top)) = stopping_and_source() else {
        return;
    };
    let bind = Submount::bind(&inner.mnt, &top.path().join("fuse"));
    let bind2 = Submount::bind(&inner.mnt, &top.path().join("fuse2"));
    // Two workers: without lanes, two requests waiting in the stopped
    // filesystem take both.
    let args = [&["--threads", "2", "--revalidate", "1"], args].concat();
    let Some(outer) = Mount::over(top.path(), &args) else {
        return;
    };
    // Found now: finding it later asks the mount for its root's attributes,
    // which without lanes no worker would answer.
    let conn = fuse_connection(&outer.mnt);
    // Known from the mount table: one filesystem, two mount points.
    assert_eq!(outer.stat("source", "lane_filesystems"), 1);
    assert_eq!(outer.stat("source", "lane_mount_points"), 2);
    if entered {
        assert_eq!(fs::read(outer.at("fuse/d/keep")).unwrap(), b"keep");
        // The crossing finds the same filesystem and name.
        assert_eq!(outer.stat("source", "lane_filesystems"), 1);
        assert_eq!(outer.stat("source", "lane_mount_points"), 2);
    }
    assert_eq!(fs::read(outer.at("other/f")).unwrap(), b"other");
    // Nothing in flight (the RELEASEs of the reads above are sent
    // asynchronously), so that what waits below is the two lookups.
    let _continue = stop_when_quiet(&conn, &inner);
    // Two lookups of names not cached, in the stopped filesystem: each
    // waits; and a read elsewhere in the mount.
    let (stats, other, answered) = lookups_wait_and_a_read_elsewhere(&outer, &inner, &conn);
    // A listing of the directory holding the mount point, once what was
    // cached of the mount point is stale (`--revalidate` 1 s): it lists
    // the name without asking the stopped filesystem for attributes.
    std::thread::sleep(Duration::from_millis(1100));
    let (tx, rx) = mpsc::channel();
    let root = outer.mnt.clone();
    let lister = std::thread::spawn(move || tx.send(crate::harness::listed(fs::read_dir(root).unwrap())).unwrap());
    let listed = rx.recv_timeout(Duration::from_secs(5));
    signal(&inner, libc::SIGCONT);
    other.join().unwrap();
    lister.join().unwrap();
    assert_eq!(
        listed,
        Ok(vec!["fuse".to_string(), "fuse2".to_string(), "other".to_string()]),
        "a listing of the mount point's directory waited for the stopped filesystem"
    );
    read_elsewhere_was_answered(stats, answered, "the stopped filesystem");
    // The lane's queued request ran once the filesystem answered again, and
    // the lane serves as before.
    assert_eq!(fs::read(outer.at("fuse/d/keep")).unwrap(), b"keep");
    // A mount point cannot be removed, and nothing moves across: answered
    // without a look into the filesystem.
    assert_eq!(
        fs::remove_dir(outer.at("fuse2")).unwrap_err().raw_os_error(),
        Some(libc::EBUSY)
    );
    let across = fs::rename(outer.at("other/f"), outer.at("fuse/d/f"));
    assert_eq!(across.unwrap_err().raw_os_error(), Some(libc::EXDEV));
    let across = fs::hard_link(outer.at("other/f"), outer.at("fuse/d/f"));
    assert_eq!(across.unwrap_err().raw_os_error(), Some(libc::EXDEV));
    // Unmounted, the second mount point is a directory again: its name
    // leaves the lane once the mount table is read again (1 s).
    drop(bind2);
    std::thread::sleep(Duration::from_millis(1100));
    fs::remove_dir(outer.at("fuse2")).unwrap();
    assert_eq!(outer.stat("source", "lane_mount_points"), 1);
    assert_eq!(outer.stat("source", "lane_filesystems"), 1);
    drop(outer);
    drop(bind);
    drop(inner);
}

/// A directory made immutable (`chattr +i`) until dropped.
struct Immutable(PathBuf);

impl Immutable {
    fn set(dir: &Path) -> Self {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .status()
            .unwrap();
        assert!(ok.success(), "chattr +i {}", dir.display());
        Immutable(dir.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// Whether the child `c` has exited, waiting at most `timeout`.
fn exits_within(c: &mut std::process::Child, timeout: Duration) -> bool {
    eventually(timeout, || c.try_wait().unwrap().is_some())
}

/// A caller whose request waits queued in the lane of a stopped filesystem
/// can be killed, as a caller waiting in a network filesystem can: at once
/// for a kill, and within the watch's pass for a kill after a first signal
/// it handles (the kernel sends one INTERRUPT per request, at the first
/// signal). A signal it handles does not answer its request (natively a
/// network filesystem's waits are killable, not interruptible), and the
/// request running in the stopped filesystem is not answered either.
/// Then a removal or rename of the mount point is answered as the source
/// answers it.
#[test]
fn a_killed_caller_of_a_request_queued_in_a_lane_goes_at_once() {
    let tree: &[(&str, &[u8])] = &[("d/keep", b"keep"), ("e/keep", b"keep"), ("f/keep", b"keep")];
    let Some(inner) = Mount::with(&[], |src| write_tree(src, tree)) else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("fuse")).unwrap();
    let bind = Submount::bind(&inner.mnt, &top.path().join("fuse"));
    // Two workers: the lane runs one request, the rest queue. Entries kept
    // long, so that no step of the paths below is looked up again.
    let Some(outer) = Mount::over(top.path(), &["--threads", "2", "--revalidate", "60"]) else {
        return;
    };
    let conn = fuse_connection(&outer.mnt);
    for dir in ["d", "e", "f"] {
        assert_eq!(fs::read(outer.at(&format!("fuse/{dir}/keep"))).unwrap(), b"keep");
    }
    let _continue = stop_when_quiet(&conn, &inner);
    // The lane's one running request: a lookup in the stopped filesystem.
    let p = outer.at("fuse/d/new0");
    let running = std::thread::spawn(move || fs::symlink_metadata(p).map_err(|e| e.raw_os_error()));
    let sent = eventually(Duration::from_secs(10), || waiting(&conn) == 1);
    if !sent {
        let w = waiting(&conn);
        signal(&inner, libc::SIGCONT);
        panic!(
            "the first lookup: {w} waiting, not 1; it returned: {:?}",
            running.join().unwrap().map(|_| ())
        );
    }
    // Two callers whose lookups queue behind it (each in a directory of
    // its own: lookups of one directory may be sent one at a time).
    let mut plain = std::process::Command::new("stat")
        .arg(outer.at("fuse/e/new1"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sent = eventually(Duration::from_secs(10), || waiting(&conn) == 2);
    assert!(sent, "the second lookup: {} waiting, not 2", waiting(&conn));
    // This one handles SIGUSR1 (printing when it does) and looks up with
    // the handler installed.
    let script = "import os, signal, sys\n\
                  signal.signal(signal.SIGUSR1, lambda *a: print('handled', flush=True))\n\
                  print('ready', flush=True)\n\
                  os.lstat(sys.argv[1])\n";
    let mut handling = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(outer.at("fuse/f/new2"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(handling.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    let queued = eventually(Duration::from_secs(10), || waiting(&conn) == 3);
    if !queued {
        signal(&inner, libc::SIGCONT);
        panic!(
            "the three lookups never reached the daemon ({} waiting)",
            waiting(&conn)
        );
    }
    // A handled signal: its INTERRUPT leaves the request queued.
    // SAFETY: kill has no memory preconditions; the pid is our live child.
    assert_eq!(unsafe { libc::kill(handling.id() as i32, libc::SIGUSR1) }, 0);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        handling.try_wait().unwrap().is_none(),
        "a handled signal ended the caller"
    );
    assert_eq!(waiting(&conn), 3, "a handled signal answered the queued request");
    // Killed: both go, the one killed after its INTERRUPT at the watch's
    // next pass.
    plain.kill().unwrap();
    let plain_gone = exits_within(&mut plain, Duration::from_secs(5));
    handling.kill().unwrap();
    let handling_gone = exits_within(&mut handling, Duration::from_secs(5));
    let left = waiting(&conn);
    signal(&inner, libc::SIGCONT);
    // Removing or renaming the mount point goes to the source, which
    // answers `EBUSY` after its own checks (here `EPERM` in an immutable
    // directory). (Not while the filesystem is stopped: the kernel first
    // revalidates the name with a LOOKUP, which waits in the lane.)
    let busy = [
        fs::remove_dir(outer.at("fuse")).map_err(|e| e.raw_os_error()),
        fs::rename(outer.at("fuse"), outer.at("moved")).map_err(|e| e.raw_os_error()),
    ];
    let immutable = Immutable::set(top.path());
    let denied = [
        fs::remove_dir(outer.at("fuse")).map_err(|e| e.raw_os_error()),
        fs::rename(outer.at("fuse"), outer.at("moved")).map_err(|e| e.raw_os_error()),
    ];
    drop(immutable);
    assert_eq!(busy, [Err(Some(libc::EBUSY)); 2], "removing or renaming a mount point");
    assert_eq!(
        denied,
        [Err(Some(libc::EPERM)); 2],
        "removing or renaming a mount point in an immutable directory"
    );
    assert!(
        plain_gone,
        "a killed caller of a queued request stayed until the filesystem answered"
    );
    assert!(
        handling_gone,
        "a caller killed after a handled signal stayed until the filesystem answered"
    );
    assert_eq!(left, 1, "only the running request waits");
    // The handler never ran: its lookup was not answered EINTR.
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "", "the handled signal interrupted the lookup");
    assert_eq!(running.join().unwrap().map(|_| ()), Err(Some(libc::ENOENT)));
    // The lane serves as before.
    assert_eq!(fs::read(outer.at("fuse/e/keep")).unwrap(), b"keep");
    assert_eq!(
        fs::symlink_metadata(outer.at("fuse/f/new2"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOENT)
    );
    drop(outer);
    drop(bind);
    drop(inner);
}

/// Mount points are recorded by mount: one hidden at the start under a
/// mount that answers gets no record, one unmounted leaves even while
/// the same filesystem stays mounted on a directory of the same name
/// elsewhere (before, records were matched by device and last name), and
/// one moved onto a directory of the same name elsewhere leaves its old
/// place for the new one, or for none once moved out of the source.
#[test]
fn mount_points_are_recorded_by_mount_not_by_name() {
    let Some(inner) = Mount::with(&[], |src| write_tree(src, &[("keep", b"keep")])) else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    // The source a private mount of its own, so that a mount under it can
    // be moved.
    let private = Submount::bind(top.path(), top.path());
    private.make_private();
    for dir in ["a/x", "b/x", "c/x", "h"] {
        fs::create_dir_all(top.path().join(dir)).unwrap();
    }
    let mut a = Submount::bind(&inner.mnt, &top.path().join("a/x"));
    let b = Submount::bind(&inner.mnt, &top.path().join("b/x"));
    let hidden = Submount::bind(&inner.mnt, &top.path().join("h"));
    // Mounted over: a lookup of `h` reaches the tmpfs, which answers.
    let over = Submount::tmpfs(&top.path().join("h"));
    let Some(outer) = Mount::over(top.path(), &["--threads", "2"]) else {
        return;
    };
    assert_eq!(outer.stat("source", "lane_filesystems"), 1);
    assert_eq!(
        outer.stat("source", "lane_mount_points"),
        2,
        "the mount point hidden under the tmpfs was recorded"
    );
    assert_eq!(fs::read(outer.at("a/x/keep")).unwrap(), b"keep");
    assert_eq!(fs::read(outer.at("b/x/keep")).unwrap(), b"keep");
    assert!(fs::read_dir(outer.at("h")).unwrap().next().is_none());
    // `b/x` unmounted; `a/x` still holds the filesystem on a directory
    // named `x`. A lookup of `b/x` (once the mount table may be read
    // again, 1 s) drops its record.
    drop(b);
    std::thread::sleep(Duration::from_millis(1100));
    assert!(fs::read_dir(outer.at("b/x")).unwrap().next().is_none());
    assert_eq!(
        outer.stat("source", "lane_mount_points"),
        1,
        "an unmounted mount point kept its record"
    );
    fs::remove_dir(outer.at("b/x")).unwrap();
    // `a/x` moved to `c/x`: the same mount (same id and device) on a
    // directory of the same name. Its record moves with it: a lookup
    // through `c/x` records the new place if the mount table's change has
    // not yet, and the old place leaves (before, it stayed, as a mount of
    // that id and device was still on a directory named `x`).
    a.move_to(&top.path().join("c/x"));
    assert_eq!(fs::read(outer.at("c/x/keep")).unwrap(), b"keep");
    recorded_soon(&outer, 1, "a moved mount point kept the record of its old place");
    assert!(fs::read_dir(outer.at("a/x")).unwrap().next().is_none());
    // Moved again, out of the source onto a directory of the same name:
    // its record leaves, though a mount of that id and device is still on
    // a directory named `x`.
    let out = tempfile::tempdir().unwrap();
    let private_out = Submount::bind(out.path(), out.path());
    private_out.make_private();
    fs::create_dir(out.path().join("x")).unwrap();
    a.move_to(&out.path().join("x"));
    recorded_soon(&outer, 0, "a mount point moved out of the source kept its record");
    assert!(fs::read_dir(outer.at("c/x")).unwrap().next().is_none());
    fs::remove_dir(outer.at("c/x")).unwrap();
    fs::remove_dir(outer.at("a/x")).unwrap();
    drop(outer);
    drop(over);
    drop(hidden);
    drop(a);
    drop(private_out);
    drop(private);
    drop(inner);
}

/// A filesystem mounted under the source after the start, and stopped
/// before anything entered it through the mount, holds its lane, not the
/// mount: it is learned from the mount table when it is mounted (before,
/// the first crossing into it, which must wait for it to learn its type,
/// took a worker outside any lane).
#[test]
fn a_filesystem_mounted_after_the_start_and_stopped_at_once_holds_its_lane() {
    let Some((inner, top)) = stopping_and_source() else {
        return;
    };
    let Some(outer) = Mount::over(top.path(), &["--threads", "2"]) else {
        return;
    };
    let conn = fuse_connection(&outer.mnt);
    assert_eq!(outer.stat("source", "lane_filesystems"), 0);
    // Mounted now, at two names (the kernel sends one LOOKUP of a name in
    // a directory at a time, so two waiting lookups need two names).
    let bind = Submount::bind(&inner.mnt, &top.path().join("fuse"));
    let bind2 = Submount::bind(&inner.mnt, &top.path().join("fuse2"));
    let learned = eventually(Duration::from_secs(5), || {
        outer.stat("source", "lane_filesystems") == 1 && outer.stat("source", "lane_mount_points") == 2
    });
    assert!(
        learned,
        "the filesystem mounted since the start was not learned from the mount table"
    );
    assert_eq!(fs::read(outer.at("other/f")).unwrap(), b"other");
    let _continue = stop_when_quiet(&conn, &inner);
    // The first lookups of the mount points' names, in the stopped
    // filesystem: each waits, in the lane; and a read elsewhere.
    let (stats, other, answered) = lookups_wait_and_a_read_elsewhere(&outer, &inner, &conn);
    signal(&inner, libc::SIGCONT);
    other.join().unwrap();
    read_elsewhere_was_answered(stats, answered, "the filesystem mounted since the start");
    // Unmounted: the names leave the lanes from the mount table too.
    drop(bind2);
    recorded_soon(&outer, 1, "an unmounted mount point kept its record");
    drop(outer);
    drop(bind);
    drop(inner);
}

/// With the workers the lanes may hold all waiting in one stopped
/// filesystem, the lanes of the others run on threads of their own.
#[test]
fn a_stopped_filesystem_keeps_no_other_lane_from_running_with_two_workers() {
    other_lanes_run_while_one_stops("2");
}

/// With one worker, every lane's requests run on threads of the lanes'
/// own: one stopped filesystem holds neither the mount nor the others.
#[test]
fn a_stopped_filesystem_holds_its_lane_not_the_mount_with_one_worker() {
    other_lanes_run_while_one_stops("1");
}

/// Two rcufs mounts bound under the source, `fuse` and `live`, and one
/// stopped; with `--threads threads`, while two lookups wait in the stopped
/// one, reads in the live one and elsewhere are answered.
fn other_lanes_run_while_one_stops(threads: &str) {
    let Some(stopping) = Mount::with(&[], |src| write_tree(src, &[("d/keep", b"keep"), ("e/keep", b"keep")])) else {
        return;
    };
    let Some(live) = Mount::with(&[], |src| write_tree(src, &[("keep", b"live")])) else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("fuse")).unwrap();
    fs::create_dir(top.path().join("live")).unwrap();
    write_tree(top.path(), &[("other/f", b"other")]);
    let bind = Submount::bind(&stopping.mnt, &top.path().join("fuse"));
    let bind_live = Submount::bind(&live.mnt, &top.path().join("live"));
    let Some(outer) = Mount::over(top.path(), &["--threads", threads, "--revalidate", "60"]) else {
        return;
    };
    let conn = fuse_connection(&outer.mnt);
    assert_eq!(outer.stat("source", "lane_filesystems"), 2);
    for dir in ["d", "e"] {
        assert_eq!(fs::read(outer.at(&format!("fuse/{dir}/keep"))).unwrap(), b"keep");
    }
    let _continue = stop_when_quiet(&conn, &stopping);
    let stats: Vec<_> = ["fuse/d/new0", "fuse/e/new1"]
        .into_iter()
        .map(|p| {
            let p = outer.at(p);
            std::thread::spawn(move || fs::symlink_metadata(p).map_err(|e| e.raw_os_error()))
        })
        .collect();
    let sent = eventually(Duration::from_secs(10), || waiting(&conn) == 2);
    if !sent {
        signal(&stopping, libc::SIGCONT);
        panic!("the two lookups never reached the daemon ({} waiting)", waiting(&conn));
    }
    // Names not looked up yet, in the live filesystem and elsewhere.
    let (tx, rx) = mpsc::channel();
    let (in_live, elsewhere) = (outer.at("live/keep"), outer.at("other/f"));
    let reader = std::thread::spawn(move || {
        tx.send(fs::read(in_live).ok()).unwrap();
        tx.send(fs::read(elsewhere).ok()).unwrap();
    });
    let answers = [
        rx.recv_timeout(Duration::from_secs(5)),
        rx.recv_timeout(Duration::from_secs(5)),
    ];
    signal(&stopping, libc::SIGCONT);
    reader.join().unwrap();
    assert_eq!(
        answers,
        [Ok(Some(b"live".to_vec())), Ok(Some(b"other".to_vec()))],
        "a read in the live filesystem, then one elsewhere, waited for the stopped one"
    );
    for s in stats {
        assert_eq!(s.join().unwrap().map(|_| ()), Err(Some(libc::ENOENT)));
    }
    drop(outer);
    drop(bind_live);
    drop(bind);
    drop(live);
    drop(stopping);
}
