//! Values appended in order and read by index or in order, in chunks of [`CHUNK`]: the digest's
//! launches and batches (`launch_table`, `digest`), the GUI's timeline columns
//! (`gui/src/lanes.rs`).
//!
//! Growing never copies what is there, nor holds room for as many again. A clone shares the
//! full chunks (a live view's snapshot of a long run costs pointers and the chunk being
//! filled); a full chunk is copied only when one side changes it. The chunk being filled is
//! this column's alone, so a push or a change there takes no atomic operation (the fold of a
//! long trace pushes one value per event into several columns).
//!
//! A column given a [`Spill`] keeps only its newest full chunk and the one being filled in
//! memory: older chunks go to the spill and are read back a chunk at a time when walked. What
//! `report` holds of a long trace then no longer grows with the trace (issue 23): a 10 M-event
//! trace's launches alone are 60 MB in memory.

use std::sync::Arc;

/// Where a column's full chunks go when they leave memory. The caller gives it (the CLI a
/// temporary file, `cli/src/spill.rs`): the analyses do no I/O of their own.
pub trait Spill: Send + Sync + std::fmt::Debug {
    /// Keeps `bytes`; where they lie, or `None` when they could not be kept (the chunk then
    /// stays in memory).
    fn put(&self, bytes: &[u8]) -> Option<u64>;
    /// Fills `buf`, all of it, with the bytes kept from `at`. A spill that cannot must not
    /// return: the values are needed and no walk over them can be told (`report`'s ends the
    /// process with one line, before anything is written).
    fn get(&self, at: u64, buf: &mut [u8]);
}

pub(crate) const CHUNK_BITS: u32 = 16;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;

/// How many of the newest full chunks a spilling column keeps in memory: completions change
/// launches shortly after them.
const KEPT: usize = 1;

/// A full chunk: in memory, or at this place in the column's spill.
enum Chunk<T> {
    Held(Arc<Vec<T>>),
    Spilled(u64),
}

impl<T> Clone for Chunk<T> {
    fn clone(&self) -> Self {
        match self {
            Chunk::Held(a) => Chunk::Held(Arc::clone(a)),
            &Chunk::Spilled(at) => Chunk::Spilled(at),
        }
    }
}

/// A spill and how this column's values go to bytes and back (plain values only:
/// [`Column::spill_to`] requires [`bytemuck::Pod`], the other methods do not).
struct Spiller<T> {
    store: Arc<dyn Spill>,
    put: fn(&dyn Spill, &[T]) -> Option<u64>,
    /// `n` values from the `from`-th of the chunk at `at`, into the buffer (replaced).
    get: fn(&dyn Spill, u64, usize, usize, &mut Vec<T>),
}

impl<T> Clone for Spiller<T> {
    fn clone(&self) -> Self {
        Spiller {
            store: Arc::clone(&self.store),
            put: self.put,
            get: self.get,
        }
    }
}

fn put_plain<T: bytemuck::Pod>(s: &dyn Spill, values: &[T]) -> Option<u64> {
    s.put(bytemuck::cast_slice(values))
}

fn get_plain<T: bytemuck::Pod>(s: &dyn Spill, at: u64, from: usize, n: usize, buf: &mut Vec<T>) {
    // Every value is overwritten: only a buffer that grows is filled first.
    buf.truncate(n);
    buf.resize(n, T::zeroed());
    let offset = (from * std::mem::size_of::<T>()) as u64;
    s.get(at + offset, bytemuck::cast_slice_mut(buf));
}

/// A column of values (see the module's doc).
pub struct Column<T> {
    /// Full chunks of [`CHUNK`] values.
    chunks: Vec<Chunk<T>>,
    /// The values after them, fewer than [`CHUNK`].
    tail: Vec<T>,
    spill: Option<Spiller<T>>,
    /// No chunk before this one is held in memory, but for the [`KEPT`] newest.
    spilled_to: usize,
}

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column {
            chunks: Vec::new(),
            tail: Vec::new(),
            spill: None,
            spilled_to: 0,
        }
    }
}

impl<T: Clone> Clone for Column<T> {
    fn clone(&self) -> Self {
        Column {
            chunks: self.chunks.clone(),
            tail: self.tail.clone(),
            spill: self.spill.clone(),
            spilled_to: self.spilled_to,
        }
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Column")
            .field("len", &self.len())
            .field("spilled", &self.spill.is_some())
            .finish()
    }
}

impl<T: Copy + PartialEq> PartialEq for Column<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: bytemuck::Pod> Column<T> {
    /// Sends this column's full chunks, but the newest, to `store` from now on (and those it
    /// holds already).
    pub fn spill_to(&mut self, store: Arc<dyn Spill>) {
        self.spill = Some(Spiller {
            store,
            put: put_plain::<T>,
            get: get_plain::<T>,
        });
        self.spill_old();
    }
}

impl<T: Copy> Column<T> {
    pub fn len(&self) -> usize {
        (self.chunks.len() << CHUNK_BITS) + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.tail.is_empty()
    }

    pub fn push(&mut self, v: T) {
        if self.tail.len() == CHUNK {
            self.seal();
        }
        self.tail.push(v);
    }

    /// Appends `values` in order, a chunk at a time (what pushing each would leave).
    pub fn extend_from_slice(&mut self, mut values: &[T]) {
        while !values.is_empty() {
            if self.tail.len() == CHUNK {
                self.seal();
            }
            let room = CHUNK - self.tail.len();
            let (now, rest) = values.split_at(room.min(values.len()));
            self.tail.extend_from_slice(now);
            values = rest;
        }
    }

    /// The full tail becomes a chunk. The first tail grew by doubling (a short column stays
    /// small); later ones are made whole at once.
    fn seal(&mut self) {
        let full = std::mem::replace(&mut self.tail, Vec::with_capacity(CHUNK));
        self.chunks.push(Chunk::Held(Arc::new(full)));
        self.spill_old();
    }

    /// Spills the chunks held in memory but the [`KEPT`] newest.
    fn spill_old(&mut self) {
        let Some(s) = &self.spill else {
            return;
        };
        let old = self.chunks.len().saturating_sub(KEPT);
        for c in self
            .chunks
            .get_mut(self.spilled_to..old)
            .unwrap_or_default()
        {
            if let Chunk::Held(values) = c
                && let Some(at) = (s.put)(&*s.store, values)
            {
                *c = Chunk::Spilled(at);
            }
        }
        self.spilled_to = self.spilled_to.max(old);
    }

    /// The `i`-th value.
    pub fn get(&self, i: usize) -> Option<T> {
        let (c, j) = (i >> CHUNK_BITS, i & (CHUNK - 1));
        // Most reads and changes are of the newest values (a launch's completions).
        if c == self.chunks.len() {
            return self.tail.get(j).copied();
        }
        match self.chunks.get(c) {
            Some(Chunk::Held(values)) => values.get(j).copied(),
            Some(&Chunk::Spilled(at)) => {
                let s = self.spill.as_ref()?;
                let mut one = Vec::with_capacity(1);
                (s.get)(&*s.store, at, j, 1, &mut one);
                one.first().copied()
            }
            None if c == self.chunks.len() => self.tail.get(j).copied(),
            None => None,
        }
    }

    /// The `i`-th value; `i < len`, as indexing a slice.
    pub fn at(&self, i: usize) -> T {
        let c = i >> CHUNK_BITS;
        match self.chunks.get(c) {
            Some(Chunk::Held(values)) => values[i & (CHUNK - 1)],
            Some(&Chunk::Spilled(at)) => {
                let mut one = Vec::with_capacity(1);
                if let Some(s) = &self.spill {
                    (s.get)(&*s.store, at, i & (CHUNK - 1), 1, &mut one);
                }
                // A chunk is spilled only where the column has a spill.
                one[0]
            }
            None => self.tail[i - (self.chunks.len() << CHUNK_BITS)],
        }
    }

    /// Replaces the `i`-th value (nothing past the end).
    pub fn set(&mut self, i: usize, v: T) {
        if let Some(slot) = self.get_mut(i) {
            *slot = v;
        }
    }

    /// The `i`-th value to change: a spilled chunk comes back into memory (and goes again
    /// with the next chunk filled), a shared one is copied.
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let (c, j) = (i >> CHUNK_BITS, i & (CHUNK - 1));
        let full = self.chunks.len();
        if c == full {
            return self.tail.get_mut(j);
        }
        if c < full
            && let Some(Chunk::Spilled(at)) = self.chunks.get(c)
        {
            let s = self.spill.as_ref()?;
            let mut values = Vec::new();
            (s.get)(&*s.store, *at, 0, CHUNK, &mut values);
            self.chunks[c] = Chunk::Held(Arc::new(values));
            self.spilled_to = self.spilled_to.min(c);
        }
        match self.chunks.get_mut(c) {
            Some(Chunk::Held(values)) => Arc::make_mut(values).get_mut(j),
            Some(Chunk::Spilled(_)) => None,
            None if c == full => self.tail.get_mut(j),
            None => None,
        }
    }

    /// The values in order, a chunk at a time.
    pub fn iter(&self) -> Values<'_, T> {
        Values {
            cursor: Cursor::new(self),
            pos: 0,
        }
    }

    /// Each chunk's values in order: the full chunks, then the one being filled (a spilled
    /// chunk read back into one buffer, reused).
    pub fn for_each_slice(&self, mut f: impl FnMut(&[T])) {
        let mut cursor = Cursor::new(self);
        while cursor.load_next() {
            f(cursor.slice());
        }
    }

    /// How many chunks [`Cursor::load`] reads: the full ones and the one being filled.
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len() + 1
    }
}

/// One chunk of a column at a time, as a reader walks it: borrowed where it is in memory,
/// read into the cursor's own buffer where it was spilled.
pub(crate) struct Cursor<'a, T> {
    column: &'a Column<T>,
    next: usize,
    held: &'a [T],
    buf: Vec<T>,
    in_buf: bool,
}

impl<'a, T: Copy> Cursor<'a, T> {
    pub(crate) fn new(column: &'a Column<T>) -> Self {
        Cursor {
            column,
            next: 0,
            held: &[],
            buf: Vec::new(),
            in_buf: false,
        }
    }

    /// The values of the chunk loaded last.
    #[inline]
    pub(crate) fn slice(&self) -> &[T] {
        if self.in_buf { &self.buf } else { self.held }
    }

    /// Loads chunk `c` (the one being filled after the full ones); false past them.
    pub(crate) fn load(&mut self, c: usize) -> bool {
        let col = self.column;
        self.next = c + 1;
        match col.chunks.get(c) {
            Some(Chunk::Held(values)) => (self.held, self.in_buf) = (values, false),
            Some(&Chunk::Spilled(at)) => {
                if let Some(s) = &col.spill {
                    (s.get)(&*s.store, at, 0, CHUNK, &mut self.buf);
                } else {
                    self.buf.clear();
                }
                self.in_buf = true;
            }
            None if c == col.chunks.len() => (self.held, self.in_buf) = (&col.tail, false),
            None => return false,
        }
        true
    }

    /// Loads the chunk after the one loaded last (the first at first).
    pub(crate) fn load_next(&mut self) -> bool {
        self.load(self.next)
    }
}

/// [`Column::iter`].
pub struct Values<'a, T> {
    cursor: Cursor<'a, T>,
    pos: usize,
}

impl<T: Copy> Iterator for Values<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(&v) = self.cursor.slice().get(self.pos) {
                self.pos += 1;
                return Some(v);
            }
            if !self.cursor.load_next() {
                return None;
            }
            self.pos = 0;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A spill in memory that counts what it was given and read.
    #[derive(Debug, Default)]
    pub(crate) struct MemSpill {
        pub bytes: Mutex<Vec<u8>>,
    }

    impl Spill for MemSpill {
        fn put(&self, bytes: &[u8]) -> Option<u64> {
            let mut all = self.bytes.lock().ok()?;
            let at = all.len() as u64;
            all.extend_from_slice(bytes);
            Some(at)
        }

        fn get(&self, at: u64, buf: &mut [u8]) {
            if let Ok(all) = self.bytes.lock() {
                let from = at as usize;
                buf.copy_from_slice(&all[from..from + buf.len()]);
            }
        }
    }

    impl MemSpill {
        pub(crate) fn len(&self) -> usize {
            self.bytes.lock().map_or(0, |b| b.len())
        }
    }

    #[test]
    fn a_column_extended_by_a_slice_is_the_column_pushed_value_by_value() {
        let values: Vec<u64> = (0..(2 * CHUNK + 5) as u64).collect();
        let mut pushed = Column::default();
        values.iter().for_each(|&v| pushed.push(v));
        let mut extended = Column::default();
        extended.push(7);
        extended.extend_from_slice(&values[1..10]);
        extended.extend_from_slice(&values[10..CHUNK + 3]);
        extended.extend_from_slice(&values[CHUNK + 3..]);
        extended.set(0, 0);
        assert!(extended.iter().eq(pushed.iter()));
        assert_eq!(extended.len(), pushed.len());
    }

    #[test]
    fn a_column_holds_values_across_chunks() {
        let mut c = Column::default();
        (0..(2 * CHUNK + 3) as u64).for_each(|v| c.push(v));
        assert_eq!(c.len(), 2 * CHUNK + 3);
        assert_eq!(c.get(CHUNK), Some(CHUNK as u64));
        assert_eq!(c.get(2 * CHUNK + 3), None);
        assert!(c.iter().eq(0..(2 * CHUNK + 3) as u64));
        // A clone shares the chunks and keeps its values when the original changes.
        let snapshot = c.clone();
        let held = |c: &Column<u64>, k: usize| match &c.chunks[k] {
            Chunk::Held(a) => Arc::clone(a),
            Chunk::Spilled(_) => panic!("chunk {k} spilled"),
        };
        assert!(Arc::ptr_eq(&held(&c, 0), &held(&snapshot, 0)));
        c.push(7);
        c.set(1, 99);
        assert!(snapshot.iter().eq(0..(2 * CHUNK + 3) as u64));
        assert_eq!(
            (c.get(1), c.get(2 * CHUNK + 3), c.len()),
            (Some(99), Some(7), 2 * CHUNK + 4)
        );
        // Only the chunks changed were copied.
        assert!(Arc::ptr_eq(&held(&c, 1), &held(&snapshot, 1)));
        assert!(!Arc::ptr_eq(&held(&c, 0), &held(&snapshot, 0)));
    }

    /// A spilling column reads back every value as one held in memory does, by index, in
    /// order and a chunk at a time, after changes to spilled values too; it holds no more than
    /// its newest full chunk and the one being filled.
    #[test]
    fn a_spilled_column_reads_back_as_one_in_memory() {
        let spill = Arc::new(MemSpill::default());
        let n = 5 * CHUNK + 17;
        let mut held: Column<[u32; 2]> = Column::default();
        let mut spilled: Column<[u32; 2]> = Column::default();
        // Spilling from the start, or once values are there.
        let mut late: Column<[u32; 2]> = Column::default();
        for i in 0..n as u32 {
            let v = [i, i.wrapping_mul(2_654_435_761)];
            held.push(v);
            spilled.push(v);
            late.push(v);
            if i == 0 {
                spilled.spill_to(spill.clone());
            }
        }
        late.spill_to(spill.clone());
        let in_memory = |c: &Column<[u32; 2]>| {
            c.chunks
                .iter()
                .filter(|c| matches!(c, Chunk::Held(_)))
                .count()
        };
        assert_eq!((in_memory(&spilled), in_memory(&late)), (KEPT, KEPT));
        assert_eq!(spill.len(), 2 * (5 - KEPT) * CHUNK * 8);
        for c in [&spilled, &late] {
            assert!(c.iter().eq(held.iter()));
            assert_eq!(c, &held);
            for i in [0, 1, CHUNK - 1, CHUNK, 3 * CHUNK + 5, n - 1] {
                assert_eq!((c.get(i), c.at(i)), (held.get(i), held.at(i)), "value {i}");
            }
            let mut slices = Vec::new();
            c.for_each_slice(|s| slices.extend_from_slice(s));
            assert!(slices.iter().copied().eq(held.iter()));
        }
        // A change to a spilled value brings its chunk back, and it goes again with the next
        // chunk filled; the column reads as the one in memory changed the same way.
        for i in [3, 2 * CHUNK + 1] {
            spilled.set(i, [7, 7]);
            held.set(i, [7, 7]);
        }
        assert_eq!(in_memory(&spilled), KEPT + 2);
        assert_eq!(spilled, held);
        for i in 0..CHUNK as u32 {
            spilled.push([i, 0]);
            held.push([i, 0]);
        }
        assert_eq!(in_memory(&spilled), KEPT);
        assert_eq!(spilled, held);
    }
}
