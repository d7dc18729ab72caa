#!/usr/bin/env python3
"""Median time of N drops of an empty directory on an rcufs mount while the
kernel knows K other inodes (K files in directories of 1,000, each stat'ed
through the mount). The time is the drop's own `elapsed_ns` from the ioctl.
Run as root. usage: drop_cost.py RCUFS_BINARY K N"""
import fcntl, os, statistics, struct, subprocess, sys, tempfile, time

binary, known, drops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
IOC_DROP = (3 << 30) | (64 << 16) | (ord('R') << 8) | 1
base = tempfile.mkdtemp()
src, mnt = os.path.join(base, "src"), os.path.join(base, "mnt")
os.mkdir(src); os.mkdir(mnt); os.mkdir(os.path.join(src, "empty"))
per = 1000
for d in range(known // per):
    p = os.path.join(src, "other", "d%02d" % d)
    os.makedirs(p)
    for f in range(per):
        open(os.path.join(p, "f%04d" % f), "w").close()
log = open(os.path.join(base, "log"), "w")
daemon = subprocess.Popen([binary, "mount", src, mnt, "--revalidate", "3600"], stdout=log, stderr=log)
try:
    for _ in range(2000):
        if os.path.ismount(mnt):
            break
        time.sleep(0.01)
    for d in range(known // per):
        p = os.path.join(mnt, "other", "d%02d" % d)
        for name in os.listdir(p):
            os.stat(os.path.join(p, name))
    fd = os.open(os.path.join(mnt, "empty"), os.O_RDONLY | os.O_DIRECTORY)
    times = []
    for _ in range(drops):
        buf = bytearray(struct.pack("=IIII6Q", 1, 3, 0, 0, 0, 0, 0, 0, 0, 0))
        fcntl.ioctl(fd, IOC_DROP, buf, True)
        times.append(struct.unpack("=IIII6Q", buf)[9])
    os.close(fd)
    print("%s: known %d, %d drops of an empty dir: median %d ns, min %d, max %d"
          % (os.path.basename(binary), known, drops, statistics.median(times), min(times), max(times)))
finally:
    subprocess.run(["umount", mnt])
    daemon.wait(timeout=20)
    subprocess.run(["rm", "-rf", base])
