//! Operating a mount: `rcufs stats --format prometheus` and the daemon's
//! `/metrics` endpoint checked by Debian's `promtool check metrics` and
//! scraped by a real Prometheus server, and `rcufs warm` checked through the
//! mount's own hit counters.
//!
//! The Prometheus tools come from Debian's `prometheus` package (`cargo xtask
//! ci` installs it). Without them the tests that need them say so LOUDLY
//! (`SKIPPED: ...`) and return; with `RCUFS_REQUIRE_PROMETHEUS=1` (set by
//! `cargo xtask ci`) they fail instead.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::harness::{Mount, content, eventually, rcufs, wait_warm, write_tree};

fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The path of `name` (a tool of the `prometheus` package), or `None` after
/// a loud skip message; panics when `RCUFS_REQUIRE_PROMETHEUS=1`.
fn prometheus_tool(name: &str) -> Option<PathBuf> {
    if let Some(p) = tool(name) {
        return Some(p);
    }
    let why = format!(
        "`{name}` is not on PATH (install Debian's `prometheus` package: apt-get install --no-install-recommends prometheus)"
    );
    if std::env::var("RCUFS_REQUIRE_PROMETHEUS").is_ok_and(|v| v == "1") {
        panic!("RCUFS_REQUIRE_PROMETHEUS=1 but {why}");
    }
    eprintln!("\n********\nSKIPPED: {why}\n********\n");
    None
}

/// Runs `promtool check metrics` on `text`; panics with its findings unless
/// it accepts.
#[track_caller]
fn promtool_accepts(promtool: &Path, text: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics rejected the exposition ({}):\n{}{}\n--- the exposition:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    rcufs().args(args).env("RUST_LOG", "warn").output().expect("run rcufs")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "rcufs failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The value of the sample `name{mountpoint="mnt"}` in an exposition.
fn sample(text: &str, name: &str, mnt: &Path) -> Option<f64> {
    let prefix = format!("{name}{{mountpoint=\"{}\"}} ", mnt.display());
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().expect("a number"))
}

/// One HTTP/1.1 GET; returns the status line, the headers and the body.
fn http_get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).expect("UTF-8 answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// The address the daemon logged for its metrics endpoint.
fn metrics_addr(m: &Mount) -> SocketAddr {
    let mut found = None;
    let logged = eventually(Duration::from_secs(10), || {
        found = m.log_text().lines().find_map(|l| {
            let rest = l.split("serving metrics at http://").nth(1)?;
            rest.split("/metrics").next()?.parse().ok()
        });
        found.is_some()
    });
    assert!(logged, "the daemon did not log its metrics address:\n{}", m.log_text());
    found.unwrap()
}

fn a_workload(m: &Mount, files: usize) {
    for i in 0..files {
        assert_eq!(std::fs::read(m.at(&format!("f{i}"))).unwrap(), content(i, 10_000));
    }
}

fn files(src: &Path, n: usize) {
    for i in 0..n {
        std::fs::write(src.join(format!("f{i}")), content(i, 10_000)).unwrap();
    }
}

#[test]
fn stats_format_prometheus_passes_promtool_and_counts_the_workload() {
    let Some(m) = Mount::with(&[], |src| files(src, 4)) else {
        return;
    };
    a_workload(&m, 4);
    let out = run(&[
        "stats".as_ref(),
        "--format".as_ref(),
        "prometheus".as_ref(),
        m.mnt.as_os_str(),
    ]);
    let text = stdout(&out);
    let fills = m.stat("pagecache", "fills");
    // 4 files of 10,000 bytes: 3 pages each (the last one partial), in at
    // least one folio each.
    assert!(m.stat("pagecache", "pages") >= 12);
    assert!(fills >= 4, "fills {fills}");
    assert_eq!(
        sample(&text, "rcufs_pagecache_fills_total", &m.mnt),
        Some(fills as f64),
        "{text}"
    );
    assert!(text.contains("# TYPE rcufs_pagecache_fills_total counter"), "{text}");
    assert!(text.contains("# TYPE rcufs_pagecache_budget_bytes gauge"), "{text}");
    assert!(
        sample(&text, "rcufs_dcache_misses_total", &m.mnt).unwrap() >= 4.0,
        "{text}"
    );
    // Every section of the stats JSON is in the exposition.
    for section in m.stats().as_object().unwrap().keys() {
        assert!(
            text.contains(&format!("rcufs_{section}")),
            "no rcufs_{section}* in:\n{text}"
        );
    }
    let Some(promtool) = prometheus_tool("promtool") else {
        return;
    };
    promtool_accepts(&promtool, &text);
}

#[test]
fn metrics_endpoint_passes_promtool_and_ends_with_the_mount() {
    // Through the `-o` key, as an fstab line gives it.
    let Some(mut m) = Mount::with_env(&["-o", "metrics_listen=127.0.0.1:0"], &[("RUST_LOG", "info")], |src| {
        files(src, 2)
    }) else {
        return;
    };
    let addr = metrics_addr(&m);
    assert!(addr.ip().is_loopback(), "{addr}");
    a_workload(&m, 2);
    let (status, headers, body) = http_get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{headers}\n{body}");
    assert!(
        headers
            .lines()
            .any(|h| h.eq_ignore_ascii_case("content-type: text/plain; version=0.0.4")),
        "{headers}"
    );
    let fills = sample(&body, "rcufs_pagecache_fills_total", &m.mnt).expect("fills in the scrape");
    assert!(fills >= 2.0, "a folio or more per file read: {body}");
    // The endpoint and the CLI export the same names.
    let cli = stdout(&run(&[
        "stats".as_ref(),
        m.mnt.as_os_str(),
        "--format=prometheus".as_ref(),
    ]));
    let names = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("# TYPE"))
            .map(String::from)
            .collect()
    };
    assert_eq!(names(&body), names(&cli));
    assert_eq!(http_get(addr, "/").0, "HTTP/1.1 404 Not Found");
    if let Some(promtool) = prometheus_tool("promtool") {
        promtool_accepts(&promtool, &body);
    }
    // The listener ends with the mount, and the daemon exits cleanly.
    let status = m.stop_with(libc::SIGTERM);
    assert!(status.success(), "{status}: {}", m.log_text());
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "{addr} still accepts connections after the unmount"
    );
}

#[test]
fn a_non_loopback_metrics_address_is_refused_before_mounting() {
    let Some(m) = Mount::start(&[]) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = run(&[
        "mount".as_ref(),
        m.src.as_os_str(),
        mnt.as_os_str(),
        "--metrics-listen".as_ref(),
        "0.0.0.0:0".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("not a loopback address") && err.contains("--metrics-allow-remote"),
        "{err}"
    );
    assert!(
        crate::harness::any_mount_at(&mnt).is_none(),
        "a mount was left at {}",
        mnt.display()
    );
}

/// A Prometheus server of our own (never the package's service), on a free
/// loopback port with its storage in a temporary directory; killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &Path, target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: rcufs\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let log = dir.path().join("prometheus.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of an instant query that returns one sample, if it does.
    fn query_one(&self, query: &str) -> Option<f64> {
        let encoded: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET /api/v1/query?query={encoded} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).ok()?;
        let raw = String::from_utf8_lossy(&raw);
        let (_, body) = raw.split_once("\r\n\r\n")?;
        // The body may be chunked; the JSON object is between the first `{`
        // and the last `}`.
        let json = &body[body.find('{')?..=body.rfind('}')?];
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let result = v["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("prometheus log:\n{}", self.log_text());
        }
    }
}

#[test]
fn a_real_prometheus_scrapes_a_counter_the_workload_moved() {
    let Some(prometheus) = prometheus_tool("prometheus") else {
        return;
    };
    let Some(m) = Mount::with_env(&["--metrics-listen", "127.0.0.1:0"], &[("RUST_LOG", "info")], |src| {
        files(src, 8)
    }) else {
        return;
    };
    let addr = metrics_addr(&m);
    let server = Prometheus::start(&prometheus, addr);
    let mnt = m.mnt.display().to_string();
    let query = format!("rcufs_pagecache_fills_total{{job=\"rcufs\",mountpoint=\"{mnt}\"}}");
    // Before the workload: scraped, and nothing filled yet.
    let mut seen = None;
    let scraped = eventually(Duration::from_secs(90), || {
        seen = server.query_one(&query);
        seen.is_some()
    });
    assert!(
        scraped,
        "Prometheus never returned {query}; its log:\n{}",
        server.log_text()
    );
    assert_eq!(seen, Some(0.0), "nothing was read yet");
    a_workload(&m, 8);
    let fills = m.stat("pagecache", "fills");
    assert!(fills >= 8, "a folio or more per file read: fills {fills}");
    let moved = eventually(Duration::from_secs(60), || {
        seen = server.query_one(&query);
        seen == Some(fills as f64)
    });
    assert!(
        moved,
        "Prometheus answered {seen:?} for {query}, the mount counts {fills}; its log:\n{}",
        server.log_text()
    );
    // And the scrape itself was healthy.
    let up = server.query_one(&format!("up{{job=\"rcufs\",instance=\"{addr}\"}}"));
    assert_eq!(up, Some(1.0));
}

/// `n` files of varied sizes under `root` in a few directories; returns
/// their paths relative to `root`, sorted.
fn warm_tree(root: &Path, n: usize, size: impl Fn(usize) -> usize) -> Vec<String> {
    let mut names: Vec<String> = (0..n).map(|i| format!("d{}/s{}/file{i:03}", i % 3, i % 2)).collect();
    names.sort();
    let owned: Vec<(String, Vec<u8>)> = names
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), content(i, size(i))))
        .collect();
    let files: Vec<(&str, &[u8])> = owned.iter().map(|(p, c)| (p.as_str(), c.as_slice())).collect();
    write_tree(root, &files);
    names
}

fn warm(args: &[&str], dir: &Path) -> String {
    let mut all: Vec<&std::ffi::OsStr> = vec!["warm".as_ref()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    all.push(dir.as_os_str());
    stdout(&run(&all))
}

#[test]
fn warm_turns_the_next_read_of_a_cold_tree_into_hits() {
    let mut names = Vec::new();
    let Some(m) = Mount::with(&[], |src| names = warm_tree(src, 40, |i| i * 1500)) else {
        return;
    };
    let before = m.stats();
    let summary = warm(&["--all", "--jobs", "3"], &m.mnt);
    assert!(!summary.contains("budget reached"), "{summary}");
    assert!(summary.contains("of 40 of 40 files"), "{summary}");
    let warmed = m.stats();
    assert!(
        warmed["pagecache"]["fills"].as_u64() > before["pagecache"]["fills"].as_u64(),
        "{summary}"
    );
    assert_eq!(warmed["pagecache"]["evictions"], 0);

    // Every entry and every page read now is a hit.
    let (dhits, dmisses) = (m.stat("dcache", "hits"), m.stat("dcache", "misses"));
    let (phits, pmisses, pfills) = (
        m.stat("pagecache", "hits"),
        m.stat("pagecache", "misses"),
        m.stat("pagecache", "fills"),
    );
    for (i, rel) in names.iter().enumerate() {
        assert_eq!(std::fs::read(m.at(rel)).unwrap(), content(i, i * 1500), "{rel}");
    }
    let after = m.stats();
    assert_eq!(
        after["pagecache"]["misses"].as_u64(),
        Some(pmisses),
        "a read after the warm missed: {after}"
    );
    assert_eq!(after["pagecache"]["fills"].as_u64(), Some(pfills), "{after}");
    let page_hits = after["pagecache"]["hits"].as_u64().unwrap() - phits;
    // At least one page per file: the read of the whole tree went through
    // the page cache and found everything.
    assert!(
        page_hits >= names.len() as u64,
        "{page_hits} hits for {} files",
        names.len()
    );
    assert_eq!(
        after["dcache"]["misses"].as_u64(),
        Some(dmisses),
        "a lookup after the warm missed: {after}"
    );
    assert!(after["dcache"]["hits"].as_u64().unwrap() > dhits);
}

#[test]
fn warm_stops_at_the_page_budget_and_evicts_nothing_it_warmed() {
    // 64 pages of budget; 30 files of 16 KiB cost 5 pages each (150).
    let mut names = Vec::new();
    let Some(m) = Mount::with(&["--page-cache-size", "256K"], |src| {
        names = warm_tree(src, 30, |_| 16384)
    }) else {
        return;
    };
    let summary = warm(&["--pages"], &m.mnt);
    let budget_line = "page cache budget reached after ";
    let at = summary
        .find(budget_line)
        .unwrap_or_else(|| panic!("warm did not say it stopped: {summary}"));
    let number = |s: &str| -> u64 { s.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap() };
    let read = number(&summary[at + budget_line.len()..]);
    let not_warmed = number(summary.split(": ").last().unwrap());
    assert_eq!(read + not_warmed, 30, "{summary}");
    // As many whole files as fit in 64 pages at 5 pages each.
    assert_eq!(read, 64 / 5, "{summary}");
    let stats = m.stats();
    assert_eq!(
        stats["pagecache"]["evictions"], 0,
        "the warm made the cache evict: {stats}"
    );
    assert_eq!(stats["pagecache"]["pages"].as_u64(), Some(read * 5), "{stats}");
    assert!(stats["pagecache"]["bytes_cached"].as_u64() <= stats["pagecache"]["budget_bytes"].as_u64());

    // The files it warmed (the first ones in path order) are all still
    // cached: reading them misses nothing.
    let misses = m.stat("pagecache", "misses");
    for (i, rel) in names.iter().take(read as usize).enumerate() {
        assert_eq!(std::fs::read(m.at(rel)).unwrap(), content(i, 16384), "{rel}");
    }
    assert_eq!(m.stat("pagecache", "misses"), misses, "a warmed page was gone");
    assert_eq!(m.stat("pagecache", "evictions"), 0);
}

#[test]
fn warm_rejects_what_is_not_an_rcufs_directory() {
    let Some(m) = Mount::with(&[], |src| write_tree(src, &[("f", b"x")])) else {
        return;
    };
    let out = run(&["warm".as_ref(), m.at("f").as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
    let out = run(&["warm".as_ref(), m.src.as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not on an rcufs mount"));
}

#[test]
fn xattr_warm_walks_the_source_and_the_next_read_is_all_hits() {
    let mut names = Vec::new();
    let Some(m) = Mount::with(&[], |src| names = warm_tree(src, 40, |i| i * 1500)) else {
        return;
    };
    crate::sys::setxattr(&m.mnt, fuse_fs::protocol::XATTR_WARM, b"all", 0).expect("setxattr user.rcufs.warm");
    let s = wait_warm(&m, 1);
    // 40 files in d0..d2, each with s0 and s1: 9 directories below the root.
    assert_eq!(s["warm"]["entries"], 49, "{s}");
    assert_eq!(s["warm"]["files"], 40, "{s}");
    assert_eq!(s["warm"]["budget_stops"], 0, "{s}");
    assert_eq!(s["warm"]["errors"], 0, "{s}");
    let expected_pages: u64 = (0..40).map(|i| (i * 1500) as u64 / 4096 + 1).sum();
    assert_eq!(s["warm"]["pages"].as_u64(), Some(expected_pages), "{s}");
    assert_eq!(s["pagecache"]["pages"].as_u64(), Some(expected_pages), "{s}");

    let (pmisses, pfills, dmisses) = (
        m.stat("pagecache", "misses"),
        m.stat("pagecache", "fills"),
        m.stat("dcache", "misses"),
    );
    for (i, rel) in names.iter().enumerate() {
        assert_eq!(std::fs::read(m.at(rel)).unwrap(), content(i, i * 1500), "{rel}");
    }
    let after = m.stats();
    assert_eq!(
        after["pagecache"]["misses"].as_u64(),
        Some(pmisses),
        "a read after the warm missed: {after}"
    );
    assert_eq!(after["pagecache"]["fills"].as_u64(), Some(pfills), "{after}");
    assert_eq!(
        after["dcache"]["misses"].as_u64(),
        Some(dmisses),
        "a lookup after the warm missed: {after}"
    );
    // The counters reach the exposition without any change to the exporter.
    let text = stdout(&run(&[
        "stats".as_ref(),
        "--format=prometheus".as_ref(),
        m.mnt.as_os_str(),
    ]));
    assert_eq!(sample(&text, "rcufs_warm_files_total", &m.mnt), Some(40.0), "{text}");
}

#[test]
fn xattr_warm_stops_at_the_page_budget_and_refuses_bad_requests() {
    let Some(m) = Mount::with(&["--page-cache-size", "256K", "-o", "allow_other"], |src| {
        warm_tree(src, 30, |_| 16384);
    }) else {
        return;
    };
    let name = fuse_fs::protocol::XATTR_WARM;
    let errno = |r: std::io::Result<()>| r.err().and_then(|e| e.raw_os_error());
    assert_eq!(errno(crate::sys::setxattr(&m.mnt, name, b"9", 0)), Some(libc::EINVAL));
    assert_eq!(
        errno(crate::sys::setxattr(&m.at("d0/s0/file000"), name, b"all", 0)),
        Some(libc::ENOTDIR)
    );
    if crate::harness::can_switch_users() {
        std::fs::set_permissions(m.src_at("d0"), std::fs::Permissions::from_mode(0o777)).unwrap();
        // The filesystem answers EPERM (root and the mount's owner only);
        // the kernel may refuse first with EACCES (as for the drop xattr).
        let by_nobody = crate::sys::setxattr_as(65534, 65534, &m.at("d0"), name, b"all");
        assert!(matches!(by_nobody, Err(libc::EPERM | libc::EACCES)), "{by_nobody:?}");
    }
    crate::sys::setxattr(&m.mnt, name, b"pages", 0).unwrap();
    let s = wait_warm(&m, 1);
    assert_eq!(s["warm"]["budget_stops"], 1, "{s}");
    // 64 pages of budget, 5 per file: 12 files, and nothing evicted.
    assert_eq!(s["warm"]["files"], 12, "{s}");
    assert_eq!(s["warm"]["pages"], 60, "{s}");
    assert_eq!(s["pagecache"]["pages"], 60, "{s}");
    assert_eq!(s["pagecache"]["evictions"], 0, "{s}");
    assert_eq!(s["warm"]["requests"], 1, "the refused requests were not queued: {s}");
}

#[test]
fn xattr_warm_pages_never_hide_a_later_change_in_the_source() {
    let Some(m) = Mount::with(&[], |src| write_tree(src, &[("d/f", &content(1, 9000))])) else {
        return;
    };
    crate::sys::setxattr(&m.mnt, fuse_fs::protocol::XATTR_WARM, b"all", 0).unwrap();
    let s = wait_warm(&m, 1);
    assert_eq!(s["warm"]["files"], 1, "{s}");
    // Changed directly in the source after the warm: same size, new bytes.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(m.src_at("d/f"), content(2, 9000)).unwrap();
    assert_eq!(
        std::fs::read(m.at("d/f")).unwrap(),
        content(2, 9000),
        "the warmed pages hid the change"
    );
}

#[test]
fn xattr_warms_concurrent_with_drops_and_reads_stay_correct() {
    let mut names = Vec::new();
    let Some(m) = Mount::with(&["--page-cache-size", "1M"], |src| {
        names = warm_tree(src, 120, |i| 500 + i * 97)
    }) else {
        return;
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, rel) in names.iter().enumerate().step_by(7) {
                    assert_eq!(std::fs::read(m.at(rel)).unwrap(), content(i, 500 + i * 97), "{rel}");
                }
            }
        });
        for round in 0..30 {
            let r = crate::sys::setxattr(&m.mnt, fuse_fs::protocol::XATTR_WARM, b"all", 0);
            assert!(
                r.is_ok() || r.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EBUSY),
                "round {round}: {r:?}"
            );
            let mode = if round % 2 == 0 {
                b"3".as_slice()
            } else {
                b"1".as_slice()
            };
            crate::sys::setxattr(&m.at("d1"), fuse_fs::protocol::XATTR_DROP, mode, 0).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let requests = m.stat("warm", "requests");
    let s = wait_warm(&m, requests);
    assert!(s["warm"]["busy_refusals"].as_u64().unwrap() + requests == 30, "{s}");
    assert!(
        s["pagecache"]["bytes_cached"].as_u64() <= s["pagecache"]["budget_bytes"].as_u64(),
        "{s}"
    );
    for (i, rel) in names.iter().enumerate() {
        assert_eq!(std::fs::read(m.at(rel)).unwrap(), content(i, 500 + i * 97), "{rel}");
    }
}
