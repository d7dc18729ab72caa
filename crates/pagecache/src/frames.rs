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
//! free. That free is an epoch destructor, which runs in whichever thread
//! collects the epoch's garbage, sometimes one that has just pinned for a
//! hit: a hit then pays for frees, as it pays for the allocator's `free`
//! with heap folios. No system call is made under the mutex but the
//! `MADV_FREE` of a chunk whose last frame came back: chunks are mapped
//! and unmapped outside it.
//!
//! Each cache that uses frames reserves its budget with the pool while it
//! lives ([`Reservation`]). A chunk whose frames are all free is kept for
//! reuse while the chunks held stay within the caches' budgets plus one
//! chunk (so one empty chunk is kept even with no cache left); past that
//! it is unmapped. So the memory the pool holds is bounded by the budgets
//! (and the folios awaiting their grace period), as the caches' pages are,
//! and a cache refilled after a drop does not fault its memory in again
//! (on a first version, whose chunks came from the allocator, a fill after
//! a drop of the whole cache cost 2.7 µs with every empty chunk given back
//! at once and 1.15 µs with them kept; with the mapped chunks, `hitpath 9
//! pagecache_fill`, a fill costs 733-798 ns against 835-989 ns from the
//! allocator's blocks, `PAGECACHE_SYSTEM_ALLOC=1`). A kept chunk's
//! memory is lent back to the kernel with `MADV_FREE`: reclaimed only
//! under memory pressure, and otherwise written again without a fault. A
//! cache's budget also holds its larger folios, which live on the heap, so
//! without that advice a cache whose reads turned sequential could hold
//! its budget in heap folios and nearly as much again in empty chunks.
//!
//! Chunks are asked for just below the last one, where the kernel's
//! top-down placement looks first, so that they are adjacent and merge
//! into one mapping: one chunk per mapping would reach the default map
//! count limit (65,530) at about 120 GiB of frames.
//!
//! The pool is process-wide (a folio is freed from an epoch destructor,
//! which knows no cache), behind `sync.rs`'s mutex. The model-checked build
//! (`rcufs_loom`) uses no frames and never touches the pool (nothing is
//! shared through it but its own lists), so no model covers it. With
//! `PAGECACHE_SYSTEM_ALLOC=1` in the environment (read once) no frames are
//! used either, so that valgrind's memcheck sees every folio's allocation
//! and free (a frame reused by the pool hides a use after free from it).
//!
//! # Invariants
//! - A frame is in its chunk's free stack or owned by exactly one folio.
//! - A chunk is in `chunks` from its mapping until it is taken out to be
//!   unmapped; it is listed in `partial` exactly when it has a free frame,
//!   and `listed` is its place there.
//! - A frame's bytes are zeroed when it is handed out (and, in debug
//!   builds, poisoned when given back).

use crate::sync::{LazyLock, Mutex, MutexGuard};
use std::collections::HashMap;
use std::ptr::NonNull;

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
    /// Its place in [`Pool::partial`] while it is listed there.
    listed: Option<usize>,
}

// SAFETY: a chunk is plain memory owned by the pool; the pointer is only
// used under the pool's mutex, by the folio a frame was handed to, or (to
// unmap it) by the one thread that took the chunk out of the pool.
unsafe impl Send for Chunk {}

#[derive(Default)]
struct Pool {
    /// Chunks by start address.
    chunks: HashMap<usize, Chunk>,
    /// Start addresses of the chunks with a free frame (each chunk knows
    /// its place, so that one leaves the list in constant time).
    partial: Vec<usize>,
    /// The budgets of the live caches that use frames, in bytes.
    reserved: usize,
    /// Where the next chunk is asked for: just below the last one mapped,
    /// where the kernel's top-down placement would look first, so that
    /// consecutive chunks are adjacent and merge into one mapping (one
    /// entry of the process's bounded map count, `vm.max_map_count`,
    /// rather than one per 2 MiB).
    hint: usize,
}

impl Pool {
    fn lock() -> MutexGuard<'static, Pool> {
        POOL.lock()
    }

    fn list(&mut self, base: usize) {
        let chunk = self.chunks.get_mut(&base).expect("a known chunk");
        debug_assert!(chunk.listed.is_none());
        chunk.listed = Some(self.partial.len());
        self.partial.push(base);
    }

    fn unlist(&mut self, base: usize) {
        let chunk = self.chunks.get_mut(&base).expect("a known chunk");
        let Some(at) = chunk.listed.take() else { return };
        self.partial.swap_remove(at);
        if let Some(&moved) = self.partial.get(at) {
            self.chunks.get_mut(&moved).expect("a listed chunk is known").listed = Some(at);
        }
    }

    /// Whether the chunks held exceed the live caches' budgets plus one
    /// chunk (then an empty one goes back to the kernel).
    fn over(&self) -> bool {
        self.chunks.len() * CHUNK > self.reserved.saturating_add(CHUNK)
    }

    /// Takes the empty chunk at `base` out of the pool, for the caller to
    /// [`unmap`] once the pool's lock is released (an unmap flushes other
    /// CPUs' TLBs; nobody should wait for it to fill or free a frame).
    fn take(&mut self, base: usize) -> Chunk {
        self.unlist(base);
        let chunk = self.chunks.remove(&base).expect("a known chunk");
        debug_assert_eq!(chunk.used, 0);
        chunk
    }

    /// Keeps the empty chunk at `base` for reuse, its memory given to the
    /// kernel to reclaim lazily (`MADV_FREE`): under memory pressure the
    /// kernel takes it, otherwise the next fill writes it again without a
    /// fault. So the chunks kept for refills (up to the caches' budgets,
    /// while the budget may meanwhile be taken by larger folios on the
    /// heap) are not memory withheld from the rest of the system.
    fn rest(&mut self, base: usize) {
        let chunk = &self.chunks[&base];
        debug_assert_eq!(chunk.used, 0);
        // Under the lock: a frame handed out after the advice (and written)
        // is kept by the kernel, but one written before it could be lost.
        // Only a chunk's last free gets here.
        // SAFETY: the range is the chunk, a mapping of this process, and no
        // frame of it holds anything (every frame is free).
        unsafe { libc::madvise(chunk.base.as_ptr().cast(), CHUNK, libc::MADV_FREE) };
    }
}

/// A cache's budget, reserved with the pool while the cache lives (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct Reservation(usize);

impl Reservation {
    /// Reserves `bytes` (a cache's budget).
    pub(crate) fn new(bytes: usize) -> Self {
        let mut pool = Pool::lock();
        pool.reserved = pool.reserved.saturating_add(bytes);
        Self(bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let gone = {
            let mut pool = Pool::lock();
            pool.reserved = pool.reserved.saturating_sub(self.0);
            // Empty chunks past the budgets left go back now; others as
            // their frames come back.
            let empty: Vec<usize> = pool
                .chunks
                .iter()
                .filter(|(_, c)| c.used == 0)
                .map(|(&b, _)| b)
                .collect();
            let mut gone = Vec::new();
            for base in empty {
                if !pool.over() {
                    break;
                }
                gone.push(pool.take(base));
            }
            gone
        };
        gone.into_iter().for_each(unmap);
    }
}

/// Gives an empty chunk taken out of the pool back to the kernel; if the
/// kernel refuses (an unmap in the middle of a mapping splits it, which
/// the map count can forbid), the chunk goes back to the pool instead, so
/// that its memory is still used and accounted for.
fn unmap(chunk: Chunk) {
    // SAFETY: every frame of the chunk is free, the chunk is out of the pool
    // (nobody else can hand out its frames), and it is `CHUNK` bytes of a
    // mapping made by `map_chunk`.
    let r = unsafe { libc::munmap(chunk.base.as_ptr().cast(), CHUNK) };
    if r != 0 {
        let mut pool = Pool::lock();
        let base = chunk.base.as_ptr().addr();
        pool.chunks.insert(base, chunk);
        pool.list(base);
        pool.rest(base);
    }
}

/// An anonymous private read-write mapping of `len` bytes, at `at` if that
/// range is free (a hint: without `MAP_FIXED` nothing is replaced).
fn mmap_anon(at: usize, len: usize) -> Option<NonNull<u8>> {
    // SAFETY: a fresh anonymous private mapping; without MAP_FIXED the
    // address is only a hint and nothing mapped is replaced.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::without_provenance_mut(at),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(ptr.cast())
    }
}

/// Maps a fresh chunk: `CHUNK` zeroed bytes aligned to `CHUNK`, a mapping
/// of its own (so that `unmap` unmaps exactly it), marked for huge
/// pages; at `hint` if that range is free (see [`Pool::hint`]).
fn map_chunk(hint: usize) -> NonNull<u8> {
    let layout = || std::alloc::Layout::from_size_align(CHUNK, CHUNK).expect("a chunk's layout");
    // First the chunk alone, at the hint, or where the kernel puts it
    // (Linux aligns anonymous mappings of a multiple of 2 MiB to 2 MiB
    // where transparent huge pages are possible).
    let base = match mmap_anon(hint, CHUNK) {
        Some(p) if p.as_ptr().addr().is_multiple_of(CHUNK) => p,
        other => {
            if let Some(p) = other {
                // SAFETY: the mapping just made, which nobody else knows.
                unsafe { libc::munmap(p.as_ptr().cast(), CHUNK) };
            }
            // Then twice the size, with the unaligned ends cut off. The
            // highest aligned chunk is kept: the next mapping the kernel
            // places (top-down) then tends to end where it begins.
            let len = 2 * CHUNK;
            let Some(start) = mmap_anon(0, len) else {
                // As the allocator does when the system has no memory to give.
                std::alloc::handle_alloc_error(layout())
            };
            let s = start.as_ptr().addr();
            let head = ((s + len - CHUNK) & !(CHUNK - 1)) - s;
            let tail = len - head - CHUNK;
            // SAFETY: both ranges are parts of the mapping just made,
            // outside the aligned chunk kept; a zero-length range is
            // skipped.
            unsafe {
                if head > 0 {
                    libc::munmap(start.as_ptr().cast(), head);
                }
                if tail > 0 {
                    libc::munmap(start.as_ptr().add(head + CHUNK).cast(), tail);
                }
            }
            // SAFETY: `head + CHUNK <= len`, inside the mapping.
            unsafe { start.add(head) }
        }
    };
    // Only advice: without transparent huge pages (or with them off) the
    // chunk is backed by small pages, as any other memory.
    // SAFETY: the range is the chunk, a mapping of this process.
    unsafe { libc::madvise(base.as_ptr().cast(), CHUNK, libc::MADV_HUGEPAGE) };
    base
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
        let mut pool = Pool::lock();
        loop {
            if let Some(&base) = pool.partial.last() {
                let chunk = pool.chunks.get_mut(&base).expect("a listed chunk is known");
                let frame = chunk.free.pop().expect("a listed chunk has a free frame") as usize;
                chunk.used += 1;
                // SAFETY: `frame < FRAMES`, so the slot is inside the chunk.
                let header = unsafe { chunk.base.add(frame * SLOT) };
                if chunk.free.is_empty() {
                    pool.unlist(base);
                }
                break header;
            }
            // No free frame: a new chunk, mapped without the lock (another
            // thread may map one meanwhile; both are kept).
            let hint = pool.hint;
            drop(pool);
            let ptr = map_chunk(hint);
            pool = Pool::lock();
            let b = ptr.as_ptr().addr();
            pool.hint = b.saturating_sub(CHUNK);
            pool.chunks.insert(
                b,
                Chunk {
                    base: ptr,
                    free: (FIRST as u16..FRAMES as u16).rev().collect(),
                    used: 0,
                    listed: None,
                },
            );
            pool.list(b);
        }
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
    debug_assert!(
        a.is_multiple_of(SLOT) && (FIRST..FRAMES).contains(&frame),
        "not a frame's header: {a:#x}"
    );
    let gone = {
        let mut pool = Pool::lock();
        let pool = &mut *pool;
        let chunk = pool.chunks.get_mut(&base).expect("a frame's chunk is live");
        debug_assert!(
            !chunk.free.contains(&(frame as u16)),
            "frame {frame} of {base:#x} freed twice"
        );
        let was_full = chunk.free.is_empty();
        chunk.free.push(frame as u16);
        chunk.used -= 1;
        let empty = chunk.used == 0;
        if was_full {
            pool.list(base);
        }
        match (empty, pool.over()) {
            (true, true) => Some(pool.take(base)),
            (true, false) => {
                pool.rest(base);
                None
            }
            _ => None,
        }
    };
    if let Some(chunk) = gone {
        unmap(chunk);
    }
}

/// The process's page frames (`frames.rs`): bytes of chunks held, and
/// bytes of frames in use. Every cache of the process shares the frames.
pub fn usage() -> FrameUsage {
    if !*ENABLED {
        return FrameUsage::default();
    }
    let pool = Pool::lock();
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

    /// The mappings of this process that overlap `[start, end)`.
    fn mappings_over(start: usize, end: usize) -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .expect("/proc/self/maps")
            .lines()
            .filter(|l| {
                let range = l.split_whitespace().next().expect("a range");
                let (a, b) = range.split_once('-').expect("start-end");
                let (a, b) = (
                    usize::from_str_radix(a, 16).unwrap(),
                    usize::from_str_radix(b, 16).unwrap(),
                );
                a < end && start < b
            })
            .count()
    }

    #[test]
    fn chunks_are_aligned_and_placed_to_merge_into_few_mappings() {
        if !*ENABLED {
            return;
        }
        // As `alloc_frame` asks for them: each below the last.
        let mut hint = 0;
        let mut bases = Vec::new();
        for _ in 0..8 {
            let b = map_chunk(hint);
            assert!(b.as_ptr().addr().is_multiple_of(CHUNK), "unaligned chunk {b:p}");
            hint = b.as_ptr().addr().saturating_sub(CHUNK);
            bases.push(b);
        }
        let lo = bases.iter().map(|b| b.as_ptr().addr()).min().unwrap();
        let hi = bases.iter().map(|b| b.as_ptr().addr()).max().unwrap() + CHUNK;
        let maps = mappings_over(lo, hi);
        for b in bases {
            // SAFETY: each chunk was mapped above and is used by nobody.
            unsafe { libc::munmap(b.as_ptr().cast(), CHUNK) };
        }
        // Other tests' threads may map memory meanwhile and take a hint's
        // place now and then; one mapping per chunk means no merging at all.
        assert!(maps <= 4, "8 chunks in {maps} mappings over {lo:#x}..{hi:#x}");
    }

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
