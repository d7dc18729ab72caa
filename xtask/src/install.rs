//! `cargo xtask install [--prefix DIR] [--sbin DIR] [--debug]`: builds
//! `rcufs` (release unless `--debug`) and installs it as `PREFIX/bin/rcufs`
//! (default prefix `/usr/local`), with the mount(8) helper links
//! `SBIN/mount.fuse.rcufs` and `SBIN/mount.rcufs` pointing at it (default
//! `/sbin`, the only place mount(8) looks for helpers). The binary is copied
//! to a temporary name and renamed into place, so a running daemon keeps its
//! old executable and the new one appears whole; existing links are
//! replaced. Prints what it installed and the one-line equivalent.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::mount::target_dir;
use crate::util::{cargo, run};

/// The helper names: `mount -t fuse.rcufs` runs `mount.fuse.rcufs`, a
/// plain `-t rcufs` runs `mount.rcufs`.
pub const HELPERS: [&str; 2] = ["mount.fuse.rcufs", "mount.rcufs"];

pub fn install(args: &[String]) -> Result<()> {
    let mut prefix = PathBuf::from("/usr/local");
    let mut sbin = PathBuf::from("/sbin");
    let mut debug = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--prefix" => prefix = it.next().context("--prefix needs a directory")?.into(),
            "--sbin" => sbin = it.next().context("--sbin needs a directory")?.into(),
            "--debug" => debug = true,
            other => bail!("install: unknown argument `{other}` (--prefix DIR, --sbin DIR, --debug)"),
        }
    }
    let mut build = cargo();
    build.args(["build", "--locked", "-p", "fuse-fs", "--bin", "rcufs"]);
    if !debug {
        build.arg("--release");
    }
    run(&mut build)?;
    let built = target_dir().join(if debug { "debug" } else { "release" }).join("rcufs");
    let bin = prefix.join("bin");
    let dest = bin.join("rcufs");
    fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    fs::create_dir_all(&sbin).with_context(|| format!("creating {}", sbin.display()))?;
    let tmp = bin.join(format!(".rcufs.install-{}", std::process::id()));
    fs::copy(&built, &tmp).with_context(|| format!("copying {} to {}", built.display(), tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, &dest).with_context(|| format!("installing {}", dest.display()))?;
    println!("installed {}", dest.display());
    for name in HELPERS {
        let link = sbin.join(name);
        replace_link(&dest, &link)?;
        println!("installed {} -> {}", link.display(), dest.display());
    }
    println!(
        "(by hand: install -m 755 {} {} && ln -sf {} {}/mount.fuse.rcufs)",
        built.display(),
        dest.display(),
        dest.display(),
        sbin.display()
    );
    Ok(())
}

/// Points `link` at `target`, replacing whatever link or file is there.
fn replace_link(target: &Path, link: &Path) -> Result<()> {
    let tmp = link.with_file_name(format!(
        ".{}.install-{}",
        link.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).with_context(|| format!("creating {}", tmp.display()))?;
    fs::rename(&tmp, link).with_context(|| format!("installing {}", link.display()))?;
    Ok(())
}
