//! Fuzz target: the engine with the `tunnel` configurations of `xlat_fuzz::config`, one input a
//! trace of packets (see `xlat_fuzz::run`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xlat_fuzz::run(xlat_fuzz::Target::Tunnel, data));
