//! The llama.cpp reference cases on the reference backend (checks in
//! `lockstep_testkit::reference_cases`).

mod common;

use common::*;

#[test]
fn smollm2_reference_cases() {
    let e = ref_engine(&model_path("smollm2"), reference_cases::engine_config());
    reference_cases::check("smollm2", e);
}

#[test]
fn gemma3_reference_cases() {
    let e = ref_engine(&model_path("gemma3"), reference_cases::engine_config());
    reference_cases::check("gemma3", e);
}
