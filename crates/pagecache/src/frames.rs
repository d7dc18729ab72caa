//! Page frames for single-page folios of 4 KiB pages, their headers kept
//! apart from their bytes as the kernel keeps `struct page` apart from the
//! page (its `mem_map`).
//!
//! A folio's header and bytes used to be one heap block, the bytes 64
//! bytes in: a 4 KiB page then straddled two pages of memory, so each copy
//! of it touched two pages (two TLB entries, two page walks on a miss),
//! and nothing else could be page-aligned either (the allocator wastes
//! about as much as it gives for page-aligned blocks). Here memory comes in
//! 2 MiB chunks, mapped from the kernel, aligned to 2 MiB and marked
//! `MADV_HUGEPAGE`, so that the kernel may back each with one huge page as
//! its own page cache is reached through the direct map's huge pages: a
//! copy of a page then costs no page walk of its own. The chunk's first 32 KiB hold one 64-byte header slot per
//! 4 KiB frame of the chunk; the frames from the ninth on hold bytes. The
//! header of frame `i` is at `base + 64 i` and its bytes at
//! `base + 4096 i`, so either address is computed from the other without
//! a load ([`data_of`], [`header_of`]): a reader that found the header's
//! address in a tree slot starts copying the bytes without waiting for the
//! header's cache miss, as it did with the bytes right after the header.
//!
//! Only order-0 folios of 4,096-byte pages use frames; larger folios (whose
//! copies are already as fast as `memcpy`'s) and other page sizes stay one
//! heap block each (`folio.rs`).
//!
//! # The pool
//! One mutex guards the chunks: each keeps a stack of its free frames and a
//! count of used ones; the chunks with free frames are listed. The pool is
//! taken on a fill (a miss, which reads the source) and on a folio's final
//! free (an epoch destructor), never on a hit.
//!
//! Each cache that uses frames reserves its budget with the pool while it
//! lives ([`Reservation`]). A chunk whose frames are all free is kept for
//! reuse while the chunks held stay within the caches' budgets (plus one
//! chunk); past that, and once the caches are gone, it goes back to the
//! allocator. So the memory the pool holds is bounded by the budgets (and
//! the folios awaiting their grace period), as the caches' pages are, and
//! a cache refilled after a drop does not fault its memory in again: with
//! every empty chunk given back at once, a fill after a drop of the whole
//! cache cost 2.7 µs against 1.6 µs with the allocator's blocks (which
//! keeps them), and 1.15 µs with the chunks kept.
//!
//! The pool is process-wide (a folio is freed from an epoch destructor,
//! which knows no cache). It is a plain mutex, not one of `sync.rs`'s
//! primitives: the model-checked build (`rcufs_loom`) uses no frames, and
//! nothing is shared through the pool but its own lists. With
//! `PAGECACHE_SYSTEM_ALLOC=1` in the environment (read once) no frames are
//! used either, so that valgrind's memcheck sees every folio's allocation
//! and free (a frame reused by the pool hides a use after free from it).
//!
//! # Invariants
//! - A frame is in its chunk's free stack or owned by exactly one folio.
//! - A chunk is in `chunks` from its allocation to its release; it is
//!   listed in `partial` exactly when it has a free frame.
//! - A frame's bytes are zeroed when it is handed out (and, in debug
//!   builds, poisoned when given back).

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{LazyLock, Mutex};

/// The bytes of one frame (the page size that uses frames).
pub(crate) const FRAME: usize = 4096;
/// A chunk's size and alignment.
const CHUNK: usize = 2 << 20;
/// One header slot (a folio header's size and alignment).
pub(crate) const SLOT: usize = 64;
/// Frames per chunk.
const FRAMES: usize = CHUNK / FRAME;
/// The frames the header slots take (and whose own slots go unused).
const FIRST: usize = FRAMES * SLOT / FRAME;

struct Chunk {
    /// The chunk's start, with the allocation's provenance.
    base: NonNull<u8>,
    /// Free frame numbers (`FIRST..FRAMES`).
    free: Vec<u16>,
    used: usize,
}

// SAFETY: a chunk is plain memory owned by the pool; the pointer is only
// used under the pool's mutex or by the folio a frame was handed to.
unsafe impl Send for Chunk {}

#[derive(Default)]
struct Pool {
    /// Chunks by start address.
    chunks: HashMap<usize, Chunk>,
    /// Start addresses of the chunks with a free frame.
    partial: Vec<usize>,
    /// The budgets of the live caches that use frames, in bytes.
    reserved: usize,
}

/// A cache's budget, reserved with the pool while the cache lives (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct Reservation(usize);

impl Reservation {
    /// Reserves `bytes` (a cache's budget).
    pub(crate) fn new(bytes: usize) -> Self {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        pool.reserved = pool.reserved.saturating_add(bytes);
        Self(bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        pool.reserved = pool.reserved.saturating_sub(self.0);
        // Empty chunks past the budgets left go back now; others as their
        // frames come back.
        let over = |pool: &Pool| pool.chunks.len() * CHUNK > pool.reserved + CHUNK;
        let empty: Vec<usize> = pool
            .chunks
            .iter()
            .filter(|(_, c)| c.used == 0)
            .map(|(&b, _)| b)
            .collect();
        for base in empty {
            if !over(&pool) {
                break;
            }
            release(&mut pool, base);
        }
    }
}

/// Gives an empty chunk back to the allocator.
fn release(pool: &mut Pool, base: usize) {
    let chunk = pool.chunks.remove(&base).expect("a known chunk");
    debug_assert_eq!(chunk.used, 0);
    pool.partial.retain(|&b| b != base);
    // SAFETY: every frame of the chunk is free, and the chunk is a mapping
    // of `CHUNK` bytes of its own (`map_chunk`).
    let r = unsafe { libc::munmap(chunk.base.as_ptr().cast(), CHUNK) };
    debug_assert_eq!(r, 0, "munmap of a chunk: {}", std::io::Error::last_os_error());
}

/// Maps a fresh chunk: `CHUNK` zeroed bytes aligned to `CHUNK`, a mapping
/// of its own (so that `release` unmaps exactly it), marked for huge
/// pages.
fn map_chunk() -> NonNull<u8> {
    // Twice the size, then the unaligned ends cut off: mmap aligns to a
    // page only.
    let len = 2 * CHUNK;
    // SAFETY: a fresh anonymous private mapping; nothing is replaced.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        // As the allocator does when the system has no memory to give.
        std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(CHUNK, CHUNK).expect("a chunk's layout"));
    }
    let start = ptr.cast::<u8>();
    let head = start.addr().next_multiple_of(CHUNK) - start.addr();
    let tail = len - head - CHUNK;
    // SAFETY: both ranges are parts of the mapping just made, outside the
    // aligned chunk kept; a zero-length range is skipped.
    unsafe {
        if head > 0 {
            libc::munmap(ptr, head);
        }
        if tail > 0 {
            libc::munmap(start.add(head + CHUNK).cast(), tail);
        }
    }
    // SAFETY: `head + CHUNK <= len`, inside the mapping.
    let base = unsafe { start.add(head) };
    // Only advice: without transparent huge pages (or with them off) the
    // chunk is backed by small pages, as any other memory.
    // SAFETY: the range is the chunk, a mapping of this process.
    unsafe { libc::madvise(base.cast(), CHUNK, libc::MADV_HUGEPAGE) };
    NonNull::new(base).expect("mmap never maps at address 0 here")
}

static POOL: LazyLock<Mutex<Pool>> = LazyLock::new(|| Mutex::new(Pool::default()));

static ENABLED: LazyLock<bool> =
    LazyLock::new(|| cfg!(not(rcufs_loom)) && std::env::var_os("PAGECACHE_SYSTEM_ALLOC").is_none_or(|v| v != "1"));

/// Whether folios of `order` with pages of `page_size` bytes live in frames.
#[inline]
pub(crate) fn used_for(order: u32, page_size: usize) -> bool {
    order == 0 && page_size == FRAME && *ENABLED
}

/// The bytes of the frame whose header slot is at `header`.
#[inline]
pub(crate) fn data_of<T>(header: *const T) -> *mut u8 {
    header.cast::<u8>().cast_mut().map_addr(|a| {
        let base = a & !(CHUNK - 1);
        base + (a - base) * (FRAME / SLOT)
    })
}

/// The header slot of the frame whose bytes start at `data`.
#[inline]
pub(crate) fn header_of(data: *const u8) -> *mut u8 {
    data.cast_mut().map_addr(|a| {
        let base = a & !(CHUNK - 1);
        base + (a - base) / (FRAME / SLOT)
    })
}

/// A free frame: the address of its header slot (`SLOT` bytes, aligned to
/// them); its `FRAME` bytes, zeroed, are at [`data_of`] that address.
pub(crate) fn alloc_frame() -> NonNull<u8> {
    let header = {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let base = match pool.partial.last() {
            Some(&b) => b,
            None => {
                let ptr = map_chunk();
                let b = ptr.as_ptr().addr();
                pool.chunks.insert(
                    b,
                    Chunk {
                        base: ptr,
                        free: (FIRST as u16..FRAMES as u16).rev().collect(),
                        used: 0,
                    },
                );
                pool.partial.push(b);
                b
            }
        };
        let chunk = pool.chunks.get_mut(&base).expect("a listed chunk is known");
        let frame = chunk.free.pop().expect("a listed chunk has a free frame") as usize;
        chunk.used += 1;
        // SAFETY: `frame < FRAMES`, so the slot is inside the chunk.
        let header = unsafe { chunk.base.add(frame * SLOT) };
        if chunk.free.is_empty() {
            pool.partial.pop();
        }
        header
    };
    // SAFETY: the frame is this caller's alone from now on, and its bytes
    // are `FRAME` bytes inside the chunk.
    unsafe { std::ptr::write_bytes(data_of(header.as_ptr()), 0, FRAME) };
    header
}

/// Gives back the frame whose header slot is at `header`.
///
/// # Safety
/// `header` came from [`alloc_frame`], is given back once, and nobody
/// touches the frame's slot or bytes any more.
pub(crate) unsafe fn free_frame(header: NonNull<u8>) {
    // Debug builds poison a freed frame, so that a read of it after its
    // free (which the epoch must prevent) shows in the tests' checks of
    // the bytes instead of passing as the old ones.
    #[cfg(debug_assertions)]
    // SAFETY: per the contract nobody touches the frame any more.
    unsafe {
        std::ptr::write_bytes(data_of(header.as_ptr()), 0xdb, FRAME);
    }
    let a = header.as_ptr().addr();
    let base = a & !(CHUNK - 1);
    let frame = (a - base) / SLOT;
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let pool = &mut *pool;
    let chunk = pool.chunks.get_mut(&base).expect("a frame's chunk is live");
    let was_full = chunk.free.is_empty();
    chunk.free.push(frame as u16);
    chunk.used -= 1;
    if was_full {
        pool.partial.push(base);
    }
    if chunk.used == 0 && pool.chunks.len() * CHUNK > pool.reserved + CHUNK {
        release(pool, base);
    }
}

/// The process's page frames (`frames.rs`): bytes of chunks held, and
/// bytes of frames in use. Every cache of the process shares the frames.
pub fn usage() -> FrameUsage {
    let pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    FrameUsage {
        chunk_bytes: (pool.chunks.len() * CHUNK) as u64,
        used_bytes: (pool.chunks.values().map(|c| c.used).sum::<usize>() * FRAME) as u64,
    }
}

/// What [`usage`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameUsage {
    /// Bytes of the 2 MiB chunks held (frames, their header slots, and the
    /// free frames kept for reuse).
    pub chunk_bytes: u64,
    /// Bytes of the frames that hold a folio now.
    pub used_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_bytes_map_to_each_other_and_frames_come_back() {
        if !*ENABLED {
            return;
        }
        let mut got = Vec::new();
        // More than a chunk's worth, so that a second chunk is made.
        for _ in 0..(FRAMES - FIRST) + 10 {
            let h = alloc_frame();
            let d = data_of(h.as_ptr());
            assert_eq!(h.as_ptr().addr() % SLOT, 0);
            assert_eq!(d.addr() % FRAME, 0, "frames are page-aligned");
            assert_eq!(header_of(d), h.as_ptr());
            // SAFETY: the frame is ours.
            let bytes = unsafe { std::slice::from_raw_parts_mut(d, FRAME) };
            assert!(bytes.iter().all(|&b| b == 0));
            bytes.fill(0xa5);
            got.push(h);
        }
        let mut addrs: Vec<usize> = got.iter().map(|h| h.as_ptr().addr()).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), got.len(), "a frame handed out twice");
        for h in got {
            // SAFETY: each frame is given back once.
            unsafe { free_frame(h) };
        }
        // Handed out again, zeroed.
        let h = alloc_frame();
        // SAFETY: the frame is ours.
        let bytes = unsafe { std::slice::from_raw_parts(data_of(h.as_ptr()), FRAME) };
        assert!(bytes.iter().all(|&b| b == 0));
        // SAFETY: given back once.
        unsafe { free_frame(h) };
    }
}
