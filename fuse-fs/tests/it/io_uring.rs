//! `--io-uring`: FUSE over io_uring on a real mount (the vendored fuser's
//! `uring.rs`). The kernel offers it only while the fuse module's
//! `enable_uring` parameter is set; these tests set it for their duration
//! and put back what they found (one test, so that nothing else here
//! changes it meanwhile; mounts without `--io-uring` never ask for it).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fuse_fs::protocol::DropMode;

use crate::harness::{
    AlignedPage, Mount, content, limit_in_child, mount_possible, open_direct, rcufs, threads_named, wait_timeout,
};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
/// What the guard logs when it raises a starved queue thread.
const STARVED: &str = "io_uring queue thread starved under SCHED_IDLE";

/// Sets `enable_uring` to `on`, giving back the value it had when dropped.
struct Param(String);

impl Param {
    fn set(on: bool) -> std::io::Result<Param> {
        let was = fs::read_to_string(PARAM)?;
        fs::write(PARAM, if on { "1" } else { "0" })?;
        Ok(Param(was.trim().to_string()))
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let back = if self.0 == "Y" { "1" } else { "0" };
        if let Err(e) = fs::write(PARAM, back) {
            eprintln!("could not restore {PARAM} to {}: {e}", self.0);
        }
    }
}

/// CPU time (ns, `schedstat`) of the daemon's threads whose name starts
/// with `prefix`.
fn cpu_ns(pid: i32, prefix: &str) -> u64 {
    threads_named(pid, prefix)
        .iter()
        .map(|dir| {
            let sched = fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
            sched
                .split_whitespace()
                .next()
                .map_or(0, |v| v.parse::<u64>().expect("schedstat"))
        })
        .sum()
}

/// `count` direct reads of the first 256 pages of `f`, in the order the
/// `stride` gives, each checked against `data`.
fn read_pages(f: &File, page: &mut AlignedPage, data: &[u8], count: u64, stride: u64, what: &str) {
    for i in 0..count {
        let off = (i * stride % 256) * 4096;
        let n = f.read_at(&mut page.0, off).expect("pread");
        assert_eq!(
            &page.0[..n],
            &data[off as usize..off as usize + n],
            "{what}: page at {off}"
        );
    }
}

/// Everything a mount does, through the queues: reads (cached and
/// `O_DIRECT`) give the source's bytes, writes reach the source, names
/// change, listings list; the queues' threads do the work (not the
/// `/dev/fuse` workers); the mount goes away cleanly. Then, with the
/// parameter off, `--io-uring on` fails with a message that says how to
/// turn it on, rather than falling back silently. With `idle`, CPU-bound
/// threads on every CPU make the guard (`uring_guard.rs`) move the starved
/// queue threads to normal priority.
#[test]
fn requests_go_through_the_io_uring_queues_and_a_kernel_without_them_is_refused() {
    if !mount_possible() {
        return;
    }
    if !Path::new(PARAM).exists() {
        eprintln!(
            "SKIPPED: this kernel has no FUSE over io_uring ({PARAM} is missing: Linux 6.14+ with \
             CONFIG_FUSE_IO_URING is needed)"
        );
        return;
    }
    let _param = Param::set(true).expect("setting enable_uring (root is needed)");
    // The kernel's count (`num_possible_cpus()`): the members of the mask.
    let possible: usize = fs::read_to_string("/sys/devices/system/cpu/possible")
        .unwrap()
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum();
    let data = content(11, (1 << 20) + 777);
    for args in [
        &["--io-uring", "on", "--coherence", "ttl"][..],
        &["--io-uring", "on", "--coherence", "ttl", "--kernel-cache"],
        &["--io-uring", "idle", "--coherence", "ttl"],
    ] {
        let mut m = Mount::with_env(args, &[("RUST_LOG", "info")], |src| {
            fs::write(src.join("f"), &data).unwrap();
            fs::create_dir(src.join("d")).unwrap();
        })
        .expect("mount");
        assert_eq!(
            threads_named(m.pid(), "fuser-ring-").len(),
            possible,
            "{args:?}: one queue per possible CPU"
        );

        // Reads, buffered and direct.
        assert_eq!(fs::read(m.at("f")).unwrap(), data, "{args:?}: whole file");
        let direct = open_direct(&m.at("f"));
        let mut page = AlignedPage([0; 4096]);
        let (ring0, dev0) = (cpu_ns(m.pid(), "fuser-ring-"), cpu_ns(m.pid(), "fuser-"));
        read_pages(&direct, &mut page, &data, 4000, 7919, &format!("{args:?}"));
        let ring = cpu_ns(m.pid(), "fuser-ring-") - ring0;
        // "fuser-" counts the queues too.
        let dev = cpu_ns(m.pid(), "fuser-") - dev0 - ring;
        assert!(
            ring > 3 * dev,
            "{args:?}: 4000 READs cost the queue threads {ring} ns of CPU and the /dev/fuse workers {dev} ns"
        );

        if args[1] == "idle" {
            // Every CPU busy with threads of normal priority: the queue
            // threads (SCHED_IDLE) would get almost no CPU; the guard must
            // notice and run them at normal priority, and the reads go on.
            let stop = AtomicBool::new(false);
            let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
            std::thread::scope(|s| {
                for _ in 0..2 * cpus {
                    s.spawn(|| {
                        while !stop.load(Ordering::Relaxed) {
                            std::hint::spin_loop();
                        }
                    });
                }
                // Reads go on until the guard acts, for at most 30 s
                // (without it, 100 reads took about a second here).
                let t0 = std::time::Instant::now();
                while !m.log_text().contains(STARVED) && t0.elapsed() < Duration::from_secs(30) {
                    read_pages(&direct, &mut page, &data, 20, 104_729, &format!("{args:?}, CPUs busy"));
                }
                stop.store(true, Ordering::Relaxed);
            });
            let log = m.log_text();
            assert!(
                log.contains(STARVED),
                "{args:?}: with every CPU busy for 30 s of reads the guard never moved a starved queue \
                 thread; log:\n{log}"
            );
        }

        if args.contains(&"--kernel-cache") {
            // A drop is answered once the kernel's copies are invalidated,
            // by the invalidation queue's answering thread: a reply from a
            // thread other than the queue's, which the queue's thread
            // submits (`uring.rs`, "Invariants"). Each must come back, and
            // the queues keep serving after them.
            for round in 0..20 {
                fs::read_dir(m.at("d")).unwrap().for_each(drop);
                assert_eq!(fs::read(m.at("f")).unwrap(), data, "{args:?}: before drop {round}");
                let (tx, rx) = std::sync::mpsc::channel();
                let root = m.at("");
                std::thread::spawn(move || tx.send(crate::sys::drop_dir(&root, DropMode::All)));
                rx.recv_timeout(Duration::from_secs(20))
                    .unwrap_or_else(|_| panic!("{args:?}: drop {round} was not answered in 20 s"))
                    .unwrap_or_else(|e| panic!("{args:?}: drop {round}: {e}"));
            }
            assert_eq!(fs::read(m.at("f")).unwrap(), data, "{args:?}: after the drops");
        }

        // Writes reach the source and read back.
        let mut w = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m.at("d/new"))
            .unwrap();
        let big = content(5, 300_000);
        w.write_all(&big).unwrap();
        w.sync_all().unwrap();
        drop(w);
        assert_eq!(
            fs::read(m.src_at("d/new")).unwrap(),
            big,
            "{args:?}: write reached the source"
        );
        assert_eq!(fs::read(m.at("d/new")).unwrap(), big, "{args:?}: write reads back");

        // Names and listings.
        fs::rename(m.at("d/new"), m.at("d/moved")).unwrap();
        assert!(m.src_at("d/moved").exists() && !m.src_at("d/new").exists());
        let mut names: Vec<String> = fs::read_dir(m.at("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["moved"], "{args:?}");
        fs::remove_file(m.at("d/moved")).unwrap();
        assert!(!m.src_at("d/moved").exists());
        drop(direct);
        // SIGTERM: the daemon unmounts; the queues must end with it.
        let status = m.stop_with(libc::SIGTERM);
        assert!(
            status.success(),
            "{args:?}: the daemon exited with {status} after SIGTERM"
        );
    }

    // Without the parameter: refused, with the way out in the message.
    let _off = Param::set(false).expect("clearing enable_uring");
    let tmp = tempfile::tempdir().unwrap();
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let out = rcufs()
        .arg("mount")
        .arg(&src)
        .arg(&mnt)
        .args(["--io-uring", "on"])
        .stdin(Stdio::null())
        .output()
        .expect("run rcufs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "--io-uring on without the kernel's offer mounted: {err}"
    );
    assert!(
        err.contains("enable_uring"),
        "the error does not say how to enable it: {err}"
    );
    assert!(
        !crate::harness::rcufs_mount_at(&mnt),
        "the refused mount was left in place"
    );
}

/// `--io-uring idle` as a user who may not raise a thread from `SCHED_IDLE`
/// back to normal priority (no `CAP_SYS_NICE`, `RLIMIT_NICE` 0) is refused
/// before anything is mounted: its guard could not help a starved queue.
#[test]
fn idle_is_refused_to_a_user_who_cannot_raise_threads_again() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !Path::new("/usr/bin/fusermount3").exists() {
        eprintln!("SKIPPED: a user mount needs /usr/bin/fusermount3 (fuse3) to get as far as this check");
        return;
    }
    let Some((_tmp, src, mnt)) = crate::harness::dirs_for_another_user() else {
        return;
    };
    for d in [&src, &mnt] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    }
    let mut cmd = rcufs();
    cmd.arg("mount")
        .arg(&src)
        .arg(&mnt)
        .args(["--io-uring", "idle"])
        .env("PATH", "/usr/bin:/bin")
        .env("RUST_LOG", "warn")
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null());
    limit_in_child(&mut cmd, libc::RLIMIT_NICE, 0);
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rcufs as nobody");
    // A daemon that accepted would serve until unmounted: stop it.
    let status = wait_timeout(&mut child, Duration::from_secs(20));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::process::Command::new("umount").arg("-l").arg(&mnt).status();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        status.is_some_and(|s| !s.success()),
        "idle was accepted without the right to raise threads (still running after 20 s, or exit 0): {err}"
    );
    assert!(err.contains("--io-uring idle needs"), "not the expected refusal: {err}");
    assert!(!crate::harness::rcufs_mount_at(&mnt), "something was mounted");
}
