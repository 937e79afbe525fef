//! The bounded connection table: connections found by their endpoints, held in slots whose
//! generations tell a stale handle from a live one, the least recently seen evicted when full.

use ahash::AHashMap;

use super::conn::{Conn, ConnState};
use super::StreamAnalyzer;
use crate::time::Timestamp;
use crate::wire::Endpoint;

/// Key of a connection regardless of direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey(Endpoint, Endpoint);

impl FlowKey {
    /// The key of the connection between `a` and `b`, whichever of them sent.
    pub fn of(a: Endpoint, b: Endpoint) -> FlowKey {
        if a <= b {
            FlowKey(a, b)
        } else {
            FlowKey(b, a)
        }
    }
}

/// Handle of a connection in the table: slot and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    /// The connection's slot in the table.
    pub slot: u32,
    /// The slot's generation when the connection went in; it moves on when the connection leaves,
    /// so an old handle finds nothing.
    pub gen: u32,
}

/// The bounded connection table; each connection has an application analyzer `A`.
pub struct FlowTable<A> {
    map: AHashMap<FlowKey, u32>,
    slots: Vec<Option<Conn<A>>>,
    free: Vec<u32>,
    gens: Vec<u32>,
    capacity: usize,
    /// Where the next eviction sample starts.
    clock: usize,
}

/// How many live slots an eviction looks at to pick the least recently seen.
const EVICTION_SAMPLE: usize = 16;

impl<A: StreamAnalyzer> FlowTable<A> {
    /// An empty table for at most `capacity` connections (at least one), its storage reserved
    /// whole: a table that grew by doubling copied every connection at each step (the slots of
    /// 131,072 connections, 59 MB, in one call: 11 to 22 ms under a SYN flood). What is reserved
    /// and not used is address space, not memory (the pages are touched as slots fill), but the
    /// hash map's control bytes (one per bucket).
    pub fn new(capacity: usize) -> FlowTable<A> {
        let capacity = capacity.max(1);
        FlowTable {
            map: AHashMap::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            gens: Vec::with_capacity(capacity),
            capacity,
            clock: 0,
        }
    }

    /// Connections in the table (closed ones lingering included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table holds no connection.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The connection between `a` and `b`, whichever of them is the client.
    pub fn lookup(&self, a: Endpoint, b: Endpoint) -> Option<ConnId> {
        self.map.get(&FlowKey::of(a, b)).map(|&slot| ConnId { slot, gen: self.gens[slot as usize] })
    }

    /// The connection `id` names, unless it has left the table.
    pub fn get(&self, id: ConnId) -> Option<&Conn<A>> {
        (self.gens.get(id.slot as usize) == Some(&id.gen)).then(|| self.slots[id.slot as usize].as_ref()).flatten()
    }

    /// The connection `id` names, to change, unless it has left the table.
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn<A>> {
        if self.gens.get(id.slot as usize) == Some(&id.gen) {
            self.slots[id.slot as usize].as_mut()
        } else {
            None
        }
    }

    /// Whether inserting needs an eviction first.
    pub fn is_full(&self) -> bool {
        self.map.len() >= self.capacity
    }

    /// The least recently seen of a sample of connections (sampled LRU, deterministic).
    pub fn eviction_candidate(&mut self) -> Option<ConnId> {
        let n = self.slots.len();
        if n == 0 {
            return None;
        }
        let mut best: Option<(Timestamp, u32)> = None;
        let mut looked = 0;
        let mut i = 0;
        while looked < EVICTION_SAMPLE && i < n {
            let slot = (self.clock + i) % n;
            if let Some(c) = &self.slots[slot] {
                looked += 1;
                // Closed connections go first.
                let key = if c.state == ConnState::Closed { Timestamp::ZERO } else { c.last_seen };
                if best.is_none_or(|(t, _)| key < t) {
                    best = Some((key, slot as u32));
                }
            }
            i += 1;
        }
        self.clock = (self.clock + i) % n;
        best.map(|(_, slot)| ConnId { slot, gen: self.gens[slot as usize] })
    }

    /// Insert a new connection (the caller evicted first if full).
    pub fn insert(&mut self, now: Timestamp, client: Endpoint, server: Endpoint, midstream: bool, app: Option<A>) -> ConnId {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        let gen = self.gens[slot as usize];
        let mut c = Conn::new(now, client, server, midstream, app);
        c.gen = gen;
        self.slots[slot as usize] = Some(c);
        self.map.insert(FlowKey::of(client, server), slot);
        ConnId { slot, gen }
    }

    /// Remove a connection; returns it.
    pub fn remove(&mut self, id: ConnId) -> Option<Conn<A>> {
        if self.gens.get(id.slot as usize) != Some(&id.gen) {
            return None;
        }
        let c = self.slots[id.slot as usize].take()?;
        self.map.remove(&FlowKey::of(c.client, c.server));
        self.gens[id.slot as usize] = id.gen.wrapping_add(1);
        self.free.push(id.slot);
        Some(c)
    }

    /// All live connection ids, in slot order.
    pub fn ids(&self) -> Vec<ConnId> {
        self.slots.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| ConnId { slot: i as u32, gen: self.gens[i] }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyzer::Analyzer;

    #[test]
    fn table_evicts_and_reuses_slots_with_new_generation() {
        let ep = |p| Endpoint { ip: "10.0.0.1".parse().unwrap(), port: p };
        let srv = Endpoint { ip: "10.9.0.1".parse().unwrap(), port: 80 };
        let mut t = FlowTable::<Analyzer>::new(2);
        let a = t.insert(Timestamp(1), ep(1), srv, false, None);
        let _b = t.insert(Timestamp(2), ep(2), srv, false, None);
        assert!(t.is_full());
        let victim = t.eviction_candidate().unwrap();
        assert_eq!(victim, a, "least recently seen goes first");
        t.remove(victim).unwrap();
        let c = t.insert(Timestamp(3), ep(3), srv, false, None);
        assert_eq!(c.slot, a.slot);
        assert_ne!(c.gen, a.gen);
        assert!(t.get(a).is_none(), "stale handle must not reach the new connection");
        assert_eq!(t.lookup(srv, ep(3)), Some(c));
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// The per-connection budget of the brief: 512 bytes, not counting head buffers (which are
    /// empty between messages) and the out-of-order buffer (allocated only while a hole is open).
    #[test]
    fn connection_state_fits_512_bytes() {
        // With the largest analyzer (HTTP's).
        let conn = std::mem::size_of::<Conn<crate::analyzer::Analyzer>>();
        // Each table entry also costs its map slot (key + slot index) and a generation.
        let entry = std::mem::size_of::<FlowKey>() + std::mem::size_of::<u32>() * 2 + 1;
        println!("Conn {conn} B, table entry {entry} B");
        assert!(conn + entry <= 512, "{conn} + {entry} bytes per connection");
    }
}
