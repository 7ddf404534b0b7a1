//! `tidegate::fuzzing::graphql_document`: see that function for what the bytes are.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tidegate::fuzzing::graphql_document(data);
});
