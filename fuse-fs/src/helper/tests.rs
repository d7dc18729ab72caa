use std::ffi::OsString;
use std::path::Path;

use super::*;

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn helper_argv_as_mount_8_passes_it() {
    let h = parse_args(&os(&[
        "/src",
        "/mnt",
        "-sfnv",
        "-o",
        "ro,threads=2",
        "-t",
        "fuse.rcufs",
    ]))
    .unwrap();
    assert_eq!(
        h,
        HelperArgs {
            spec: "/src".into(),
            dir: "/mnt".into(),
            sloppy: true,
            fake: true,
            no_mtab: true,
            verbose: true,
            options: vec!["ro,threads=2".into()],
            namespace: None,
            fstype: Some("fuse.rcufs".into()),
        }
    );
    // Glued values, separate flags, options before the positionals.
    let h = parse_args(&os(&[
        "-n",
        "-oallow_other",
        "/s",
        "-o",
        "kernel_cache",
        "/m",
        "-N",
        "123",
    ]))
    .unwrap();
    assert_eq!(h.options, ["allow_other", "kernel_cache"]);
    assert!(h.no_mtab && !h.fake && !h.sloppy && !h.verbose);
    assert_eq!(h.namespace.as_deref(), Some("123"));
    assert_eq!((h.spec.as_os_str(), h.dir.as_os_str()), ("/s".as_ref(), "/m".as_ref()));
    assert!(parse_args(&os(&["/s"])).unwrap_err().contains("SOURCE and MOUNTPOINT"));
    assert!(parse_args(&os(&["/s", "/m", "-x"])).unwrap_err().contains("-x"));
    assert!(
        parse_args(&os(&["/s", "/m", "-o"]))
            .unwrap_err()
            .contains("-o needs a value")
    );
}

#[test]
fn helper_names() {
    assert!(invoked_as_helper("/sbin/mount.fuse.rcufs".as_ref()));
    assert!(invoked_as_helper("mount.rcufs".as_ref()));
    assert!(!invoked_as_helper("/usr/local/bin/rcufs".as_ref()));
    assert!(!invoked_as_helper("mountrcufs".as_ref()));
}

#[test]
fn log_names_escape_like_systemd() {
    assert_eq!(escape_path(Path::new("/")), "-");
    assert_eq!(escape_path(Path::new("/mnt/data")), "mnt-data");
    assert_eq!(escape_path(Path::new("/mnt/my-data/")), "mnt-my\\x2ddata");
    assert_eq!(escape_path(Path::new("/srv/a b/.x")), "srv-a\\x20b-.x");
    assert_eq!(escape_path(Path::new("/.hidden")), "\\x2ehidden");
    assert_eq!(
        default_log_path(Path::new("/no/such/dir")),
        Path::new("/var/log/rcufs/no-such-dir.log")
    );
}
