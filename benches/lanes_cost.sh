#!/bin/bash
# What the lanes cost a request, in instructions (BENCHMARKS.md, "What the
# lanes cost a request"): a release rcufs under callgrind serving 500 stats,
# with or without another rcufs mount bound under its source.
#
#   cargo build --release -p fuse-fs
#   benches/lanes_cost.sh without d   # no filesystem under the source
#   benches/lanes_cost.sh with d      # one under it, stats outside it
#   benches/lanes_cost.sh with sub    # stats in it (its lane)
#
# Needs root (mounts) and valgrind; prints callgrind_annotate's inclusive
# counts of the lanes' functions. Leaves nothing mounted.
set -euo pipefail
mode=${1:?with or without}
dir=${2:?d or sub}
R=$(cd "$(dirname "$0")/.." && pwd)/target/release/rcufs
W=$(mktemp -d)
mkdir -p "$W"/inner_src "$W"/inner_mnt "$W"/src/sub "$W"/src/d "$W"/mnt
for i in $(seq 0 999); do echo x > "$W/src/d/f$i"; done
for i in $(seq 0 99); do echo y > "$W/inner_src/g$i"; done
inner=
out=
cleanup() {
    umount "$W/mnt" 2>/dev/null || umount -l "$W/mnt" 2>/dev/null || true
    umount -l "$W/src/sub" 2>/dev/null || true
    umount "$W/inner_mnt" 2>/dev/null || umount -l "$W/inner_mnt" 2>/dev/null || true
    # A daemon that had not mounted yet is ended, not waited for.
    if [ -n "$out" ]; then kill "$out" 2>/dev/null || true; fi
    if [ -n "$inner" ]; then kill "$inner" 2>/dev/null || true; fi
    wait
    rm -rf "$W"
}
trap cleanup EXIT
mounted() {
    for _ in $(seq "$2"); do mountpoint -q "$1" && return 0; sleep 0.1; done
    echo "lanes_cost: nothing mounted on $1" >&2
    exit 1
}
"$R" mount "$W/inner_src" "$W/inner_mnt" --threads 2 >/dev/null 2>&1 &
inner=$!
mounted "$W/inner_mnt" 100
if [ "$mode" = with ]; then mount --bind "$W/inner_mnt" "$W/src/sub"; fi
valgrind --tool=callgrind --callgrind-out-file="$W/cg.out" "$R" mount "$W/src" "$W/mnt" --threads 2 >/dev/null 2>&1 &
out=$!
mounted "$W/mnt" 600
/usr/bin/python3 - "$W/mnt/$dir" <<'PY'
import os, sys
d = sys.argv[1]
names = [os.path.join(d, n) for n in sorted(os.listdir(d))][:100]
for _ in range(5):
    for p in names:
        os.stat(p)
PY
umount "$W/mnt"
wait "$out" || true
out=
callgrind_annotate --inclusive=yes --tree=calling "$W/cg.out" 2>/dev/null |
    grep -E "PROGRAM TOTALS|>.*(Lanes<T>::enter|Lanes<T>::next|run_lane|lanes::<impl fuse_fs::fs::Fs>::lane|RequestWithSender::dispatch) " |
    sort -u
