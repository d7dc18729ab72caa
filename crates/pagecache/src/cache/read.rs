//! Ranged reads: a byte range of one inode copied out of the cache
//! ([`PageCache::read_into`], [`PageCache::read_range_into`]) or handed out
//! as counted slices of the cached folios for a zero-copy reply
//! ([`PageCache::read_refs`]), filling misses as they come.
//!
//! # Algorithm
//! Under one epoch pin, one descent finds the leaf of the first index; the
//! folio in that slot serves every byte of the range it covers (one copy or
//! one reference per folio, not per page), and the next folio is read from
//! the slot after the folio's run in the same leaf, with a new descent only
//! on entering another leaf. A slot that holds no folio whose fill is over
//! (missing, filling, being removed) ends the run: that index goes through
//! the fill path (`get_or_fill_ref`: wait for the fill or fill it), and the
//! walk resumes after it. One statistics update per call.
//!
//! # Invariants
//! - A copy takes no reference: it reads a folio whose slot pointer it
//!   loaded (Acquire) tagged ready, under the guard it still holds. The
//!   filler stores the ready tag (Release) after the bytes and the length,
//!   bytes never change after the fill, and the guard keeps the memory (the
//!   tree's reference is dropped after the grace period), so the copy is the
//!   folio as it was when its slot was read, whatever happens to it
//!   meanwhile. The slot's tag also gives the folio's order and whether it
//!   is short, so the copy of a full folio does not wait for the header's
//!   load (a cache miss of its own, like the slot and the bytes).
//! - A [`FolioSlice`] holds one reference to its folio, taken with the
//!   speculative get and its accuracy check (the slot re-read after the
//!   reference is taken, §3.1.2).
//! - A read stops at the end of the file as the cache knows it: the valid
//!   length of a folio shorter than its capacity.
//!
//! Seed 002, "A Concurrent Pagecache", §3.1.2 (speculative references); the
//! reference-less copy relies on the copy-on-write of `write.rs`.

use super::{FillOrder, FolioRef, Inode, PageCache, Want};
use crate::FolioSlice;
use crate::folio::{Folio, slot_bytes, slot_tag};
use crate::radix::SLOTS;
use crate::radix::node::Node;
use crate::sync::epoch::{Guard, Shared};

/// Why a walk over cached folios stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// It reached the end of the range.
    Done,
    /// A folio shorter than its capacity ended the file.
    Eof,
    /// The next index holds no folio whose fill is over (or the visitor
    /// refused it).
    Miss,
}

/// Where a walk stopped: the byte it reached, why, and the pages whose
/// bytes it took (for the hit count).
struct Walk {
    at: u64,
    stop: Stop,
    pages: u64,
}

/// One folio of a walk: where it was found and the part of its bytes the
/// range takes.
struct Visit<'g> {
    leaf: &'g Node<Folio>,
    slot: usize,
    item: Shared<'g, Folio>,
    folio: &'g Folio,
    /// The range's bytes of this folio, starting `from` bytes into it.
    piece: &'g [u8],
    from: usize,
}

/// The part of `folio`'s valid bytes that the range `at..end` takes next:
/// the offset into the folio and the length, and whether the file ends
/// right after it. None if `at` is past the valid bytes (the file ended).
fn piece_of(folio: &Folio, page_size: u64, at: u64, end: u64) -> Option<(usize, usize, bool)> {
    let start = folio.index() * page_size;
    let len = folio.len() as u64;
    let from = at - start;
    if from >= len {
        return None;
    }
    let n = (len - from).min(end - at);
    let eof = len < folio.capacity() as u64 && from + n == len;
    Some((from as usize, n as usize, eof))
}

impl PageCache {
    /// The pages that bytes `from..from + n` of a folio touch.
    #[inline]
    fn pages_of(&self, from: usize, n: usize) -> u64 {
        let (from, n) = (from as u64, n as u64);
        self.page_of(from + n - 1) - self.page_of(from) + 1
    }

    /// Walks the cached folios of `inode` from byte `at` towards `end` under
    /// `guard`, calling `visit` for each folio whose fill is over with the
    /// part of its bytes the range takes; `visit` returns false to stop
    /// there (that index is then a miss). See the module docs.
    fn walk<'g>(
        &self,
        inode: &'g Inode,
        mut at: u64,
        end: u64,
        guard: &'g Guard,
        mut visit: impl FnMut(Visit<'g>) -> bool,
    ) -> Walk {
        let ps = self.ps();
        let mut pages = 0;
        let mut loc = inode.pages.find_leaf(self.page_of(at), guard);
        let stop = loop {
            if at >= end {
                break Stop::Done;
            }
            let Some((leaf, slot)) = loc else { break Stop::Miss };
            // Acquire (in `item`): pairs with the Release store of the slot
            // by the filler's `retag_with` (or the insert or replace of a
            // built folio), which follows its writes of the bytes and the
            // length; so a ready tag means they are visible.
            let item = leaf.item(slot, guard);
            // SAFETY: the item was in the slot while `guard` is pinned; it is
            // retired only after leaving the slot.
            let Some(folio) = (unsafe { item.as_ref() }) else {
                break Stop::Miss;
            };
            // Everything the copy needs is in the slot's tag: whether the
            // fill is over, where the folio starts, its size, and whether
            // its valid length is shorter (then, only, the header is read).
            // The header is not loaded otherwise: the copy waits for the
            // slot only, as a copy from a plain array waits for its index.
            let (order, ready, short) = slot_tag(item);
            if !ready {
                break Stop::Miss;
            }
            let first = self.page_of(at) & !((1u64 << order) - 1);
            let start = first * ps;
            debug_assert_eq!((folio.index(), folio.order()), (first, order));
            let cap = ps << order;
            let len = if short { folio.len() as u64 } else { cap };
            let from = at - start;
            if from >= len {
                break Stop::Eof;
            }
            let n = (len - from).min(end - at);
            let eof = short && from + n == len;
            let (from, n) = (from as usize, n as usize);
            // SAFETY: the slot's tag says the fill is over (and the Acquire
            // above orders the bytes before us), `guard`, under which the
            // folio was in a slot, keeps it alive for 'g, and the range is
            // within the valid length.
            let piece = unsafe { slot_bytes(item, from, n) };
            let v = Visit {
                leaf,
                slot,
                item,
                folio,
                piece,
                from,
            };
            if !visit(v) {
                break Stop::Miss;
            }
            Self::touch(inode, leaf, first);
            pages += self.pages_of(from, n);
            at += n as u64;
            if eof {
                break Stop::Eof;
            }
            // The next folio is in the slot after this one's run, in this
            // leaf unless the run ends it; a leaf unlinked meanwhile has only
            // empty slots, which sends us to the fill path.
            let next = (first % SLOTS as u64 + (1 << order)) as usize;
            loc = if next < SLOTS {
                Some((leaf, next))
            } else {
                first
                    .checked_add(1 << order)
                    .and_then(|e| inode.pages.find_leaf(e, guard))
            };
        };
        Walk { at, stop, pages }
    }

    /// Reads `len` bytes from `offset` by walking the cache and filling
    /// misses as `order` says, handing each piece of bytes to `sink` (a
    /// borrowed copy source, or the folio with the piece's place in it).
    /// Returns the bytes read: fewer than `len` at the end of the file.
    #[allow(clippy::too_many_arguments)] // Private; the three callers differ in each.
    fn read_with<E>(
        &self,
        ino: u64,
        offset: u64,
        len: usize,
        order: FillOrder,
        take_refs: bool,
        fill: &mut impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
        sink: &mut impl FnMut(Piece<'_>),
    ) -> Result<usize, E> {
        let ps = self.ps();
        let end = offset.saturating_add(len as u64);
        let mut at = offset;
        let mut hits = 0u64;
        let mut first_miss = true;
        while at < end {
            // The fast path: a run of filled folios, walked leaf by leaf.
            let w = {
                let guard = self.domain.pin();
                match self.inodes.lookup(ino, &guard) {
                    Some(inode) => self.walk(inode, at, end, &guard, |v| {
                        if !take_refs {
                            sink(Piece::Bytes(v.piece));
                            return true;
                        }
                        if v.folio.try_get().is_err() {
                            return false; // Being removed: the fill path waits.
                        }
                        // SAFETY: `try_get` gave us a reference.
                        let r = unsafe { FolioRef::from_raw(v.folio.ptr()) };
                        // Accuracy, as in `lookup_folio`: the same leaf slot
                        // still holds the folio (Acquire in `item`, pairing
                        // with the Release store of the slot).
                        if v.leaf.item(v.slot, &guard) != v.item {
                            return false; // `r` drops the reference.
                        }
                        sink(Piece::Ref(r, v.from, v.piece.len()));
                        true
                    }),
                    None => Walk {
                        at,
                        stop: Stop::Miss,
                        pages: 0,
                    },
                }
            };
            hits += w.pages;
            at = w.at;
            if w.stop != Stop::Miss {
                break;
            }
            // The slow path for one folio: wait for its fill or fill it.
            let index = self.page_of(at);
            let want = Want {
                order,
                pages: self.page_of(end - 1) - index + 1,
                first_miss,
            };
            first_miss = false;
            let (r, _) = self.get_or_fill_ref(ino, index, want, &mut *fill)?;
            let Some((from, n, eof)) = piece_of(&r, ps, at, end) else {
                break;
            };
            at += n as u64;
            if take_refs {
                sink(Piece::Ref(r, from, n));
            } else {
                // SAFETY: `get_or_fill_ref` returns a folio whose fill
                // succeeded, and our reference keeps it alive.
                sink(Piece::Bytes(&unsafe { r.bytes() }[from..from + n]));
            }
            if eof {
                break;
            }
        }
        self.hits.add(hits as i64);
        Ok((at - offset) as usize)
    }

    /// Copies the cached bytes of `ino` from `offset` into `buf`, filling
    /// missing pages with `fill(index, page_buf)` (as
    /// [`get_or_fill`](Self::get_or_fill) does, same contract per page), and
    /// returns the number of bytes copied: `buf.len()`, or fewer when the
    /// end of the file (a page or folio shorter than its size) ends the
    /// range.
    ///
    /// This is a cached read of several pages with the cost of about one
    /// copy: one epoch pin and one descent for a run of cached folios (see
    /// the module docs), no reference taken (folios never change after
    /// their fill), one statistics update per call. A page that is missing
    /// or being filled or removed goes through `get_or_fill`.
    ///
    /// Where `buf` starts matters to the copy: single 4 KiB pages are
    /// page-aligned, and glibc's `memcpy` (2.36, `rep movsb` on CPUs with
    /// fast strings) was measured about four times slower on AMD EPYC when
    /// the destination is 1 to 31 bytes past the source modulo 4 KiB. A
    /// buffer that starts on a page boundary avoids it; a heap block of
    /// 128 KiB or more from glibc starts 16 bytes past one.
    pub fn read_into<E>(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let len = buf.len();
        let mut done = 0usize;
        let mut sink = |p: Piece<'_>| {
            let bytes = p.bytes();
            buf[done..done + bytes.len()].copy_from_slice(bytes);
            done += bytes.len();
        };
        self.read_with(ino, offset, len, FillOrder::Order(0), false, &mut fill, &mut sink)
    }

    /// Appends up to `len` bytes of `ino` from `offset` to `out`, written
    /// straight into its spare capacity (reserved first; nothing is zeroed
    /// before the copy), and returns the number appended: `len`, or fewer
    /// at the end of the file. Misses are filled as `order` says:
    /// `fill(first, buf)` gets the first page index of the folio to fill
    /// and a zeroed buffer of its size, and returns how many bytes it read
    /// (a short count is the end of the file), as for
    /// [`get_or_fill_folio`](Self::get_or_fill_folio). With
    /// [`FillOrder::Readahead`], a sequential reader gets growing folios.
    /// Cached bytes are copied as in [`read_into`](Self::read_into), and
    /// what it says of the destination's placement holds for the end of
    /// `out`.
    pub fn read_range_into<E>(
        &self,
        ino: u64,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
        order: FillOrder,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        out.reserve(len);
        let mut sink = |p: Piece<'_>| out.extend_from_slice(p.bytes());
        self.read_with(ino, offset, len, order, false, &mut fill, &mut sink)
    }

    /// Appends to `out` counted slices of the cached folios that hold `len`
    /// bytes of `ino` from `offset` (one [`FolioSlice`] per folio, each the
    /// part of the folio the range covers, in file order), filling misses
    /// as [`read_range_into`](Self::read_range_into) does, and returns the
    /// number of bytes they hold: `len`, or fewer at the end of the file.
    ///
    /// For a zero-copy reply: hand the slices to a vectored write and drop
    /// them when it returns. Each holds one reference to its folio, taken
    /// once per folio (not per page): the folio is neither reclaimed nor
    /// freed, and its bytes never change, while the slice lives. Holding
    /// slices keeps their folios' memory even if the cache drops or
    /// replaces them meanwhile, and held folios cannot be reclaimed, so
    /// drop them promptly.
    pub fn read_refs<E>(
        &self,
        ino: u64,
        offset: u64,
        len: usize,
        order: FillOrder,
        out: &mut Vec<FolioSlice>,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let mut sink = |p: Piece<'_>| {
            if let Piece::Ref(r, from, n) = p {
                out.push(r.into_slice(from, n));
            }
        };
        self.read_with(ino, offset, len, order, true, &mut fill, &mut sink)
    }
}

/// A piece of a ranged read: bytes to copy, or a counted folio with the
/// offset and length of the piece in it.
enum Piece<'a> {
    Bytes(&'a [u8]),
    Ref(FolioRef, usize, usize),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Bytes(b) => b,
            Piece::Ref(r, from, n) => {
                // SAFETY: a counted folio in a piece is one whose fill
                // succeeded, and the reference keeps it alive.
                let all = unsafe { r.bytes() };
                &all[*from..*from + *n]
            }
        }
    }
}
