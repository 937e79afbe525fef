//! The size cache under a flood of made-up objects with long targets: its heap stays bounded by
//! the number of objects, whatever the targets' lengths (it keeps a hash of each key, not its
//! text). Heap bytes are measured by a counting allocator; this file holds one test, so that
//! nothing else allocates beside it.

use rlm_core::adapt::predict::{SizeCache, MAX_ENTRIES};
use rlm_core::testkit::{heap_bytes, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Most heap the cache may hold, full.
const MAX_HEAP: usize = 4_000_000;

#[test]
fn long_made_up_targets_do_not_grow_the_size_cache() {
    // A 30 KiB target, made unique by its end.
    let long = format!("shop/{}", "a".repeat(30 * 1024));
    let base = heap_bytes();
    let mut cache = SizeCache::default();
    for i in 0..MAX_ENTRIES {
        let key = format!("{long}{i}");
        // The key given is the cache's to keep or drop; measured after it is dropped.
        cache.insert(key, i as u64);
        if i % 1024 == 1023 || i == MAX_ENTRIES - 1 {
            let heap = heap_bytes().saturating_sub(base);
            assert!(heap <= MAX_HEAP, "{} objects of 30 KiB: heap {heap} bytes", i + 1);
        }
    }
    let heap = heap_bytes().saturating_sub(base);
    println!("{} objects of 30 KiB kept, heap {:.2} MB", cache.len(), heap as f64 / 1e6);
    assert!(cache.len() >= MAX_ENTRIES / 2);
    assert_eq!(cache.get(&format!("{long}{}", MAX_ENTRIES - 1)), Some(MAX_ENTRIES as u64 - 1));
}
