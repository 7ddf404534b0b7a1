//! `tidegate::fuzzing::webhook_answers`: see that function for what the bytes are.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tidegate::fuzzing::webhook_answers(data);
});
