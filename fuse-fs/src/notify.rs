//! The systemd readiness protocol (`sd_notify(3)`), sender side: when
//! `NOTIFY_SOCKET` is set, `rcufs mount` sends `READY=1` once the mount is
//! live and `STOPPING=1` when it starts to unmount, so that a unit with
//! `Type=notify` starts its dependants only when the mount answers. The
//! mount helper (`helper.rs`) uses the same protocol to learn that the
//! daemon it started is ready: one readiness path for both.
//!
//! The socket is a path, or an abstract name written with a leading `@`, as
//! systemd documents; each message is one datagram of `KEY=VALUE` lines.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable naming the socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The address `NOTIFY_SOCKET` names (`@name` is an abstract address).
pub fn address(spec: &str) -> io::Result<SocketAddr> {
    match spec.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(spec),
    }
}

/// Sends `state` to the socket `NOTIFY_SOCKET` names; `Ok(false)` when it
/// is not set (nobody listens for readiness).
pub fn send(state: &str) -> io::Result<bool> {
    let Some(spec) = std::env::var_os(NOTIFY_SOCKET) else {
        return Ok(false);
    };
    let spec = spec
        .into_string()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is not UTF-8"))?;
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &address(&spec)?)?;
    Ok(true)
}

/// [`send`], logging a failure instead of returning it: readiness is a
/// courtesy to the supervisor, never a reason to fail the mount. A failed
/// `READY=1` is a warning; a failed `STOPPING=1` only a debug line, since
/// the mount helper that listened for readiness has exited by then.
pub fn send_logged(state: &str) {
    match send(state) {
        Ok(true) => tracing::debug!(state, "notified the supervisor"),
        Ok(false) => {}
        Err(e) if state.starts_with("READY=1") => {
            tracing::warn!(error = %e, state, "could not notify NOTIFY_SOCKET")
        }
        Err(e) => tracing::debug!(error = %e, state, "could not notify NOTIFY_SOCKET"),
    }
}
