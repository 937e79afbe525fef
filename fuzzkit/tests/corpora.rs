//! Every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` through its target's
//! function, as `cargo test` builds it (debug, overflow checks on): the test fails naming each
//! file that panics or takes over 2 s. A crash the fuzzer finds is fixed with its input added to
//! `regressions/`, and stays fixed here.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest one input may take.
const LIMIT: Duration = Duration::from_secs(2);

#[test]
fn corpora_and_regressions_run_clean() {
    let fuzz = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz"));
    let mut failures = Vec::new();
    let mut runs = 0;
    // The panics are reported below, by file; not each with its own message and backtrace.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for (target, run) in fuzzkit::TARGETS {
        for kind in ["corpus", "regressions"] {
            let dir = fuzz.join(kind).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
            files.sort();
            for path in files {
                let data = std::fs::read(&path).unwrap();
                let start = Instant::now();
                let r = catch_unwind(AssertUnwindSafe(|| run(&data)));
                let took = start.elapsed();
                runs += 1;
                let name = path.strip_prefix(fuzz).unwrap_or(&path).display().to_string();
                if let Err(e) = r {
                    let msg = e.downcast_ref::<String>().map(String::as_str).or(e.downcast_ref::<&str>().copied()).unwrap_or("(no message)");
                    failures.push(format!("fuzz/{name}: panicked: {msg}"));
                } else if took > LIMIT {
                    failures.push(format!("fuzz/{name}: took {took:.1?} (at most {LIMIT:?})"));
                }
            }
        }
    }
    std::panic::set_hook(hook);
    assert!(failures.is_empty(), "{} of {runs} inputs failed:\n{}", failures.len(), failures.join("\n"));
    assert!(runs >= fuzzkit::TARGETS.len(), "only {runs} inputs found under {}", fuzz.display());
}
