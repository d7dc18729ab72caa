//! The `-o` spellings of the `rcufs mount` options, in one place.
//!
//! mount(8), fstab and systemd mount units pass every option as one
//! comma-separated `-o` list, so each `rcufs mount` flag has an `-o` key:
//! the flag's long name with `_` for `-` (`--dcache-entries 10` is
//! `-o dcache_entries=10`, `--kernel-cache` is `-o kernel_cache`). The keys
//! are read from the clap definition of `rcufs mount` itself ([`keys`]), and
//! [`expand`] rewrites each rcufs key into its flag before clap parses the
//! command line, so a key and its flag go through the same parser and give
//! identical results by construction (`cli/tests.rs` checks it for every
//! key). Later options win over earlier ones, flags and keys alike
//! (`args_override_self`), as mount(8) expects of `-o ro,rw`.
//!
//! A new mount flag gets its key with no change here: `--coherence MODE`
//! becomes `coherence=MODE` and `--metrics-listen ADDR` becomes
//! `metrics_listen=ADDR` as soon as the flags exist. Only a flag that must
//! have no key goes into [`NO_KEY`]. (The identity test in `cli/tests.rs`
//! asks for a sample value of each new key.)
//!
//! Everything else in the list is, in this order: an option mount(8) or
//! fstab carries for itself ([`IGNORED`], [`IGNORED_PREFIXES`]: `defaults`,
//! `nofail`, `_netdev`, `noauto`, `user`, `x-systemd.*`, ...), accepted and
//! dropped; a FUSE option rcufs knows (`allow_other`, `ro`, ...), passed on
//! as `-o`; or an error naming the key and listing the known ones (dropped
//! with a note instead when the mount helper runs with `-s`, sloppy).
//! Values cannot contain a comma, as in fstab.

use std::ffi::OsString;

use clap::CommandFactory;

use crate::cli::Cli;

/// Flags of `rcufs mount` that have no `-o` key.
pub const NO_KEY: &[&str] = &["help"];

/// Options that mount(8), fstab or systemd use for themselves; an `-o` list
/// may carry them and rcufs ignores them.
pub const IGNORED: &[&str] = &[
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "nouser", "users", "owner", "group", "loud", "silent",
];

/// Prefixes of options rcufs ignores for the same reason (`x-systemd.*`,
/// `x-gvfs-show`, `comment=...`).
pub const IGNORED_PREFIXES: &[&str] = &["x-", "comment="];

/// One `-o` key of an `rcufs mount` flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The key (`dcache_entries`).
    pub key: String,
    /// The flag's long name (`dcache-entries`).
    pub long: String,
    /// Whether it takes a value (`key=value`) or is a switch (`key`).
    pub takes_value: bool,
}

/// The `-o` keys, one per long flag of `rcufs mount` (but [`NO_KEY`]),
/// read from its clap definition.
pub fn keys() -> Vec<Key> {
    let cmd = Cli::command();
    let mount = cmd.find_subcommand("mount").expect("rcufs has a mount subcommand");
    mount
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            if NO_KEY.contains(&long) || arg.get_short() == Some('o') {
                return None;
            }
            Some(Key {
                key: long.replace('-', "_"),
                long: long.to_string(),
                takes_value: arg.get_action().takes_values(),
            })
        })
        .collect()
}

/// What [`expand`] made of an `rcufs mount` command line.
#[derive(Debug, Default)]
pub struct Expanded {
    /// The command line for clap.
    pub args: Vec<OsString>,
    /// Options dropped because the caller asked for sloppy parsing (`-s`).
    pub dropped: Vec<String>,
    /// Each flag that came from an `-o` key: `(--flag, key[=value])`.
    pub origins: Vec<(String, String)>,
}

impl Expanded {
    /// A note naming the `-o` option behind the flag a clap error names
    /// (`invalid value '0' for '--threads <N>'` came from `threads=0`).
    pub fn origin_note(&self, error: &str) -> Option<String> {
        self.origins
            .iter()
            .rev()
            .find(|(flag, _)| error.contains(&format!("'{flag}")))
            .map(|(_, item)| format!("(given as the mount option `{item}`)"))
    }
}

/// Rewrites the `-o` lists of an `rcufs mount` command line (`args[0]` is
/// the program, `args[1]` the subcommand): rcufs keys become their flags in
/// place, ignored options disappear, FUSE options stay as `-o`. Any other
/// command line is returned unchanged. `sloppy` drops unknown options
/// instead of failing (mount(8)'s `-s`).
pub fn expand(args: Vec<OsString>, sloppy: bool) -> Result<Expanded, String> {
    let mut out = Expanded::default();
    if args.get(1).is_none_or(|a| a != "mount") {
        out.args = args;
        return Ok(out);
    }
    let keys = keys();
    let mut it = args.into_iter();
    out.args.extend(it.by_ref().take(2));
    while let Some(arg) = it.next() {
        if arg == "--" {
            out.args.push(arg);
            out.args.extend(it.by_ref());
            break;
        }
        let list = if arg == "-o" {
            match it.next() {
                Some(v) => v,
                None => return Err("-o needs a list of options".into()),
            }
        } else if let Some(rest) = arg.to_str().and_then(|a| a.strip_prefix("-o")) {
            OsString::from(rest.strip_prefix('=').unwrap_or(rest))
        } else {
            out.args.push(arg);
            continue;
        };
        let list = list
            .into_string()
            .map_err(|l| format!("mount options {l:?} are not UTF-8"))?;
        for item in list.split(',').filter(|i| !i.is_empty()) {
            expand_one(item, &keys, sloppy, &mut out)?;
        }
    }
    Ok(out)
}

fn expand_one(item: &str, keys: &[Key], sloppy: bool, out: &mut Expanded) -> Result<(), String> {
    let (name, value) = match item.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (item, None),
    };
    if let Some(k) = keys.iter().find(|k| k.key == name) {
        out.origins.push((format!("--{}", k.long), item.to_string()));
        match (k.takes_value, value) {
            (true, Some(v)) => out.args.push(format!("--{}={v}", k.long).into()),
            (true, None) => return Err(format!("mount option `{name}` needs a value: `{name}=...`")),
            (false, None) => out.args.push(format!("--{}", k.long).into()),
            (false, Some(_)) => return Err(format!("mount option `{name}` takes no value: write `{name}`")),
        }
    } else if IGNORED.contains(&item) || IGNORED_PREFIXES.iter().any(|p| item.starts_with(p)) {
        // mount(8)'s own business.
    } else if fuse_fs::FUSE_OPTIONS.contains(&item) {
        out.args.push("-o".into());
        out.args.push(item.into());
    } else if sloppy {
        out.dropped.push(item.to_string());
    } else {
        return Err(format!("unknown mount option `{name}`; {}", known(keys)));
    }
    Ok(())
}

/// The known options, for error messages.
pub fn known(keys: &[Key]) -> String {
    let rcufs: Vec<String> = keys
        .iter()
        .map(|k| {
            if k.takes_value {
                format!("{}=...", k.key)
            } else {
                k.key.clone()
            }
        })
        .collect();
    format!(
        "rcufs options: {}; FUSE options: {}; ignored: {}, {}",
        rcufs.join(", "),
        fuse_fs::FUSE_OPTIONS.join(", "),
        IGNORED.join(", "),
        IGNORED_PREFIXES
            .iter()
            .map(|p| format!("{p}*"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests;
