//! Fuzz target: the FTP ALG's line parser, writers and sequence offsets (`xlat_fuzz::ftp`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xlat_fuzz::ftp(data));
