//! `lockstep_gguf::parse` must return `Ok` or `Err` on any input: never panic, hang, or
//! allocate more than the input could justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = lockstep_gguf::parse(data) {
        // Whatever `parse` accepted must be safe to use: every tensor range lies in the input.
        for t in &header.tensors {
            let range = header.tensor_range(t);
            assert!(range.end <= data.len(), "tensor `{}` out of bounds", t.name);
            let _ = &data[range];
        }
        for (_, v) in header.metadata.iter() {
            let _ = v.summary(4);
        }
    }
});
