//! Helpers of the crate's unit tests.

/// Runs `f` on a thread of its own in a mount namespace of its own,
/// with private propagation (so that neither its mounts nor other
/// tests' reach the other side: a mount that another test attaches and
/// detaches before the watch reads its attach cannot be placed, and
/// would count as a change everywhere). The namespace, and what is
/// mounted in it, ends with the thread. False, said, when not root.
pub(crate) fn in_own_namespace(f: impl FnOnce() + Send + 'static) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: mounting needs root");
        return false;
    }
    std::thread::spawn(|| {
        // SAFETY: unshares this thread's mount namespace (and its
        // filesystem context), which only this thread uses.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNS) };
        assert_eq!(rc, 0, "unshare(CLONE_NEWNS): {}", std::io::Error::last_os_error());
        // SAFETY: NUL-terminated path; no source, type or data.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "making / private: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .map_err(std::panic::resume_unwind)
    .is_ok()
}
