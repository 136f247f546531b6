//! A static check of the kernels' grid waits: ptxas must not move a global load above a
//! kernel's `griddepcontrol.wait`.
//!
//! Under programmatic dependent launch (every edge of a replayed step graph) a kernel starts
//! while the kernel before it still runs, and only its grid wait orders its reads after that
//! kernel's writes. Session 12 saw replayed steps differ from tapped ones after the fused norm
//! kernels began to read the residual rows with plain loads after their wait; reading them
//! with `__ldcg` fixed it. Disassembly (session 13) showed why: the rows came through
//! `const __restrict__` pointers, so NVVM emitted non-coherent loads (`ld.global.nc`), kept
//! after the wait in the PTX, and ptxas, free to treat such loads as reading memory nobody
//! writes while the kernel runs, scheduled them above it (`LDG.E.CONSTANT` before `ACQBULK`,
//! the wait's SASS): they read rows still being written.
//!
//! The check compares, per kernel, the global loads before the first wait in the PTX (the
//! order the source asked for) with those before the first wait in the SASS (the order that
//! runs). More in the SASS means ptxas hoisted a load over the wait. Loads the source puts
//! before the wait on purpose (weights, written only at upload; the decode attention's earlier
//! keys) are in both counts; ptxas sinking one below the wait is allowed (a lost overlap, not a
//! race). The test `nvrtc_compiles` runs it on the whole kernel source with NVRTC and nvdisasm.

use std::collections::BTreeMap;

/// A kernel's global loads ahead of its first grid wait, and whether it waits at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreWait {
    pub loads: usize,
    pub waits: bool,
}

/// Per `.entry` of a PTX module: `ld.global*` and generic `ld` instructions (a generic load
/// may read global memory) before the first `griddepcontrol.wait`, in text order.
pub fn ptx_pre_wait(ptx: &str) -> BTreeMap<String, PreWait> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in ptx.lines() {
        let t = line.trim_start();
        if let Some(rest) = t
            .strip_prefix(".visible .entry ")
            .or_else(|| t.strip_prefix(".entry "))
        {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name.clone(), PreWait::default());
            current = Some(name);
            continue;
        }
        let Some(e) = current.as_ref().and_then(|n| out.get_mut(n)) else {
            continue;
        };
        if e.waits {
            continue;
        }
        if t.starts_with("griddepcontrol.wait") {
            e.waits = true;
        } else if ptx_reads_memory(t) {
            e.loads += 1;
        }
    }
    out
}

/// `ld.global...` or a generic `ld.<type>`; not `ld.param`, `ld.shared`, `ld.local`,
/// `ld.const`. Predicated instructions (`@%p1 ld...`) count too.
fn ptx_reads_memory(t: &str) -> bool {
    let t = if t.starts_with('@') {
        t.split_once(char::is_whitespace)
            .map_or("", |(_, r)| r.trim_start())
    } else {
        t
    };
    let Some(rest) = t.strip_prefix("ld.") else {
        return false;
    };
    !["param", "shared", "local", "const"]
        .iter()
        .any(|s| rest.starts_with(s))
}

/// Per function of `nvdisasm -c` output: `LDG` (global) and `LD` (generic) instructions
/// before the first `ACQBULK`, in text order.
pub fn sass_pre_wait(sass: &str) -> BTreeMap<String, PreWait> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in sass.lines() {
        // A function starts at its name as a label in column 0 (`name:`); local labels start
        // with a dot.
        if let Some(name) = line.strip_suffix(':') {
            if !name.is_empty()
                && !name.starts_with('.')
                && name.chars().all(|c| c.is_alphanumeric() || c == '_')
            {
                out.insert(name.to_string(), PreWait::default());
                current = Some(name.to_string());
                continue;
            }
        }
        let Some(e) = current.as_ref().and_then(|n| out.get_mut(n)) else {
            continue;
        };
        if e.waits {
            continue;
        }
        // `/*0c40*/  @!P3 LDG.E.STRONG.GPU R16, desc[UR10][R38.64] ;`
        let Some((_, ins)) = line.split_once("*/") else {
            continue;
        };
        let mut words = ins.split_whitespace();
        let mut op = words.next().unwrap_or("");
        if op.starts_with('@') {
            op = words.next().unwrap_or("");
        }
        let base = op.split('.').next().unwrap_or("");
        if base == "ACQBULK" {
            e.waits = true;
        } else if base == "LDG" || base == "LD" {
            e.loads += 1;
        }
    }
    out
}

/// The kernels whose SASS runs more global loads ahead of the grid wait than their PTX asks
/// for, or waits where the PTX does not (or the reverse), each with its two counts. Empty
/// when ptxas kept every read after its wait.
pub fn hoisted_over_wait(
    ptx: &BTreeMap<String, PreWait>,
    sass: &BTreeMap<String, PreWait>,
) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, p) in ptx {
        let Some(s) = sass.get(name) else {
            bad.push(format!("{name}: in the PTX, not in the SASS"));
            continue;
        };
        if p.waits != s.waits {
            bad.push(format!(
                "{name}: a grid wait in the {} only",
                if p.waits { "PTX" } else { "SASS" }
            ));
        } else if s.loads > p.loads {
            bad.push(format!(
                "{name}: {} loads before the grid wait in the SASS, {} in the PTX",
                s.loads, p.loads
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    // Session 12's fused q/k/v kernel for Q4_K (`norm_mmv3_fast1_12`) up to its grid wait, as
    // NVRTC 13.5 compiled it with the residual rows read by plain loads through `__restrict__`
    // (the build whose replayed steps broke) and by `__ldcg` (the fix): PTX and SASS.
    const PLAIN_PTX: &str = include_str!("../tests/data/norm_mmv3_fast1_12.plain_loads.ptx");
    const PLAIN_SASS: &str = include_str!("../tests/data/norm_mmv3_fast1_12.plain_loads.sass");
    const LDCG_PTX: &str = include_str!("../tests/data/norm_mmv3_fast1_12.ldcg.ptx");
    const LDCG_SASS: &str = include_str!("../tests/data/norm_mmv3_fast1_12.ldcg.sass");

    #[test]
    fn finds_the_loads_ptxas_hoisted_over_the_wait() {
        let (p, s) = (ptx_pre_wait(PLAIN_PTX), sass_pre_wait(PLAIN_SASS));
        let k = "norm_mmv3_fast1_12";
        // The source's own early loads: the norm weights (4 + 4) and the first weight units.
        assert_eq!(
            p[k],
            PreWait {
                loads: 11,
                waits: true
            }
        );
        // Plus the 8 non-coherent residual-row loads ptxas moved up (12 LDG.E.CONSTANT in all).
        assert_eq!(
            s[k],
            PreWait {
                loads: 19,
                waits: true
            }
        );
        let bad = hoisted_over_wait(&p, &s);
        assert_eq!(
            bad,
            [format!(
                "{k}: 19 loads before the grid wait in the SASS, 11 in the PTX"
            )]
        );
    }

    #[test]
    fn passes_the_fix() {
        let (p, s) = (ptx_pre_wait(LDCG_PTX), sass_pre_wait(LDCG_SASS));
        let k = "norm_mmv3_fast1_12";
        assert_eq!(
            p[k],
            PreWait {
                loads: 11,
                waits: true
            }
        );
        // ptxas sank three of the early loads below the wait: allowed.
        assert_eq!(
            s[k],
            PreWait {
                loads: 8,
                waits: true
            }
        );
        assert!(hoisted_over_wait(&p, &s).is_empty());
    }

    #[test]
    fn parses_predicates_spaces_and_missing_waits() {
        let ptx = ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\tld.param.u64 %rd1, [k_param_0];\n\t@%p1 ld.global.nc.f32 %f1, [%rd2];\n\tld.shared.u32 %r1, [%r2];\n\tld.u32 %r3, [%rd3];\n\tgriddepcontrol.wait;\n\tld.global.f32 %f2, [%rd4];\n}\n.visible .entry j(\n)\n{\n\tld.global.f32 %f1, [%rd1];\n}\n";
        let p = ptx_pre_wait(ptx);
        assert_eq!(
            p["k"],
            PreWait {
                loads: 2,
                waits: true
            }
        );
        assert_eq!(
            p["j"],
            PreWait {
                loads: 1,
                waits: false
            }
        );
        let sass = "k:\n.text.k:\n        /*0000*/   LDC R1, c[0x0][0x28] ;\n        /*0010*/   @!P0 LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n        /*0020*/   LDS R3, [R4] ;\n.L_x_1:\n        /*0030*/   ACQBULK ;\n        /*0040*/   LDG.E R5, desc[UR4][R6.64] ;\nj:\n        /*0000*/   LD.E R1, desc[UR4][R2.64] ;\n";
        let s = sass_pre_wait(sass);
        assert_eq!(
            s["k"],
            PreWait {
                loads: 1,
                waits: true
            }
        );
        assert_eq!(
            s["j"],
            PreWait {
                loads: 1,
                waits: false
            }
        );
        assert!(hoisted_over_wait(&p, &s).is_empty());
        let mut s2 = s.clone();
        s2.get_mut("k").unwrap().loads = 3;
        s2.remove("j");
        assert_eq!(
            hoisted_over_wait(&p, &s2),
            [
                "j: in the PTX, not in the SASS".to_string(),
                "k: 3 loads before the grid wait in the SASS, 2 in the PTX".to_string()
            ]
        );
    }
}
