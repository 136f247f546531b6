//! The kernels compile with NVRTC for sm_90 on machines without a GPU, when libnvrtc can be
//! loaded (CI finds it in the Python environment's CUDA runtime wheels). This catches a kernel
//! that does not compile before a device run does.

use lockstep_backend_cuda::{compile, KERNEL_SOURCE};

#[test]
fn kernels_compile_for_sm90() {
    // SAFETY: only tries to open the shared library by name.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("SKIPPED: libnvrtc could not be loaded (set LD_LIBRARY_PATH to a CUDA runtime)");
        if std::env::var_os("LOCKSTEP_REQUIRE_NVRTC").is_some() {
            panic!("LOCKSTEP_REQUIRE_NVRTC is set but libnvrtc could not be loaded");
        }
        return;
    }
    let cubin = compile::nvrtc_cubin(KERNEL_SOURCE, "sm_90", compile::NVRTC_OPTIONS)
        .unwrap_or_else(|log| panic!("NVRTC failed:\n{log}"));
    assert_eq!(&cubin[..4], b"\x7fELF");
}
