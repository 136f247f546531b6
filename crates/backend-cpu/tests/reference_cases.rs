//! The llama.cpp reference cases on the cpu backend with 2 threads: the same checks and
//! tolerances as the reference backend (`lockstep_testkit::reference_cases`).

mod common;

use common::*;

#[test]
fn smollm2_reference_cases() {
    let e = cpu_engine(&model_path("smollm2"), 2, reference_cases::engine_config());
    reference_cases::check("smollm2", e);
}

#[test]
fn gemma3_reference_cases() {
    let e = cpu_engine(&model_path("gemma3"), 2, reference_cases::engine_config());
    reference_cases::check("gemma3", e);
}
