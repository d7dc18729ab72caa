#!/usr/bin/env python3
"""Wall time of a drop of everything (mode 3, by ioctl) of a directory
holding 20,000 files the kernel knows, on a `--kernel-cache --coherence
watch` mount: the drop is answered once its kernel invalidations (20,000
names and 20,000 inodes, plus the directories) are sent, so this measures
the invalidation queue and the kernel's work on it. LAYOUT `flat`: the
files in one directory; `nested`: in 20 directories of 1,000. Each round
stats every file through the mount again first. Prints the median and
every round's time, in ms. Run as root.
usage: drop_wall.py RCUFS_BINARY flat|nested ROUNDS"""
import fcntl, os, statistics, struct, subprocess, sys, tempfile, time

binary, layout, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
if layout not in ("flat", "nested"):
    sys.exit("LAYOUT must be flat or nested")
IOC_DROP = (3 << 30) | (64 << 16) | (ord('R') << 8) | 1
base = tempfile.mkdtemp()
src, mnt = os.path.join(base, "src"), os.path.join(base, "mnt")
os.mkdir(src); os.mkdir(mnt)
dirs = ["big"] if layout == "flat" else ["big/d%02d" % i for i in range(20)]
per = 20000 // len(dirs)
for d in dirs:
    os.makedirs(os.path.join(src, d))
    for f in range(per):
        open(os.path.join(src, d, "f%05d" % f), "w").close()
log = open(os.path.join(base, "log"), "w")
daemon = subprocess.Popen([binary, "mount", src, mnt, "--kernel-cache", "--coherence", "watch"],
                          stdout=log, stderr=log)
try:
    for _ in range(2000):
        if os.path.ismount(mnt):
            break
        time.sleep(0.01)
    else:
        sys.exit("the mount did not come up; see " + log.name)
    times = []
    for _ in range(rounds):
        for d in dirs:
            p = os.path.join(mnt, d)
            for name in os.listdir(p):
                os.stat(os.path.join(p, name))
        fd = os.open(os.path.join(mnt, "big"), os.O_RDONLY | os.O_DIRECTORY)
        buf = bytearray(struct.pack("=IIII6Q", 1, 3, 0, 0, 0, 0, 0, 0, 0, 0))
        t0 = time.perf_counter()
        fcntl.ioctl(fd, IOC_DROP, buf, True)
        times.append(time.perf_counter() - t0)
        os.close(fd)
    print("%s %s: drop of 20000 known files, median %.1f ms (all: %s)"
          % (os.path.basename(binary), layout, statistics.median(times) * 1e3,
             " ".join("%.1f" % (t * 1e3) for t in times)))
finally:
    subprocess.run(["umount", mnt])
    daemon.wait(timeout=20)
    subprocess.run(["rm", "-rf", base])
