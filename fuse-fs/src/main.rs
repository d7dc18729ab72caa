//! `rcufs`: the command line of the passthrough filesystem (skeleton).

fn main() -> anyhow::Result<()> {
    anyhow::bail!("rcufs is not built yet: the filesystem does not exist in this revision")
}
