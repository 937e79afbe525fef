//! A table of bounded size that keeps what was written to it last, for the engine's tables keyed
//! by what arrives (clients, hosts, objects): one filled with made-up keys lets the older half
//! go, never the whole, and a write costs O(1) amortised with no pass over the table.

use std::hash::Hash;

use ahash::AHashMap;

/// A map of at most `CAP` entries, in two generations: a write goes into the current one (a key
/// the previous one holds moves over); when the current one holds `CAP / 2` entries and a new
/// key comes, the previous one is dropped and the current one takes its place. So the `CAP / 2`
/// keys written last are always kept (the table never empties once written to), and the cost of
/// dropping a generation is paid once per `CAP / 2` writes. Reads do not move a key: a key that
/// is read but never written again ages out.
#[derive(Clone, Debug)]
pub(crate) struct GenMap<K, V, const CAP: usize> {
    current: AHashMap<K, V>,
    previous: AHashMap<K, V>,
}

impl<K, V, const CAP: usize> Default for GenMap<K, V, CAP> {
    fn default() -> Self {
        GenMap { current: AHashMap::new(), previous: AHashMap::new() }
    }
}

impl<K: Hash + Eq, V, const CAP: usize> GenMap<K, V, CAP> {
    /// Entries the current generation holds before it becomes the previous one.
    const HALF: usize = {
        assert!(CAP >= 2, "a GenMap keeps at least 2 entries");
        CAP / 2
    };

    /// The value under `key`, if kept.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.current.get(key).or_else(|| self.previous.get(key))
    }

    /// Write `value` under `key`.
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(v) = self.current.get_mut(&key) {
            *v = value;
            return;
        }
        self.previous.remove(&key);
        self.make_room();
        self.current.insert(key, value);
    }

    /// The value under `key` to update, `default()` if it is not kept; either way `key` counts
    /// as written.
    pub fn get_or_insert_with(&mut self, key: K, default: impl FnOnce() -> V) -> &mut V {
        if self.current.contains_key(&key) {
            return self.current.get_mut(&key).expect("in the current generation");
        }
        // Taken from the previous generation before `make_room` may drop it.
        let value = self.previous.remove(&key).unwrap_or_else(default);
        self.make_room();
        self.current.entry(key).or_insert(value)
    }

    /// A new key is about to go into the current generation: if it is full, it becomes the
    /// previous one (which is dropped; its allocation is kept for the new current one).
    fn make_room(&mut self) {
        if self.current.len() >= Self::HALF {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
        }
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// Whether no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.previous.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_half_stays_and_the_table_never_passes_its_bound() {
        let mut m: GenMap<u32, u32, 64> = GenMap::default();
        assert!(m.is_empty());
        for i in 0..1_000u32 {
            m.insert(i, i * 2);
            assert!(m.len() <= 64);
            assert!(m.len() >= (i as usize + 1).min(32), "{i}: {}", m.len());
            for k in i.saturating_sub(31)..=i {
                assert_eq!(m.get(&k), Some(&(k * 2)), "{k} after {i}");
            }
        }
        // A key written again is not counted twice.
        let n = m.len();
        m.insert(999, 1);
        assert_eq!((m.get(&999), m.len()), (Some(&1), n));
    }

    #[test]
    fn a_key_written_again_moves_to_the_current_generation() {
        let mut m: GenMap<u32, u32, 8> = GenMap::default();
        for i in 0..4 {
            m.insert(i, i);
        }
        // 0..4 fill the current generation; 4 makes them the previous one.
        m.insert(4, 4);
        assert_eq!(m.len(), 5);
        // Written again, 0 moves to the current generation with its value.
        *m.get_or_insert_with(0, || unreachable!()) += 10;
        assert_eq!(*m.get_or_insert_with(100, || 7), 7);
        m.insert(5, 5);
        assert_eq!(m.len(), 7);
        // The current generation (4, 0, 100, 5) is full: 1, written from the previous one, makes
        // it the previous one, 2 and 3 go.
        *m.get_or_insert_with(1, || unreachable!()) += 20;
        assert_eq!((m.get(&1), m.get(&2), m.get(&3)), (Some(&21), None, None));
        m.insert(6, 6);
        assert_eq!(m.get(&0), Some(&10));
        assert_eq!((m.get(&4), m.get(&100), m.get(&5), m.get(&6)), (Some(&4), Some(&7), Some(&5), Some(&6)));
        assert_eq!(m.len(), 6);
    }
}
