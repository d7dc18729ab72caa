//! Filesystem session
//!
//! A session runs a filesystem implementation while it is being mounted to a specific mount
//! point. A session begins by mounting the filesystem and ends by unmounting it. While the
//! filesystem is mounted, the session loop receives, dispatches and replies to kernel requests
//! for filesystem operations under its mount point.

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::thread::{self};

use log::debug;
use log::error;
use log::info;
use log::warn;
use nix::unistd::Uid;
use nix::unistd::geteuid;
use parking_lot::Mutex;

use crate::Errno;
use crate::Filesystem;
use crate::KernelConfig;
use crate::MountOption;
use crate::ReplyEmpty;
use crate::Request;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::dev_fuse::DevFuse;
use crate::ll;
use crate::ll::Operation;
use crate::ll::ResponseErrno;
use crate::ll::Version;
use crate::ll::flags::init_flags::InitFlags;
use crate::ll::fuse_abi as abi;
use crate::mnt::Mount;
use crate::mnt::mount_options::Config;
use crate::mnt::mount_options::check_option_conflicts;
use crate::notify::Notifier;
use crate::read_buf::FuseReadBuf;
use crate::reply::Reply;
use crate::reply::ReplyRaw;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;

/// The max size of write requests from the kernel. The absolute minimum is 4k,
/// FUSE recommends at least 128k, max 16M. The FUSE default is 16M on macOS
/// and 128k on other systems.
pub(crate) const MAX_WRITE_SIZE: usize = 16 * 1024 * 1024;

#[derive(Default, Debug, Eq, PartialEq, Clone, Copy)]
/// How requests should be filtered based on the calling UID.
pub enum SessionACL {
    /// Allow requests from any user. Corresponds to the `allow_other` mount option.
    All,
    /// Allow requests from root. Corresponds to the `allow_root` mount option.
    RootAndOwner,
    /// Allow requests from the owning UID. This is FUSE's default mode of operation.
    #[default]
    Owner,
}

impl SessionACL {
    /// Returns the mount option string for kernel/fusermount/libfuse paths.
    /// Both `All` and `RootAndOwner` map to `allow_other` - the kernel only
    /// understands `allow_other`, and fuser enforces the root-only restriction internally.
    #[allow(dead_code)]
    pub(crate) fn to_mount_option(self) -> Option<&'static str> {
        match self {
            SessionACL::All | SessionACL::RootAndOwner => Some("allow_other"),
            SessionACL::Owner => None,
        }
    }
}

/// Calls `destroy` on drop.
#[derive(Debug)]
pub(crate) struct FilesystemHolder<FS: Filesystem> {
    pub(crate) fs: Option<FS>,
}

impl<FS: Filesystem> FilesystemHolder<FS> {
    fn destroy(&mut self) {
        if let Some(mut fs) = self.fs.take() {
            fs.destroy();
        }
    }
}

impl<FS: Filesystem> Drop for FilesystemHolder<FS> {
    fn drop(&mut self) {
        self.destroy();
    }
}

#[derive(Debug)]
struct UmountOnDrop {
    mount: Arc<Mutex<Option<Mount>>>,
}

impl UmountOnDrop {
    fn umount(&self) -> io::Result<()> {
        if let Some(mount) = self.mount.lock().take() {
            mount.umount()?;
        }
        Ok(())
    }
}

impl Drop for UmountOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.umount() {
            warn!("Failed to umount filesystem: {}", e);
        }
    }
}

/// The session data structure
#[derive(Debug)]
pub struct Session<FS: Filesystem> {
    /// Filesystem operation implementations. None after `destroy` called.
    pub(crate) filesystem: FilesystemHolder<FS>,
    /// Communication channel to the kernel driver
    pub(crate) ch: Channel,
    /// Handle to the mount.  Dropping this unmounts.
    mount: UmountOnDrop,
    /// Whether to restrict access to owner, root + owner, or unrestricted
    /// Used to implement `allow_root` and `auto_unmount`
    pub(crate) allowed: SessionACL,
    /// User that launched the fuser process
    pub(crate) session_owner: Uid,
    /// FUSE protocol version, as reported by the kernel.
    /// The field is set to `Some` when the init message is received.
    pub(crate) proto_version: Option<Version>,
    pub(crate) config: Config,
    /// The io_uring queues, if INIT granted `FUSE_OVER_IO_URING`
    /// (`uring.rs`).
    pub(crate) ring: Option<crate::uring::Ring>,
}

impl<FS: Filesystem> AsFd for Session<FS> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ch.as_fd()
    }
}

impl<FS: Filesystem> Session<FS> {
    /// Create a new session by mounting the given filesystem to the given mountpoint
    /// # Errors
    /// Returns an error if the options are incorrect, or if the fuse device can't be mounted.
    pub fn new<P: AsRef<Path>>(
        filesystem: FS,
        mountpoint: P,
        options: &Config,
    ) -> io::Result<Session<FS>> {
        check_option_conflicts(options)?;

        let mountpoint = mountpoint.as_ref();
        info!("Mounting {}", mountpoint.display());
        // If AutoUnmount is requested, but not AllowRoot or AllowOther, return an error
        // because fusermount needs allow_root or allow_other to handle the auto_unmount option
        if options.mount_options.contains(&MountOption::AutoUnmount)
            && options.acl == SessionACL::Owner
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("auto_unmount requires acl != Owner, got: {:?}", options.acl),
            ));
        }
        let (file, mount) = Mount::new(mountpoint, &options.mount_options, options.acl)?;

        let ch = Channel::new(file);

        let mut session = Session {
            filesystem: FilesystemHolder {
                fs: Some(filesystem),
            },
            ch,
            mount: UmountOnDrop {
                mount: Arc::new(Mutex::new(Some(mount))),
            },
            allowed: options.acl,
            session_owner: geteuid(),
            proto_version: None,
            config: options.clone(),
            ring: None,
        };

        session.handshake()?;

        Ok(session)
    }

    /// Wrap an existing /dev/fuse file descriptor. This doesn't mount the
    /// filesystem anywhere; that must be done separately.
    pub fn from_fd(
        filesystem: FS,
        fd: OwnedFd,
        acl: SessionACL,
        config: Config,
    ) -> io::Result<Self> {
        let ch = Channel::new(Arc::new(DevFuse(File::from(fd))));
        let mut session = Session {
            filesystem: FilesystemHolder {
                fs: Some(filesystem),
            },
            ch,
            mount: UmountOnDrop {
                mount: Arc::new(Mutex::new(None)),
            },
            allowed: acl,
            session_owner: geteuid(),
            proto_version: None,
            config,
            ring: None,
        };

        session.handshake()?;

        Ok(session)
    }

    /// Run the session loop in a background thread. If the returned handle is dropped,
    /// the filesystem is unmounted and the given session ends.
    pub fn spawn(self) -> io::Result<BackgroundSession> {
        let sender = self.ch.sender();
        // Take the fuse_session, so that we can unmount it
        let mount = std::mem::take(&mut *self.mount.mount.lock());
        let guard = thread::Builder::new()
            .name("fuser-bg".to_string())
            .spawn(move || self.run())?;
        Ok(BackgroundSession {
            guard,
            sender,
            mount,
        })
    }

    /// Run the session loop that receives kernel requests and dispatches them to method
    /// calls into the filesystem. This read-dispatch-loop is non-concurrent to prevent
    /// having multiple buffers (which take up much memory), but the filesystem methods
    /// may run concurrent by spawning threads.
    /// # Errors
    /// Returns any final error when the session comes to an end.
    pub fn run(self) -> io::Result<()> {
        let Session {
            filesystem,
            ch,
            mount: _do_not_umount_yet,
            allowed,
            session_owner,
            proto_version: _,
            config,
            ring,
        } = self;

        let n_threads = config.n_threads.unwrap_or(1);

        if !cfg!(target_os = "linux") && n_threads != 1 {
            // TODO: check whether it works on macOS/FreeBSD and enable if it works.
            return Err(io::Error::other(
                "n_threads != 1 is only supported on Linux",
            ));
        }

        let Some(n_threads_minus_one) = n_threads.checked_sub(1) else {
            return Err(io::Error::other("n_threads"));
        };

        let mut filesystem = Arc::new(filesystem);

        let mut channels = Vec::with_capacity(n_threads);
        let ring_ch = ch.clone();
        let uring_idle = config.uring_idle;

        for _ in 0..n_threads_minus_one {
            if config.clone_fd {
                #[cfg(target_os = "linux")]
                {
                    channels.push(ch.clone_fd()?);
                    continue;
                }
                #[cfg(not(target_os = "linux"))]
                {
                    return Err(io::Error::other("clone_fd is only supported on Linux"));
                }
            } else {
                channels.push(ch.clone());
            }
        }
        channels.push(ch);

        let mut threads = Vec::with_capacity(n_threads);
        // Polling toggles `O_NONBLOCK`, a flag of the open file: only with a
        // descriptor of its own per worker (or a single worker).
        let spin = config
            .spin
            .filter(|s| !s.is_zero() && (config.clone_fd || n_threads == 1));
        let spinner = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Lanes leave a worker outside all of them, and run on threads of
        // their own past that.
        let lanes = Arc::new(crate::lanes::Lanes::new(
            config.lane_width,
            n_threads - 1,
            crate::lanes::SPARE_THREADS,
        ));

        for (i, ch) in channels.into_iter().enumerate() {
            let thread_name = format!("fuser-{i}");
            let event_loop = SessionEventLoop {
                thread_name: thread_name.clone(),
                filesystem: filesystem.clone(),
                ch,
                allowed,
                session_owner,
                spin,
                spinner: spinner.clone(),
                lanes: lanes.clone(),
            };
            threads.push(
                thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || event_loop.event_loop())?,
            );
        }

        // FUSE over io_uring: one thread per queue beside the `/dev/fuse`
        // workers (which still get FORGET and INTERRUPT); the queues were
        // made in the handshake.
        let mut ring_threads = Vec::new();
        if let Some(ring) = &ring {
            for q in &ring.queues {
                let q = q.clone();
                let event_loop = SessionEventLoop {
                    thread_name: format!("fuser-ring-{}", ring_threads.len()),
                    filesystem: filesystem.clone(),
                    ch: ring_ch.clone(),
                    allowed,
                    session_owner,
                    spin: None,
                    spinner: spinner.clone(),
                    // Requests over io_uring are answered through their
                    // queue entry, which must not wait in a lane.
                    lanes: Arc::new(crate::lanes::Lanes::new(0, 0, 0)),
                };
                ring_threads.push(
                    thread::Builder::new()
                        .name(event_loop.thread_name.clone())
                        .spawn(move || {
                            let r = crate::uring::serve(q, uring_idle, &event_loop);
                            if let Err(e) = &r {
                                // The kernel keeps queueing this CPU's
                                // requests here: rather than leave them
                                // hanging, end the process's session the
                                // way an operator would (SIGTERM: rcufs
                                // unmounts, detaching if busy, and exits).
                                error!(
                                    "FUSE over io_uring: a queue failed ({e}); its CPU's requests \
                                     cannot be served, ending the session"
                                );
                                // SAFETY: kill(2) of this process; no memory.
                                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                            }
                            r
                        })?,
                );
            }
            debug!("FUSE over io_uring: {} queues", ring.queues.len());
        }

        // Every thread is joined whatever the others ended with (a panic
        // included), and the queues are stopped and joined before the ring
        // is dropped (see `uring.rs`): the first error is returned after.
        let mut reply: io::Result<()> = Ok(());
        for thread in threads {
            let res = thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("event loop thread panicked")));
            if let Err(e) = res {
                if reply.is_ok() {
                    reply = Err(e);
                }
            }
        }

        if let Some(ring) = &ring {
            ring.stop();
        }
        for thread in ring_threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => error!("io_uring queue ended with an error: {e}"),
                Err(_) => {
                    if reply.is_ok() {
                        reply = Err(io::Error::other("io_uring queue thread panicked"));
                    }
                }
            }
        }
        drop(ring);

        // Threads of the lanes' own (`spawn_lane`) are not joined: one may
        // still be finishing a request, or wait in a filesystem that
        // stopped. The first are waited for a moment; past that the
        // filesystem is not destroyed (the process's exit ends them).
        let since = std::time::Instant::now();
        while Arc::strong_count(&filesystem) > 1 && since.elapsed() < std::time::Duration::from_secs(2) {
            thread::sleep(std::time::Duration::from_millis(10));
        }
        let Some(filesystem) = Arc::get_mut(&mut filesystem) else {
            warn!("threads of the lanes still run requests at the end of the session: not destroyed");
            return reply;
        };

        filesystem.destroy();

        reply
    }

    fn handshake(&mut self) -> io::Result<()> {
        let mut buf = FuseReadBuf::new();
        let buf = buf.as_mut();

        loop {
            // Read the init request from the kernel
            let size = match self.ch.receive_retrying(buf) {
                Ok(size) => size,
                Err(nix::errno::Errno::ENODEV) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "FUSE device disconnected during handshake",
                    ));
                }
                Err(err) => return Err(err.into()),
            };

            // Parse the request
            let request = match ll::AnyRequest::try_from(&buf[..size]) {
                Ok(request) => request,
                Err(err) => {
                    error!("{err}");
                    return Err(io::Error::new(io::ErrorKind::InvalidData, err.to_string()));
                }
            };

            // Extract the init operation
            let op = match request.operation() {
                Ok(op) => op,
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "Failed to parse FUSE operation",
                    ));
                }
            };

            let init = match op {
                ll::Operation::Init(init) => init,
                _ => {
                    error!("Received non-init FUSE operation before init: {}", request);
                    // Send error response and return error - non-init during handshake is invalid
                    <ReplyRaw as Reply>::new(
                        request.unique(),
                        ReplySender::Channel(self.ch.sender()),
                    )
                    .send_ll(&ResponseErrno(ll::Errno::EIO));
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "Received non-init FUSE operation during handshake",
                    ));
                }
            };

            let v = init.version();
            if v.0 > abi::FUSE_KERNEL_VERSION {
                // Kernel has a newer major version than we support.
                // Send our version and wait for a second INIT request with a compatible version.
                debug!(
                    "INIT: Kernel version {} > our version {}, sending our version and waiting for next init",
                    v.0,
                    abi::FUSE_KERNEL_VERSION
                );
                let response = init.reply_version_only();
                <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                    .send_ll(&response);
                continue;
            }

            // We don't support ABI versions before 7.6
            if v < Version(7, 6) {
                error!("Unsupported FUSE ABI version {v}");
                <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                    .send_ll(&ResponseErrno(ll::Errno::EPROTO));
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("Unsupported FUSE ABI version {v}"),
                ));
            }

            let mut config = KernelConfig::new(init.capabilities(), init.max_readahead(), v);

            // Call filesystem init method and give it a chance to return an error
            let Some(filesystem) = &mut self.filesystem.fs else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "Bug: filesystem must be initialized during handshake",
                ));
            };
            let res = filesystem.init(Request::ref_cast(request.header()), &mut config);
            if let Err(error) = res {
                let errno = Errno::from_i32(error.raw_os_error().unwrap_or(0));
                <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                    .send_ll(&ResponseErrno(errno));
                return Err(error);
            }

            // Remember the ABI version supported by kernel and mark the session initialized.
            self.proto_version = Some(v);

            // Log capability status for debugging
            for bit in 0..64 {
                let bitflags = InitFlags::from_bits_retain(1 << bit);
                if bitflags == InitFlags::FUSE_INIT_EXT {
                    continue;
                }
                let bitflag_is_known = InitFlags::all().contains(bitflags);
                let kernel_supports = init.capabilities().contains(bitflags);
                let we_requested = config.requested.contains(bitflags);
                // On macOS, there's a clash between linux and macOS constants,
                // so we pick macOS ones (last).
                let name = if let Some((name, _)) = bitflags.iter_names().last() {
                    Cow::Borrowed(name)
                } else {
                    Cow::Owned(format!("(1 << {bit})"))
                };
                if we_requested && kernel_supports {
                    debug!("capability {name} enabled")
                } else if we_requested {
                    debug!("capability {name} not supported by kernel")
                } else if kernel_supports {
                    debug!("capability {name} not requested by client")
                } else if bitflag_is_known {
                    debug!("capability {name} not supported nor requested")
                }
            }

            // Reply with our desired version and settings.
            debug!(
                "INIT response: ABI {}.{}, flags {:#x}, max readahead {}, max write {}",
                abi::FUSE_KERNEL_VERSION,
                abi::FUSE_KERNEL_MINOR_VERSION,
                init.capabilities() & config.requested,
                config.max_readahead,
                config.max_write
            );

            if (init.capabilities() & config.requested).contains(InitFlags::FUSE_OVER_IO_URING) {
                // The kernel refuses entries smaller than its largest
                // request: max(8 KiB, max_write, max_pages pages). The
                // queues are made before INIT is answered: once it grants
                // io_uring, the kernel holds every request back until each
                // queue has registered, so a ring that cannot be made must
                // fail the INIT, not hang the mount.
                let pages = config.max_pages() as usize * page_size::get();
                let payload = 8192.max(config.max_write as usize).max(pages);
                match crate::uring::Ring::new(&self.ch.dev(), payload) {
                    Ok(ring) => self.ring = Some(ring),
                    Err(e) => {
                        error!("FUSE over io_uring: the queues cannot be set up: {e}");
                        <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                            .send_ll(&ResponseErrno(ll::Errno::EIO));
                        return Err(io::Error::new(e.kind(), format!("FUSE over io_uring: the queues cannot be set up: {e}")));
                    }
                }
            }
            let response = init.reply(&config);
            <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                .send_ll(&response);

            return Ok(());
        }
    }

    /// Unmount the filesystem
    pub fn unmount(&mut self) -> io::Result<()> {
        self.mount.umount()
    }

    /// Returns a thread-safe object that can be used to unmount the Filesystem
    pub fn unmount_callable(&mut self) -> SessionUnmounter {
        SessionUnmounter {
            mount: self.mount.mount.clone(),
        }
    }

    /// Returns an object that can be used to send notifications to the kernel
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.ch.sender())
    }
}

#[derive(Debug)]
/// A thread-safe object that can be used to unmount a Filesystem
pub struct SessionUnmounter {
    mount: Arc<Mutex<Option<Mount>>>,
}

impl SessionUnmounter {
    /// Unmount the filesystem
    pub fn unmount(&mut self) -> io::Result<()> {
        if let Some(mount) = std::mem::take(&mut *self.mount.lock()) {
            mount.umount()?;
        }
        Ok(())
    }
}

pub(crate) struct SessionEventLoop<FS: Filesystem> {
    /// Cache thread name for faster `debug!`.
    pub(crate) thread_name: String,
    pub(crate) ch: Channel,
    pub(crate) filesystem: Arc<FilesystemHolder<FS>>,
    pub(crate) allowed: SessionACL,
    pub(crate) session_owner: Uid,
    /// The polling window after a request (`Config::spin`), if any.
    pub(crate) spin: Option<std::time::Duration>,
    /// Held by the one worker polling at a time.
    pub(crate) spinner: Arc<std::sync::atomic::AtomicBool>,
    /// The session's lanes (`lanes.rs`), shared by its `/dev/fuse` workers:
    /// a queued request's bytes and the channel to answer it through.
    pub(crate) lanes: Arc<crate::lanes::Lanes<Queued>>,
}

impl<FS: Filesystem> crate::uring::Dispatch for SessionEventLoop<FS> {
    fn dispatch(&self, data: &[u8], slot: crate::uring::RingSlot) {
        let Some(req) = RequestWithSender::new(self.ch.sender().ring(slot.clone()), data) else {
            // Unparsable: answered EIO, so that its caller and the entry
            // are not left waiting (over /dev/fuse the session would end).
            let unique = data.get(8..16).map_or(0, |u| u64::from_ne_bytes(u.try_into().expect("8 bytes")));
            slot.fail(unique, libc::EIO);
            return;
        };
        if let Ok(Operation::Destroy(_)) = req.request.operation() {
            req.reply::<ReplyEmpty>().ok();
        } else {
            req.dispatch(self);
        }
    }
}

impl<FS: Filesystem> SessionEventLoop<FS> {
    /// The lane of a request read from `/dev/fuse` (`lanes.rs`), if lanes
    /// are on. Told by the header's opcode: only a LOOKUP is parsed here
    /// (for its name), every request is parsed again by its dispatch.
    fn lane_of(&self, req: &RequestWithSender<'_>) -> Option<u64> {
        use crate::ll::fuse_abi::fuse_opcode as op;
        if !self.lanes.enabled() {
            return None;
        }
        let fs = self.filesystem.fs.as_ref()?;
        let opcode = req.request.header().opcode;
        let never = [
            op::FUSE_FORGET as u32,
            op::FUSE_BATCH_FORGET as u32,
            op::FUSE_INTERRUPT as u32,
            op::FUSE_DESTROY as u32,
            op::FUSE_INIT as u32,
        ];
        if never.contains(&opcode) {
            return None;
        }
        if opcode != op::FUSE_LOOKUP as u32 {
            return fs.lane(req.request.nodeid(), None);
        }
        match req.request.operation() {
            Ok(Operation::Lookup(x)) => fs.lane(req.request.nodeid(), Some(x.name().as_ref())),
            _ => None,
        }
    }

    /// An INTERRUPT for request `unique`, read while lanes are on. A
    /// request still queued in a lane has not run, so it can be answered
    /// `EINTR` without harm; that is done only when its caller has been
    /// killed (a fatal signal pending), as a network filesystem's waits
    /// are killable and not interruptible: answering every signal would
    /// hand `EINTR` from `stat` and `open` to programs that never see it
    /// natively. An interrupted request left queued, or not queued yet
    /// (its INTERRUPT read by another worker before it was), is watched:
    /// looked at again every [`INTERRUPT_WATCH`] while it stays queued, for
    /// a caller killed after a first, non-fatal signal (which is when the
    /// kernel sends the one INTERRUPT a request gets).
    fn interrupt(&self, unique: u64) {
        match cancel_if_killed(&self.lanes, unique) {
            crate::lanes::Found::Taken(()) => return,
            // Not queued, and no lane runs anything, so that it will not be
            // either (it runs at once): not watched, so that a signalled
            // wait outside the lanes costs no thread.
            crate::lanes::Found::Absent if !self.lanes.busy() => return,
            _ => {}
        }
        if !self.lanes.watch(unique) {
            return;
        }
        let lanes = self.lanes.clone();
        let watch = thread::Builder::new()
            .name("fuser-interrupts".to_string())
            .spawn(move || {
                loop {
                    thread::sleep(INTERRUPT_WATCH);
                    if !lanes.watched(|u| cancel_if_killed(&lanes, u)) {
                        break;
                    }
                }
            });
        if let Err(err) = watch {
            warn!("no thread to watch interrupted requests: {err}");
            // Ends the watch, so that the next INTERRUPT tries again.
            self.lanes.stop_watch();
        }
    }

    /// Runs `req` of `lane` on a thread of the lanes' own
    /// ([`Entry::Spawn`](crate::lanes::Entry::Spawn)), which then runs the
    /// lane's queue and ends once it has left every lane. If no thread can
    /// be made, this worker runs it in that thread's place.
    fn spawn_lane(&self, lane: u64, req: Queued) {
        let se = SessionEventLoop {
            thread_name: "fuser-lane".to_string(),
            filesystem: self.filesystem.clone(),
            ch: self.ch.clone(),
            allowed: self.allowed,
            session_owner: self.session_owner,
            spin: None,
            spinner: self.spinner.clone(),
            lanes: self.lanes.clone(),
        };
        // Handed over once the thread exists, so that it is still here if
        // it cannot be made.
        let (tx, rx) = std::sync::mpsc::channel::<Queued>();
        let spawned = thread::Builder::new()
            .name(se.thread_name.clone())
            .spawn(move || {
                if let Ok((data, ch)) = rx.recv()
                    && let Some(req) = RequestWithSender::new(ch, &data)
                {
                    req.dispatch(&se);
                }
                se.run_lane(lane, false);
            });
        match spawned {
            Ok(_) => {
                let _ = tx.send(req);
            }
            Err(err) => {
                warn!("no thread for a lane ({err}): a worker runs its request");
                if let Some(r) = RequestWithSender::new(req.1, &req.0) {
                    r.dispatch(self);
                }
                self.run_lane(lane, false);
            }
        }
    }

    /// Before a request of a lane, which may not return for long: gives
    /// the polling token back (`Config::spin`), so that another worker
    /// polls meanwhile. This worker's descriptor stays non-blocking until
    /// its next read, which switches it back (`receive_spinning`).
    fn give_back_polling(&self, holding: &mut bool) {
        if *holding {
            // Release pairs with the Acquire exchange in `receive_spinning`.
            self.spinner
                .store(false, std::sync::atomic::Ordering::Release);
            *holding = false;
        }
    }

    /// After running a request of `lane`: runs the queued requests
    /// [`Lanes::next`](crate::lanes::Lanes::next) hands out until this
    /// worker (or, not `worker`, this lane's own thread) has left every
    /// lane.
    fn run_lane(&self, mut lane: u64, worker: bool) {
        while let Some((now, (data, ch))) = self.lanes.next(lane, worker) {
            lane = now;
            // Parsed once already, when it was read.
            if let Some(req) = RequestWithSender::new(ch, &data) {
                req.dispatch(self);
            }
        }
    }

    fn event_loop(&self) -> io::Result<()> {
        let mut holding = false;
        let res = self.serve(&mut holding);
        if holding {
            // A worker leaving its loop (an error, or the end of the
            // session) gives the polling token back, so another may poll.
            // Release pairs with the Acquire exchange in `receive_spinning`.
            self.spinner
                .store(false, std::sync::atomic::Ordering::Release);
        }
        res
    }

    /// The loop of `event_loop`; `holding` says whether this worker holds
    /// the polling token when it returns.
    fn serve(&self, holding: &mut bool) -> io::Result<()> {
        // Buffer for receiving requests from the kernel. Only one is allocated and
        // it is reused immediately after dispatching to conserve memory and allocations.
        let mut buf = FuseReadBuf::new();
        let buf = buf.as_mut();
        let mut nonblocking = false;
        loop {
            // Read the next request from the given channel to kernel driver
            // The kernel driver makes sure that we get exactly one request per read
            let received = match self.spin {
                Some(spin) => self.ch.receive_spinning(
                    buf,
                    spin,
                    &self.spinner,
                    holding,
                    &mut nonblocking,
                ),
                None => self.ch.receive_retrying(buf),
            };
            match received {
                Ok(size) => match RequestWithSender::new(self.ch.sender(), &buf[..size]) {
                    // Dispatch request
                    Some(req) => {
                        if let Ok(Operation::Destroy(_)) = req.request.operation() {
                            req.reply::<ReplyEmpty>().ok();
                            self.lanes.close();
                            return Ok(());
                        }
                        if self.lanes.enabled()
                            && req.request.header().opcode
                                == crate::ll::fuse_abi::fuse_opcode::FUSE_INTERRUPT as u32
                        {
                            // Never answered: an answer of ENOSYS (fuser's)
                            // would end the kernel's INTERRUPTs for good.
                            if let Ok(Operation::Interrupt(x)) = req.request.operation() {
                                self.interrupt(x.unique().0);
                            }
                            continue;
                        }
                        match self.lane_of(&req) {
                            None => req.dispatch(self),
                            Some(lane) => match self.lanes.enter(lane, size, || {
                                (buf[..size].to_vec(), self.ch.sender())
                            }) {
                                crate::lanes::Entry::Run => {
                                    self.give_back_polling(holding);
                                    req.dispatch(self);
                                    self.run_lane(lane, true);
                                }
                                crate::lanes::Entry::Spawn => {
                                    self.spawn_lane(lane, (buf[..size].to_vec(), self.ch.sender()));
                                }
                                crate::lanes::Entry::Queued => {}
                                crate::lanes::Entry::Over => {
                                    self.give_back_polling(holding);
                                    req.dispatch(self);
                                }
                            },
                        }
                    }
                    // Quit loop on illegal request
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "Invalid request",
                        ));
                    }
                },
                // The session is over: nothing queued in a lane runs.
                Err(nix::errno::Errno::ENODEV) => {
                    self.lanes.close();
                    return Ok(());
                }
                // The connection was torn down while this read was taking a
                // request off the queue (`fuse_dev_do_read` finds its
                // processing queue disconnected): the same end as ENODEV,
                // seen by a worker that raced the unmount.
                Err(nix::errno::Errno::ECONNABORTED) => {
                    self.lanes.close();
                    return Ok(());
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

/// How often the requests whose INTERRUPT found them queued in a lane
/// are looked at again ([`SessionEventLoop::interrupt`]).
const INTERRUPT_WATCH: std::time::Duration = std::time::Duration::from_millis(500);

/// A request queued in a lane: its bytes, and the channel to answer it
/// through.
type Queued = (Vec<u8>, ChannelSender);

/// If the request `unique` is queued in a lane and its caller has been
/// killed: takes it out of its queue and answers it `EINTR` (its caller
/// is gone, nothing ran). Never a FLUSH, RELEASE or RELEASEDIR: the kernel
/// waits for those whatever the signal (`FR_FORCE`), and they must run
/// (a FLUSH's write-back, a handle's release).
fn cancel_if_killed(lanes: &crate::lanes::Lanes<Queued>, unique: u64) -> crate::lanes::Found<()> {
    use crate::lanes::Found;
    use crate::ll::fuse_abi::fuse_opcode as op;
    let forced = [
        op::FUSE_FLUSH as u32,
        op::FUSE_RELEASE as u32,
        op::FUSE_RELEASEDIR as u32,
    ];
    // The header's `unique` (bytes 8..16), read without parsing the rest.
    let unique_of = |data: &[u8]| data.get(8..16).map(|u| u64::from_ne_bytes(u.try_into().expect("8 bytes")));
    let found = lanes.interrupt(
        |(data, _)| unique_of(data) == Some(unique),
        |(data, _)| {
            let Ok(req) = ll::AnyRequest::try_from(&data[..]) else {
                return false;
            };
            !forced.contains(&req.header().opcode) && crate::lanes::killed(req.header().pid)
        },
    );
    match found {
        Found::Taken((data, ch)) => {
            if let Some(req) = RequestWithSender::new(ch, &data) {
                req.reply::<ReplyRaw>().send_ll(&ResponseErrno(Errno::EINTR));
            }
            Found::Taken(())
        }
        Found::Left => Found::Left,
        Found::Absent => Found::Absent,
    }
}

/// The background session data structure
#[derive(Debug)]
pub struct BackgroundSession {
    /// Thread guard of the background session
    pub guard: JoinHandle<io::Result<()>>,
    /// Object for creating Notifiers for client use
    sender: ChannelSender,
    /// Ensures the filesystem is unmounted when the session ends
    mount: Option<Mount>,
}

impl BackgroundSession {
    /// Unmount the filesystem and join the background thread.
    pub fn umount_and_join(mut self) -> io::Result<()> {
        if let Some(mount) = self.mount.take() {
            mount.umount()?;
        }
        self.join()
    }

    /// Returns an object that can be used to send notifications to the kernel
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.sender.clone())
    }

    /// Join the filesystem thread.
    pub fn join(self) -> io::Result<()> {
        self.guard
            .join()
            .map_err(|_panic: Box<dyn std::any::Any + Send>| {
                io::Error::new(
                    io::ErrorKind::Other,
                    "filesystem background thread panicked",
                )
            })?
    }
}
