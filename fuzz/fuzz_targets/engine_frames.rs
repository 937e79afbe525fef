#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzkit::engine_frames(data));
