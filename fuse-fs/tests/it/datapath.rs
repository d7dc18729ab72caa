//! The data path on real mounts, in both modes: READ answered from pinned
//! cache pages (vectored or gathered, `pinned.rs`) returns exactly the
//! source's bytes wherever a read starts and ends; data written through the
//! mount is cached (write-through) and reads back as hits; and concurrent
//! writers (parallel direct writes), readers, truncates and mmap writers
//! leave the cache holding exactly what the source holds.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fuse_fs::protocol::DropMode;

use crate::harness::{AlignedPage, Mount, content, open_direct, threads_named, write_tree};
use crate::sys;

/// The two modes, with timeouts only (no watch), so that a change made in
/// the source is seen at the next open in both (`SEMANTICS.md`).
const MODES: [&[&str]; 2] = [&["--coherence", "ttl"], &["--coherence", "ttl", "--kernel-cache"]];

/// A file of 1 MiB and 1234 bytes: 257 pages, the last one short.
const LEN: usize = (1 << 20) + 1234;

/// `pread` of `len` bytes at `off`, returning what was read.
fn pread(f: &File, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[done..], off + done as u64).expect("pread");
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

/// What the source holds in `off..off+len` (clipped to its end).
fn expect(src: &[u8], off: u64, len: usize) -> &[u8] {
    let a = (off as usize).min(src.len());
    &src[a..(a + len).min(src.len())]
}

/// Ranges that start and end inside pages, on page boundaries, cross many
/// pages (a 1 MiB read: the gathered reply), end at or run past the end of
/// file, and start past it.
const RANGES: &[(u64, usize)] = &[
    (0, 1),
    (4095, 2),
    (4000, 10_000),
    (8192, 4096),
    (0, 1 << 20),
    (100, 128 << 10),
    (12_288, 3 * 4096),
    (LEN as u64 - 10, 100),
    (LEN as u64 - 1234, 1234),
    (LEN as u64, 100),
    (LEN as u64 + 5000, 10),
];

fn check_ranges(f: &File, src: &[u8], what: &str) {
    for &(off, len) in RANGES {
        assert!(
            pread(f, off, len) == expect(src, off, len),
            "{what}: read of {len} bytes at {off} differs from the source"
        );
    }
}

#[test]
fn reads_return_the_source_bytes_wherever_they_start_and_end() {
    for args in MODES {
        let Some(m) = Mount::with(args, |s| write_tree(s, &[("f", &content(1, LEN))])) else {
            return;
        };
        let src = content(1, LEN);
        let f = File::open(m.at("f")).unwrap();
        check_ranges(&f, &src, &format!("{args:?}, cold"));
        check_ranges(&f, &src, &format!("{args:?}, hot"));
        if !args.contains(&"--kernel-cache") {
            // (With the kernel's cache, the kernel answers the second pass.)
            assert!(
                m.stat("pagecache", "hits") > 0,
                "{args:?}: the second pass hit the cache"
            );
        }
        drop(f);
        // Changed in the source, shorter: a fresh open sees the new bytes
        // and the new end wherever a read falls.
        let new = content(2, LEN - 5000);
        fs::write(m.src_at("f"), &new).unwrap();
        let f = File::open(m.at("f")).unwrap();
        check_ranges(&f, &new, &format!("{args:?}, after a change in the source"));
        // A pages drop: read from the source again, and exact.
        sys::drop_dir(&m.mnt, DropMode::Pages).unwrap();
        let f = File::open(m.at("f")).unwrap();
        check_ranges(&f, &new, &format!("{args:?}, after a drop"));
    }
}

#[test]
fn written_data_reads_back_as_page_cache_hits() {
    let Some(m) = Mount::start(&["--coherence", "ttl"]) else {
        return;
    };
    let data = content(3, 64 * 1024 + 100);
    // One write of 16 whole pages and a short last one, ending the file.
    let f = OpenOptions::new().write(true).create_new(true).open(m.at("w")).unwrap();
    f.write_all_at(&data, 0).unwrap();
    drop(f);
    let (hits, misses, fills) = (
        m.stat("pagecache", "hits"),
        m.stat("pagecache", "misses"),
        m.stat("pagecache", "fills"),
    );
    assert!(fills >= 17, "the write cached its 17 pages ({fills} fills)");
    let f = File::open(m.at("w")).unwrap();
    assert_eq!(pread(&f, 0, data.len() + 10), data);
    assert_eq!(
        m.stat("pagecache", "misses"),
        misses,
        "reading back what was written missed nothing"
    );
    assert!(m.stat("pagecache", "hits") >= hits + 17);
    assert_eq!(m.stat("pagecache", "fills"), fills, "nothing was read from the source");
    assert_eq!(fs::read(m.src_at("w")).unwrap(), data);
    // A rewrite of part of it: the cached pages change with the source.
    let f = OpenOptions::new().write(true).open(m.at("w")).unwrap();
    f.write_all_at(b"rewritten", 4090).unwrap();
    drop(f);
    let mut want = data.clone();
    want[4090..4099].copy_from_slice(b"rewritten");
    assert_eq!(fs::read(m.at("w")).unwrap(), want);
    assert_eq!(fs::read(m.src_at("w")).unwrap(), want);
    assert_eq!(m.stat("pagecache", "fills"), fills);
}

/// A shared writable mapping of `len` bytes of `f`, unmapped on drop.
struct Mapping {
    p: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(f: &File, len: usize) -> Mapping {
        // SAFETY: a fresh shared mapping of an open file; no Rust object
        // aliases it, and the file is not shrunk while it is mapped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        Mapping { p: p.cast(), len }
    }

    fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: inside the mapping, which lives as long as `self`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.p.add(off), bytes.len()) };
    }

    fn sync(&self) {
        // SAFETY: exactly the mapping made in `new`.
        let r = unsafe { libc::msync(self.p.cast(), self.len, libc::MS_SYNC) };
        assert_eq!(r, 0, "msync");
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, not used after this.
        unsafe { libc::munmap(self.p.cast(), self.len) };
    }
}

/// A small generator for the workers (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Reads through a fresh open and compares with the source, then drops the
/// pages and compares again.
fn same_as_source(m: &Mount, rel: &str, what: &str) {
    let src = fs::read(m.src_at(rel)).unwrap();
    let through = fs::read(m.at(rel)).unwrap();
    assert!(
        through == src,
        "{what}: {rel} through the mount ({} bytes) differs from the source ({} bytes){}",
        through.len(),
        src.len(),
        first_difference(&through, &src)
    );
    sys::drop_dir(&m.mnt, DropMode::Pages).unwrap();
    assert!(fs::read(m.at(rel)).unwrap() == src, "{what}: {rel} after a drop");
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(", first at byte {i}"),
        None => String::new(),
    }
}

/// What a process writes through a shared mapping of a file on the mount
/// is in the source once it has closed the file, without an `msync` and
/// while the mapping lives on: the close of a descriptor open for writing
/// still flushes (the kernel writes the mapping's dirty pages back first;
/// `fs/flush.rs`), in both modes. A read-only descriptor of the same file,
/// closed after the write, does not flush it.
#[test]
fn data_written_through_a_mapping_is_in_the_source_after_the_close() {
    for extra in [&[][..], &["--kernel-cache"][..]] {
        let Some(m) = Mount::with(extra, |src| write_tree(src, &[("f", &content(1, 3 * 4096))])) else {
            return;
        };
        let f = OpenOptions::new().read(true).write(true).open(m.at("f")).unwrap();
        let map = Mapping::new(&f, 3 * 4096);
        // Opened before the write: an open may write dirty pages back.
        let reader = File::open(m.at("f")).unwrap();
        map.write(5000, b"through the mapping");
        let flushes = || m.stats()["source"]["flushes"].as_u64().unwrap();
        let before = flushes();
        drop(reader);
        assert_eq!(flushes(), before, "{extra:?}: the read-only close sent a FLUSH");
        drop(f);
        assert_eq!(flushes(), before + 1, "{extra:?}: the writer's close sent no FLUSH");
        let mut want = content(1, 3 * 4096);
        want[5000..5000 + 19].copy_from_slice(b"through the mapping");
        assert!(
            fs::read(m.src_at("f")).unwrap() == want,
            "{extra:?}: the mapping's write is not in the source after the close"
        );
        drop(map);
    }
}

#[test]
fn concurrent_writers_readers_truncates_and_mmap_writers_leave_no_stale_bytes() {
    const SIZE: usize = 256 << 10;
    for args in MODES {
        let Some(m) = Mount::with(args, |s| {
            write_tree(s, &[("t", &content(4, SIZE)), ("mm", &content(5, SIZE))])
        }) else {
            return;
        };
        // Cache everything first, so that writes meet cached pages.
        assert_eq!(fs::read(m.at("t")).unwrap(), content(4, SIZE));
        assert_eq!(fs::read(m.at("mm")).unwrap(), content(5, SIZE));
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_secs(3);
        std::thread::scope(|s| {
            // "t": two writers, a reader and a truncater.
            for w in 0..2u64 {
                let (m, stop) = (&m, &stop);
                s.spawn(move || {
                    let f = OpenOptions::new().write(true).open(m.at("t")).unwrap();
                    let mut r = Rng(0x9e37_79b9 + w);
                    while !stop.load(Ordering::Relaxed) {
                        let off = r.below(SIZE as u64);
                        let len = 1 + r.below(20_000) as usize;
                        let byte = r.next() as u8;
                        f.write_all_at(&vec![byte; len], off).unwrap();
                    }
                });
            }
            {
                let (m, stop) = (&m, &stop);
                s.spawn(move || {
                    let f = File::open(m.at("t")).unwrap();
                    let mut r = Rng(77);
                    while !stop.load(Ordering::Relaxed) {
                        let _ = pread(&f, r.below(SIZE as u64), 1 + r.below(70_000) as usize);
                    }
                });
            }
            {
                let (m, stop) = (&m, &stop);
                s.spawn(move || {
                    let f = OpenOptions::new().write(true).open(m.at("t")).unwrap();
                    let mut r = Rng(99);
                    while !stop.load(Ordering::Relaxed) {
                        f.set_len(r.below(SIZE as u64 + 8192)).unwrap();
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
            }
            // "mm": a writer through the descriptor and one through a
            // shared mapping (never shrunk), msync-ed now and then.
            {
                let (m, stop) = (&m, &stop);
                s.spawn(move || {
                    let f = OpenOptions::new().write(true).open(m.at("mm")).unwrap();
                    let mut r = Rng(5);
                    while !stop.load(Ordering::Relaxed) {
                        let off = r.below(SIZE as u64 - 10_000);
                        f.write_all_at(&vec![r.next() as u8; 1 + r.below(9_999) as usize], off)
                            .unwrap();
                    }
                });
            }
            {
                let (m, stop) = (&m, &stop);
                s.spawn(move || {
                    let f = OpenOptions::new().read(true).write(true).open(m.at("mm")).unwrap();
                    let map = Mapping::new(&f, SIZE);
                    let mut r = Rng(6);
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let off = r.below(SIZE as u64 - 5_000) as usize;
                        map.write(off, &vec![r.next() as u8; 1 + r.below(4_999) as usize]);
                        n += 1;
                        if n.is_multiple_of(16) {
                            map.sync();
                        }
                    }
                    map.sync();
                });
            }
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::Relaxed);
        });
        same_as_source(&m, "t", &format!("{args:?}"));
        same_as_source(&m, "mm", &format!("{args:?}"));
    }
}

#[test]
fn parallel_direct_writes_to_one_file_keep_the_cache_exact() {
    const SIZE: usize = 1 << 20;
    // Each write waits 0-300 µs between the source and the cache: without
    // the range locks, writers sharing a page then update the cache in
    // another order than the source (this test fails so).
    let args = ["--coherence", "ttl"];
    let Some(m) = Mount::with_env(&args, &[("RCUFS_FAULT", "cache-jitter:300")], |s| {
        write_tree(s, &[("p", &content(6, SIZE))])
    }) else {
        return;
    };
    assert_eq!(fs::read(m.at("p")).unwrap(), content(6, SIZE));
    let start = Instant::now();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // A sequential reader: its reads fill with readahead.
        let (mr, stop) = (&m, &stop);
        s.spawn(move || {
            let f = File::open(mr.at("p")).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let mut off = 0;
                while off < SIZE as u64 && !stop.load(Ordering::Relaxed) {
                    off += pread(&f, off, 64 << 10).len() as u64;
                }
            }
        });
        let writers: Vec<_> = (0..4u64)
            .map(|w| {
                let m = &m;
                s.spawn(move || {
                    let f = OpenOptions::new().read(true).write(true).open(m.at("p")).unwrap();
                    let mut r = Rng(1234 + w);
                    for i in 0..2000u64 {
                        // Overlapping ranges of every size, inside the file (the
                        // kernel sends these in parallel), most of them in its
                        // first 8 pages so that they meet often; reads between.
                        let len = 1 + r.below(3 * 4096) as usize;
                        let span = if i % 8 == 0 { SIZE } else { 8 * 4096 };
                        let off = r.below((span - len) as u64);
                        f.write_all_at(&vec![(w * 64 + i % 64) as u8; len], off).unwrap();
                        if i % 4 == 0 {
                            let _ = pread(&f, r.below(SIZE as u64), 8192);
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("8,000 parallel writes took {:?}", start.elapsed());
    same_as_source(&m, "p", "parallel direct writes");
}

#[test]
fn a_cp_through_the_mount_leaves_both_files_cached() {
    // GNU cp copies with copy_file_range, which rcufs has the source do and
    // then caches as a write of the same bytes (seed 001's `cp -r 1 2`).
    let len = 3 * 4096 * 50 + 777;
    let Some(m) = Mount::with(&["--coherence", "ttl"], |s| {
        write_tree(s, &[("from", &content(7, len))])
    }) else {
        return;
    };
    let st = std::process::Command::new("cp")
        .arg(m.at("from"))
        .arg(m.at("to"))
        .status()
        .unwrap();
    assert!(st.success(), "cp: {st}");
    assert_eq!(fs::read(m.src_at("to")).unwrap(), content(7, len));
    let (misses, fills) = (m.stat("pagecache", "misses"), m.stat("pagecache", "fills"));
    assert!(fills >= 2 * 151, "the copy cached both files' pages ({fills} fills)");
    assert_eq!(fs::read(m.at("to")).unwrap(), content(7, len));
    assert_eq!(fs::read(m.at("from")).unwrap(), content(7, len));
    assert_eq!(m.stat("pagecache", "misses"), misses, "both read back without a miss");
    assert_eq!(m.stat("pagecache", "fills"), fills);
}

#[test]
fn a_read_after_a_write_returns_it_while_readahead_races_the_writes() {
    // A writer stamps increasing versions into the first 8 bytes of random
    // pages (partial-page writes: nothing is cached by write-through) and
    // publishes each version once its write has returned; sequential
    // readers (filling with readahead, the cache small enough to evict)
    // check that every page shows at least the version published before
    // their read started. A fill that read a page before a write and
    // cached it after would show an older one: the page cache's generation
    // check (the folio is in the cache while it is filled) makes it drop
    // what it read. Each fill and write waits 0-300 µs
    // between the source and the cache (a debug-build fault), to widen the
    // window.
    const PAGES: usize = 256;
    use std::sync::atomic::AtomicU64;
    let args = ["--coherence", "ttl", "--page-cache-size", "512K"];
    let Some(m) = Mount::with_env(&args, &[("RCUFS_FAULT", "cache-jitter:300")], |s| {
        write_tree(s, &[("v", &vec![0u8; PAGES * 4096])])
    }) else {
        return;
    };
    let published: Vec<AtomicU64> = (0..PAGES).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (m, stop, published) = (&m, &stop, &published);
            s.spawn(move || {
                let f = File::open(m.at("v")).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    for chunk in 0..PAGES / 16 {
                        let floor: Vec<u64> = (chunk * 16..chunk * 16 + 16)
                            .map(|p| published[p].load(Ordering::SeqCst))
                            .collect();
                        let got = pread(&f, (chunk * 16 * 4096) as u64, 16 * 4096);
                        for (k, page) in got.chunks(4096).enumerate() {
                            let v = u64::from_le_bytes(page[..8].try_into().unwrap());
                            assert!(
                                v >= floor[k],
                                "reader {t}: page {} shows version {v}, older than {} written before the read",
                                chunk * 16 + k,
                                floor[k]
                            );
                        }
                    }
                }
            });
        }
        let f = OpenOptions::new().write(true).open(m.at("v")).unwrap();
        let mut r = Rng(42);
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut version = 0u64;
        while Instant::now() < deadline {
            version += 1;
            let p = r.below(PAGES as u64) as usize;
            f.write_all_at(&version.to_le_bytes(), (p * 4096) as u64).unwrap();
            published[p].store(version, Ordering::SeqCst);
        }
        stop.store(true, Ordering::Relaxed);
    });
}

/// The CPU time, in clock ticks (`utime + stime`), of the daemon's FUSE
/// worker threads (named `fuser-N`).
fn workers_ticks(pid: i32) -> u64 {
    threads_named(pid, "fuser-")
        .iter()
        .map(|dir| {
            let stat = fs::read_to_string(dir.join("stat")).unwrap_or_default();
            // After the `(comm)`: field 3 (state) comes first; utime is 14, stime 15.
            let rest = &stat[stat.rfind(')').expect("comm") + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
        })
        .sum()
}

/// `--poll-us`: after a request, one worker keeps polling for the next one
/// for the window instead of sleeping at once. So requests 2 ms apart keep
/// a worker with a 10 ms window busy (it never gets to sleep), while without
/// polling the same requests cost the workers almost nothing; once the
/// requests stop, the polling worker sleeps (an idle mount costs no CPU).
/// The bytes read are exact either way, in both modes.
#[test]
fn a_polling_worker_stays_busy_between_requests_and_sleeps_when_they_stop() {
    let data = content(7, LEN);
    let mut busy_without = None;
    for (poll, mode) in [("0", MODES[0]), ("10000", MODES[0]), ("10000", MODES[1])] {
        let mut args = vec!["--poll-us", poll];
        args.extend_from_slice(mode);
        let Some(m) = Mount::with(&args, |src| fs::write(src.join("f"), &data).unwrap()) else {
            return;
        };
        let f = File::open(m.at("f")).unwrap();
        for &(off, len) in RANGES {
            assert_eq!(
                pread(&f, off, len),
                expect(&data, off, len),
                "{args:?}: {len} bytes at {off}"
            );
        }
        let direct = open_direct(&m.at("f"));
        let mut buf = AlignedPage([0; 4096]);
        let (t0, start) = (workers_ticks(m.pid()), Instant::now());
        for i in 0..300u64 {
            let off = (i * 7919 % 256) * 4096;
            let n = direct.read_at(&mut buf.0, off).expect("pread");
            assert_eq!(&buf.0[..n], expect(&data, off, 4096), "{args:?}: page at {off}");
            std::thread::sleep(Duration::from_millis(2));
        }
        let busy = workers_ticks(m.pid()) - t0;
        let wall_ticks = start.elapsed().as_millis() as u64 / 10;
        if poll == "0" {
            busy_without = Some(busy);
            assert!(
                busy * 4 < wall_ticks,
                "without polling, requests 2 ms apart kept the workers busy {busy} of {wall_ticks} ticks"
            );
        } else {
            let without = busy_without.expect("the control ran first");
            assert!(
                busy * 10 >= wall_ticks * 3 && busy >= 3 * without + 10,
                "{args:?}: a worker polling 10 ms after each request was busy only {busy} of {wall_ticks} ticks \
                 (without polling: {without})"
            );
        }
        // Idle: once the window has passed, the worker sleeps.
        std::thread::sleep(Duration::from_millis(200));
        let t0 = workers_ticks(m.pid());
        std::thread::sleep(Duration::from_secs(1));
        let idle = workers_ticks(m.pid()) - t0;
        assert!(idle <= 10, "{args:?}: idle workers used {idle} ticks of CPU in 1 s");
        drop((f, direct));
    }
}
