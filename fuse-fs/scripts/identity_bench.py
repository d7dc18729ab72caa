"""What acting as the caller costs: two rcufs binaries ("old" and "new")
each serve a source with `-o allow_other`; per round, interleaved, root and
uid 65534 run three loops on each mount (4 KiB pwrite, create+close+unlink,
open+close) and the script prints the median microseconds per operation and
the new/old ratios. Run as root:

    python3 fuse-fs/scripts/identity_bench.py OLD_RCUFS NEW_RCUFS [rcufs mount args...]

ROUNDS (environment, default 9) sets the number of rounds.
"""
import os, subprocess, sys, time, tempfile, statistics, shutil
BINS = {"old": sys.argv[1], "new": sys.argv[2]}
sys.argv[1:] = sys.argv[3:]
ROUNDS = int(os.environ.get("ROUNDS", "9"))
mounts = {}
procs = []
for tag, binp in BINS.items():
    base = tempfile.mkdtemp(prefix="idperf-" + tag)
    os.chmod(base, 0o755)
    src, mnt = base + "/src", base + "/mnt"
    os.mkdir(src); os.mkdir(mnt)
    os.mkdir(src + "/pub"); os.chmod(src + "/pub", 0o777)
    with open(src + "/pub/existing", "wb") as f: f.write(b"x" * 4096)
    os.chmod(src + "/pub/existing", 0o666)
    log = open(base + "/log", "w")
    procs.append(subprocess.Popen([binp, "mount", src, mnt, "-o", "allow_other"] + sys.argv[1:], stdout=log, stderr=log))
    mounts[tag] = (base, mnt)
for tag, (base, mnt) in mounts.items():
    for _ in range(200):
        if os.path.ismount(mnt): break
        time.sleep(0.05)
def as_user(uid):
    def pre():
        if uid:
            os.setgroups([]); os.setgid(uid); os.setuid(uid)
    return pre
WRITE = r'''
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o666)
buf = b"y" * 4096
t = time.perf_counter()
for i in range(int(sys.argv[2])):
    os.pwrite(fd, buf, (i % 256) * 4096)
print(time.perf_counter() - t)
'''
CREATE = r'''
import os, sys, time
d = sys.argv[1]; n = int(sys.argv[2])
t = time.perf_counter()
for i in range(n):
    p = "%s/f%d" % (d, i)
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    os.unlink(p)
print(time.perf_counter() - t)
'''
OPEN = r'''
import os, sys, time
p = sys.argv[1]; n = int(sys.argv[2])
t = time.perf_counter()
for i in range(n):
    os.close(os.open(p, os.O_RDONLY))
print(time.perf_counter() - t)
'''
WL = [("write 4 KiB x10000", WRITE, lambda m, u: [m + "/pub/w%d" % u, "10000"], 10000),
      ("create+close+unlink x1000", CREATE, lambda m, u: [m + "/pub", "1000"], 1000),
      ("open+close x2000", OPEN, lambda m, u: [m + "/pub/existing", "2000"], 2000)]
def run(script, args, uid):
    out = subprocess.run(["/usr/bin/python3", "-c", script] + args, preexec_fn=as_user(uid), capture_output=True, text=True, cwd="/")
    if out.returncode: print(out.stderr); raise SystemExit(1)
    return float(out.stdout)
res = {}
try:
    for rnd in range(ROUNDS):
        for tag in ("old", "new"):
            for uid in (0, 65534):
                for name, script, args, n in WL:
                    res.setdefault((name, tag, uid), []).append(run(script, args(mounts[tag][1], uid), uid) / n * 1e6)
    mode = " ".join(sys.argv[1:]) or "default"
    print(f"mode {mode}, {ROUNDS} interleaved rounds, median us per operation")
    for name, *_ in WL:
        m = {k: statistics.median(res[(name,) + k]) for k in [("old", 0), ("old", 65534), ("new", 0), ("new", 65534)]}
        print(f"{name}: old root {m[('old',0)]:.1f}, new root {m[('new',0)]:.1f} (new/old {m[('new',0)]/m[('old',0)]:.2f}); "
              f"old nobody {m[('old',65534)]:.1f}, new nobody {m[('new',65534)]:.1f} (new/old {m[('new',65534)]/m[('old',65534)]:.2f})")
finally:
    for tag, (base, mnt) in mounts.items():
        subprocess.run(["umount", mnt])
    for p in procs: p.wait(timeout=20)
    for tag, (base, mnt) in mounts.items(): shutil.rmtree(base)
