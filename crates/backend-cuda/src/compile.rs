//! NVRTC to CUBIN at run time, cached on disk.
//!
//! Compiling straight to a CUBIN for the device's architecture avoids the driver's PTX JIT
//! (60-190 ms per module on the H100, against 0.1 ms to load a CUBIN). The cache key covers
//! everything that changes the binary: the source, the compile options, the architecture and
//! the NVRTC version, so a stale CUBIN can never be loaded.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Options every module is compiled with. `--fmad=false` keeps `a * b + c` two roundings,
/// as in the reference backend.
pub const NVRTC_OPTIONS: &[&str] = &["--fmad=false", "--std=c++17"];

/// The cache key of one compiled module.
pub fn cache_key(source: &str, options: &[&str], arch: &str, nvrtc_version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(b"lockstep-cuda-cubin-v1\0");
    h.update((source.len() as u64).to_le_bytes());
    h.update(source.as_bytes());
    for o in options {
        h.update((o.len() as u64).to_le_bytes());
        h.update(o.as_bytes());
    }
    h.update(arch.as_bytes());
    h.update(b"\0");
    h.update(nvrtc_version.0.to_le_bytes());
    h.update(nvrtc_version.1.to_le_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{arch}-nvrtc{}.{}-{}",
        nvrtc_version.0,
        nvrtc_version.1,
        &hex[..32]
    )
}

/// `sm_90` for compute capability 9.0.
pub fn arch_name(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// Where CUBINs are cached: `$LOCKSTEP_CUDA_CACHE`, else `$XDG_CACHE_HOME/lockstep/cuda`, else
/// `~/.cache/lockstep/cuda`; `None` if no home is known (then nothing is cached).
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("LOCKSTEP_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("lockstep").join("cuda"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lockstep/cuda"))
}

/// A cached CUBIN, if present and plausible (an ELF file).
pub fn load_cached(dir: &Path, key: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(dir.join(format!("{key}.cubin"))).ok()?;
    (bytes.len() > 4 && bytes[..4] == *b"\x7fELF").then_some(bytes)
}

/// Stores a CUBIN (written to a temporary name, then renamed, so a reader never sees half a
/// file). Failure to cache is not an error: the next run compiles again.
pub fn store_cached(dir: &Path, key: &str, cubin: &[u8]) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
    if std::fs::write(&tmp, cubin).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(format!("{key}.cubin")));
    }
}

/// Compiles `source` with NVRTC for `arch`; the CUBIN, or NVRTC's log.
pub fn nvrtc_cubin(source: &str, arch: &str, options: &[&str]) -> Result<Vec<u8>, String> {
    nvrtc_compile(source, arch, options).map(|(cubin, _log)| cubin)
}

/// What ptxas reports of one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    /// Bytes a thread stores to local memory because its values did not fit its registers.
    pub spill_stores: u32,
}

/// Every kernel's resources, as ptxas reported them.
pub type KernelRegisters = Vec<KernelResources>;

/// Reads ptxas's `--verbose` log: per entry function, its registers and spill stores.
pub fn ptxas_resources(log: &str) -> KernelRegisters {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut spills = 0;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().map(str::to_string);
            spills = 0;
        }
        if let Some(before) = line
            .split(" bytes spill stores")
            .next()
            .filter(|_| line.contains(" bytes spill stores"))
        {
            spills = before
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        }
        if let (Some(name), Some(rest)) = (&current, line.split("Used ").nth(1)) {
            if let Some(n) = rest.split(' ').next().and_then(|n| n.parse().ok()) {
                out.push(KernelResources {
                    name: name.clone(),
                    registers: n,
                    spill_stores: spills,
                });
            }
        }
    }
    out
}

/// Compiles like [`nvrtc_cubin`] with ptxas reporting its resources, and returns the cubin
/// with the registers each kernel uses (by entry name). A kernel launched with more threads
/// than the register file holds (`regs * threads > 65536` on sm_90) fails at launch with
/// "too many resources requested": the host's block sizes are checked against this on
/// machines without a GPU.
pub fn nvrtc_registers(
    source: &str,
    arch: &str,
    options: &[&str],
) -> Result<(Vec<u8>, KernelRegisters), String> {
    let mut opts = options.to_vec();
    opts.push("--ptxas-options=--verbose");
    let (cubin, log) = nvrtc_compile(source, arch, &opts)?;
    Ok((cubin, ptxas_resources(&log)))
}

/// The PTX NVRTC makes of `source` for a virtual architecture (`compute_90`): what the
/// front end wrote, before ptxas scheduled it (see `audit`).
pub fn nvrtc_ptx(source: &str, arch: &str, options: &[&str]) -> Result<String, String> {
    let (ptx, _) = nvrtc_compile_to(source, arch, options, Output::Ptx)?;
    let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
    String::from_utf8(ptx[..end].to_vec()).map_err(|e| format!("PTX is not UTF-8: {e}"))
}

/// What to take out of a compiled program.
#[derive(Clone, Copy)]
enum Output {
    Cubin,
    Ptx,
}

/// The cubin and the compile log.
fn nvrtc_compile(source: &str, arch: &str, options: &[&str]) -> Result<(Vec<u8>, String), String> {
    nvrtc_compile_to(source, arch, options, Output::Cubin)
}

/// The program's cubin or PTX, and the compile log.
fn nvrtc_compile_to(
    source: &str,
    arch: &str,
    options: &[&str],
    output: Output,
) -> Result<(Vec<u8>, String), String> {
    use cudarc::nvrtc::sys as nv;
    use std::ffi::CString;
    let src = CString::new(source).map_err(|e| e.to_string())?;
    let mut opts: Vec<CString> = Vec::new();
    for o in options
        .iter()
        .copied()
        .chain([&*format!("--gpu-architecture={arch}")])
    {
        opts.push(CString::new(o).map_err(|e| e.to_string())?);
    }
    let optp: Vec<*const std::ffi::c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: plain NVRTC C calls with valid NUL-terminated strings that outlive them; the
    // program handle is destroyed on every path after creation.
    unsafe {
        let r = nv::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            std::ptr::null(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if r != nv::nvrtcResult::NVRTC_SUCCESS {
            return Err(format!("nvrtcCreateProgram: {r:?}"));
        }
        let r = nv::nvrtcCompileProgram(prog, optp.len() as i32, optp.as_ptr());
        let out = if r != nv::nvrtcResult::NVRTC_SUCCESS {
            let mut n = 0usize;
            nv::nvrtcGetProgramLogSize(prog, &mut n);
            let mut log = vec![0u8; n];
            nv::nvrtcGetProgramLog(prog, log.as_mut_ptr() as *mut _);
            Err(format!(
                "NVRTC compile failed ({r:?}):\n{}",
                String::from_utf8_lossy(&log)
            ))
        } else {
            let mut n = 0usize;
            nv::nvrtcGetProgramLogSize(prog, &mut n);
            let mut log = vec![0u8; n];
            nv::nvrtcGetProgramLog(prog, log.as_mut_ptr() as *mut _);
            let log = String::from_utf8_lossy(&log).into_owned();
            let mut n = 0usize;
            let r = match output {
                Output::Cubin => nv::nvrtcGetCUBINSize(prog, &mut n),
                Output::Ptx => nv::nvrtcGetPTXSize(prog, &mut n),
            };
            let mut buf = vec![0u8; n];
            if r == nv::nvrtcResult::NVRTC_SUCCESS {
                let r = match output {
                    Output::Cubin => nv::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _),
                    Output::Ptx => nv::nvrtcGetPTX(prog, buf.as_mut_ptr() as *mut _),
                };
                if r == nv::nvrtcResult::NVRTC_SUCCESS {
                    Ok((buf, log))
                } else {
                    Err(format!("nvrtcGet{{CUBIN,PTX}}: {r:?}"))
                }
            } else {
                Err(format!("nvrtcGet{{CUBIN,PTX}}Size: {r:?}"))
            }
        };
        nv::nvrtcDestroyProgram(&mut prog);
        out
    }
}

/// The NVRTC version (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    let (mut a, mut b) = (0i32, 0i32);
    // SAFETY: writes two ints; the library was checked present by the caller.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcVersion: {r:?}"));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_every_input() {
        let base = cache_key("src", NVRTC_OPTIONS, "sm_90", (13, 0));
        assert_eq!(base, cache_key("src", NVRTC_OPTIONS, "sm_90", (13, 0)));
        assert!(base.starts_with("sm_90-nvrtc13.0-"), "{base}");
        for other in [
            cache_key("src2", NVRTC_OPTIONS, "sm_90", (13, 0)),
            cache_key("src", &["--fmad=true"], "sm_90", (13, 0)),
            cache_key("src", NVRTC_OPTIONS, "sm_89", (13, 0)),
            cache_key("src", NVRTC_OPTIONS, "sm_90", (13, 1)),
            cache_key("src", NVRTC_OPTIONS, "sm_90", (12, 0)),
        ] {
            assert_ne!(base, other);
        }
        // Length prefixes: moving a byte between source and options changes the key.
        assert_ne!(
            cache_key("ab", &["c"], "sm_90", (13, 0)),
            cache_key("a", &["bc"], "sm_90", (13, 0))
        );
    }

    #[test]
    fn cache_round_trip_rejects_non_elf() {
        let dir = std::env::temp_dir().join(format!("lockstep-cuda-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(load_cached(&dir, "k").is_none());
        store_cached(&dir, "k", b"\x7fELF rest");
        assert_eq!(
            load_cached(&dir, "k").as_deref(),
            Some(&b"\x7fELF rest"[..])
        );
        store_cached(&dir, "bad", b"not an elf");
        assert!(load_cached(&dir, "bad").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ptxas_log_gives_each_kernels_registers_and_spills() {
        // ptxas's --verbose lines as NVRTC's log carries them (session 38's cluster kernel).
        let log = "ptxas info    : Compiling entry function 'add' for 'sm_90'\n\
            ptxas info    : Function properties for add\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 12 registers, used 0 barriers, 384 bytes cmem[0]\n\
            ptxas info    : Compiling entry function 'decode_layers_cluster' for 'sm_90a'\n\
            ptxas info    : Function properties for decode_layers_cluster\n\
            \x20   24 bytes stack frame, 20 bytes spill stores, 20 bytes spill loads\n\
            ptxas info    : Used 128 registers, used 1 barriers, 24 bytes cumulative stack size\n";
        let r = ptxas_resources(log);
        assert_eq!(
            r,
            vec![
                KernelResources {
                    name: "add".into(),
                    registers: 12,
                    spill_stores: 0
                },
                KernelResources {
                    name: "decode_layers_cluster".into(),
                    registers: 128,
                    spill_stores: 20
                },
            ]
        );
    }

    #[test]
    fn arch_names() {
        assert_eq!(arch_name(9, 0), "sm_90");
        assert_eq!(arch_name(8, 9), "sm_89");
    }
}
