//! Sources without kernel file handles (a FUSE or network filesystem; here
//! an rcufs mount serves as the source of another): inodes are reopened by
//! name through the bounded descriptor pool, so the daemon's descriptors stay
//! bounded however many inodes the kernel knows; renames through the mount
//! keep the names current, and a rename in the source makes the old inode
//! stale rather than wrong.

use std::fs;
use std::io::Read;

use crate::harness::{Mount, eventually};
use crate::sys::errno;

const DIRS: usize = 40;
const PER_DIR: usize = 50;
/// The upper daemon's descriptor limit: far fewer than the 2,000 inodes
/// the walk makes the kernel know.
const NOFILE: u64 = 512;

fn tree(src: &std::path::Path) {
    for d in 0..DIRS {
        let dir = src.join(format!("d{d:02}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..PER_DIR {
            fs::write(dir.join(format!("f{f:03}")), [d as u8, f as u8]).unwrap();
        }
    }
}

fn walk_stays_bounded(upper_args: &[&str]) {
    let Some(lower) = Mount::with(&[], tree) else { return };
    let Some(upper) = Mount::over_with_nofile(&lower.mnt, upper_args, NOFILE) else {
        return;
    };
    let mut seen = 0;
    // Keep what the walk finds referenced, as `find | xargs stat` would
    // have the kernel do: every directory stays open until the end.
    let mut open_dirs = Vec::new();
    for d in 0..DIRS {
        let dir = upper.at(&format!("d{d:02}"));
        open_dirs.push(fs::File::open(&dir).unwrap());
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            assert!(e.metadata().unwrap().is_file());
            seen += 1;
        }
        for f in [0, PER_DIR / 2, PER_DIR - 1] {
            assert_eq!(
                fs::read(upper.at(&format!("d{d:02}/f{f:03}"))).unwrap(),
                [d as u8, f as u8]
            );
        }
    }
    assert_eq!(seen, DIRS * PER_DIR);
    // The premise: the upper mount has no file handles for its source.
    assert!(
        upper.stat("inodes", "by_name") >= (DIRS * PER_DIR) as u64,
        "{}",
        upper.stats()
    );
    let known = upper.stat("inodes", "known");
    let fds = upper.stat("inodes", "open_fds");
    eprintln!("{upper_args:?}: {known} inodes known, {fds} descriptors open (limit {NOFILE})");
    assert!(
        fds < NOFILE,
        "{fds} descriptors for {known} inodes under a limit of {NOFILE}"
    );
    // A second pass still works (descriptors were evicted and reopened).
    for d in 0..DIRS {
        assert_eq!(
            fs::read(upper.at(&format!("d{d:02}/f{:03}", PER_DIR - 2))).unwrap(),
            [d as u8, (PER_DIR - 2) as u8]
        );
    }
    assert!(upper.stat("inodes", "open_fds") < NOFILE);
    drop(open_dirs);
    drop(upper);
}

#[test]
fn a_walk_over_a_source_without_handles_stays_under_the_descriptor_limit() {
    walk_stays_bounded(&[]);
}

#[test]
fn a_walk_over_a_source_without_handles_stays_under_the_descriptor_limit_with_kernel_cache() {
    walk_stays_bounded(&["--kernel-cache"]);
}

#[test]
fn renames_through_the_mount_and_in_the_source_without_handles() {
    let Some(lower) = Mount::with(&[], tree) else { return };
    let Some(upper) = Mount::over(&lower.mnt, &["--revalidate", "0.2"]) else {
        return;
    };
    assert_eq!(upper.stats()["coherence"]["mode"], "ttl");
    // Through the mount: the inode follows its new name, also once its
    // pooled descriptor is gone (a directory rename moves every name under it).
    assert_eq!(fs::read(upper.at("d00/f001")).unwrap(), [0, 1]);
    fs::rename(upper.at("d00"), upper.at("moved")).unwrap();
    fs::rename(upper.at("moved/f001"), upper.at("d01/renamed")).unwrap();
    let mut f = fs::File::open(upper.at("d01/renamed")).unwrap();
    let mut b = Vec::new();
    f.read_to_end(&mut b).unwrap();
    assert_eq!(b, [0, 1]);
    assert_eq!(fs::read(upper.at("moved/f002")).unwrap(), [0, 2]);
    // In the source: the old name now leads elsewhere or nowhere; the mount
    // notices (ESTALE inside, a fresh lookup) and never serves the wrong file.
    let attr_before = fs::metadata(upper.at("d02/f000")).unwrap();
    assert_eq!(attr_before.len(), 2);
    fs::rename(lower.at("d02/f000"), lower.at("d02/gone")).unwrap();
    fs::write(lower.at("d02/f000"), b"a different file").unwrap();
    assert!(
        eventually(std::time::Duration::from_secs(5), || {
            fs::read(upper.at("d02/f000")).is_ok_and(|b| b == b"a different file")
        }),
        "the new file under the old name never showed"
    );
    assert_eq!(fs::read(upper.at("d02/gone")).unwrap(), [2, 0]);
    // An open file keeps reading its own object after a rename in the source.
    let keep = fs::File::open(upper.at("d03/f003")).unwrap();
    fs::rename(lower.at("d03/f003"), lower.at("d03/elsewhere")).unwrap();
    let mut b = Vec::new();
    (&keep).read_to_end(&mut b).unwrap();
    assert_eq!(b, [3, 3]);
    assert!(eventually(std::time::Duration::from_secs(5), || errno(&fs::metadata(
        upper.at("d03/f003")
    )) == Some(
        libc::ENOENT
    )));
}
