//! What the kernels' CPU emulation tests share.

use std::process::Command;

fn gxx_present() -> bool {
    Command::new("g++")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether g++ is here to compile the emulation; without it the test says it skipped, and fails
/// where `LOCKSTEP_REQUIRE_GXX` demands it (CI).
pub fn gxx_or_skip() -> bool {
    if gxx_present() {
        return true;
    }
    eprintln!("SKIPPED: no g++ to compile the kernels' CPU emulation");
    assert!(
        std::env::var_os("LOCKSTEP_REQUIRE_GXX").is_none(),
        "LOCKSTEP_REQUIRE_GXX is set but g++ is missing"
    );
    false
}
