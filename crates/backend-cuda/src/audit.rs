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
//! The check compares, per kernel, the global loads that can run before a wait in the PTX
//! (the order the source asked for) with those in the SASS (the order that runs), each found
//! by walking the branches from the entry and stopping at waits. More in the SASS means ptxas
//! hoisted a load over a wait. Loads the source puts
//! before the wait on purpose (weights, written only at upload; the decode attention's earlier
//! keys) are in both counts; ptxas sinking one below the wait is allowed (a lost overlap, not a
//! race). And no kernel may write global memory (stores, reductions, atomics) before its wait,
//! in either text: launched early, it would overwrite what the kernel before still reads. The
//! test `nvrtc_compiles` runs it on the whole kernel source with NVRTC and nvdisasm.

use std::collections::{BTreeMap, HashMap};

/// A kernel's global loads and stores (with reductions and atomics) that can run before a
/// grid wait, and whether it waits at all; also its L2 prefetches there (no race: a prefetch
/// returns nothing to the program, so the audit only counts them, for the kernels that ask
/// for their weights early that way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreWait {
    pub loads: usize,
    pub stores: usize,
    pub waits: bool,
    pub prefetches: usize,
}

/// One instruction, as far as the audit cares.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ins {
    Label(String),
    Wait,
    Load,
    Store,
    Prefetch,
    /// To a label; `cond`: predicated, so execution may also fall through.
    Branch {
        target: String,
        cond: bool,
    },
    /// The path ends (an unpredicated exit or return).
    End,
    Other,
}

/// The global loads reachable from the function's entry without passing a grid wait, by
/// walking its branches (code layout differs between PTX and SASS: a kernel whose threads
/// wait on two paths has two waits, in either order in the text).
fn pre_wait(code: &[Ins]) -> PreWait {
    let labels: HashMap<&str, usize> = code
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c {
            Ins::Label(l) => Some((l.as_str(), i)),
            _ => None,
        })
        .collect();
    let mut seen = vec![false; code.len()];
    let mut work = vec![0usize];
    let (mut loads, mut stores, mut prefetches) = (0, 0, 0);
    while let Some(mut i) = work.pop() {
        while i < code.len() && !seen[i] {
            seen[i] = true;
            match &code[i] {
                Ins::Wait | Ins::End => break,
                Ins::Load => loads += 1,
                Ins::Store => stores += 1,
                Ins::Prefetch => prefetches += 1,
                Ins::Branch { target, cond } => {
                    // A label outside the text (a cut excerpt) ends that path.
                    if let Some(&t) = labels.get(target.as_str()) {
                        work.push(t);
                    }
                    if !cond {
                        break;
                    }
                }
                Ins::Label(_) | Ins::Other => {}
            }
            i += 1;
        }
    }
    PreWait {
        loads,
        stores,
        waits: code.contains(&Ins::Wait),
        prefetches,
    }
}

/// An instruction without its guard (`@%p1 ld...`, `@!P3 LDG...`), and whether it had one.
fn split_predicate(ins: &str) -> (bool, &str) {
    match ins.strip_prefix('@') {
        Some(r) => (
            true,
            r.split_once(char::is_whitespace)
                .map_or("", |(_, b)| b.trim_start()),
        ),
        None => (false, ins),
    }
}

/// Per `.entry` of a PTX module: its `ld.global*` and generic `ld` instructions (a generic
/// load may read global memory), and its global or generic stores, reductions and atomics,
/// that can run before a `griddepcontrol.wait`.
pub fn ptx_pre_wait(ptx: &str) -> BTreeMap<String, PreWait> {
    let mut funcs: BTreeMap<String, Vec<Ins>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in ptx.lines() {
        let t = line.trim();
        if let Some(rest) = t
            .strip_prefix(".visible .entry ")
            .or_else(|| t.strip_prefix(".entry "))
        {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            funcs.insert(name.clone(), Vec::new());
            current = Some(name);
            continue;
        }
        if t.starts_with(".func") || t.starts_with(".visible .func") {
            current = None;
            continue;
        }
        let Some(code) = current.as_ref().and_then(|n| funcs.get_mut(n)) else {
            continue;
        };
        if let Some(l) = t.strip_suffix(':') {
            if l.starts_with('$') {
                code.push(Ins::Label(l.to_string()));
            }
            continue;
        }
        let (cond, body) = split_predicate(t);
        let op = body
            .split(|c: char| c.is_whitespace() || c == ';')
            .next()
            .unwrap_or("");
        code.push(if op == "griddepcontrol.wait" && !cond {
            Ins::Wait
        } else if op == "bra" || op.starts_with("bra.") {
            let target = body[op.len()..]
                .trim()
                .trim_end_matches(';')
                .trim()
                .to_string();
            Ins::Branch { target, cond }
        } else if (op == "ret" || op == "exit") && !cond {
            Ins::End
        } else if op.starts_with("prefetch.") {
            Ins::Prefetch
        } else if ptx_reads_memory(op) {
            Ins::Load
        } else if ptx_writes_memory(op) {
            Ins::Store
        } else {
            Ins::Other
        });
    }
    funcs.into_iter().map(|(n, c)| (n, pre_wait(&c))).collect()
}

/// `ld.global...` or a generic `ld.<type>`; not `ld.param`, `ld.shared`, `ld.local`,
/// `ld.const`. Also `cp.async...global` (a copy from global to shared memory: a read of
/// global memory, like a load).
fn ptx_reads_memory(op: &str) -> bool {
    if op.starts_with("cp.async.") && op.contains(".global") {
        return true;
    }
    let Some(rest) = op.strip_prefix("ld.") else {
        return false;
    };
    !["param", "shared", "local", "const"]
        .iter()
        .any(|s| rest.starts_with(s))
}

/// `st`, `red` or `atom` on global or generic memory (not shared, local or param).
fn ptx_writes_memory(op: &str) -> bool {
    let Some(rest) = ["st.", "red.", "atom."]
        .iter()
        .find_map(|p| op.strip_prefix(p))
    else {
        return false;
    };
    !["param", "shared", "local"]
        .iter()
        .any(|s| rest.starts_with(s))
}

/// Per function of `nvdisasm -c` output: its `LDG` (global), `LD` (generic) and `LDGSTS`
/// (global to shared, `cp.async`) loads, and its `STG`/`ST`/`REDG`/`RED`/`ATOMG`/`ATOM`
/// writes, that can run before an `ACQBULK` (the wait's SASS).
pub fn sass_pre_wait(sass: &str) -> BTreeMap<String, PreWait> {
    let mut funcs: BTreeMap<String, Vec<Ins>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in sass.lines() {
        // A function starts at its name as a label in column 0 (`name:`); local labels are
        // `.L_x_N:`; `.text.name:` repeats the name.
        if let Some(name) = line.strip_suffix(':') {
            if name.starts_with(".L") {
                if let Some(code) = current.as_ref().and_then(|n| funcs.get_mut(n)) {
                    code.push(Ins::Label(name.to_string()));
                }
                continue;
            }
            if !name.is_empty()
                && !name.starts_with('.')
                && name.chars().all(|c| c.is_alphanumeric() || c == '_')
            {
                funcs.insert(name.to_string(), Vec::new());
                current = Some(name.to_string());
                continue;
            }
        }
        let Some(code) = current.as_ref().and_then(|n| funcs.get_mut(n)) else {
            continue;
        };
        // `/*0c40*/  @!P3 LDG.E.STRONG.GPU R16, desc[UR10][R38.64] ;`
        let Some((_, ins)) = line.split_once("*/") else {
            continue;
        };
        let ins = ins.trim();
        let (cond, body) = split_predicate(ins);
        let op = body.split_whitespace().next().unwrap_or("");
        let base = op.split('.').next().unwrap_or("");
        code.push(match base {
            "ACQBULK" if !cond => Ins::Wait,
            "LDG" | "LD" | "LDGSTS" => Ins::Load,
            "STG" | "ST" | "REDG" | "RED" | "ATOMG" | "ATOM" => Ins::Store,
            // `prefetch.global.L2` is `CCTL.E.PF2`.
            "CCTL" if op.contains(".PF") => Ins::Prefetch,
            "BRA" => {
                // BRA `(.L_x_7912) ;
                let target = body
                    .split_once("`(")
                    .and_then(|(_, r)| r.split_once(')'))
                    .map_or(String::new(), |(t, _)| t.to_string());
                // BRA.DIV (taken on divergence) may fall through too.
                Ins::Branch {
                    target,
                    cond: cond || op != "BRA",
                }
            }
            "EXIT" | "RET" | "BRX" | "JMX" if !cond => Ins::End,
            _ => Ins::Other,
        });
    }
    funcs.into_iter().map(|(n, c)| (n, pre_wait(&c))).collect()
}

/// The kernels whose SASS runs more global loads ahead of the grid wait than their PTX asks
/// for, that write global memory ahead of it (in either: a kernel launched early must not
/// overwrite what the kernel before still reads), or that wait in one and not the other,
/// each with its counts. Empty when every kernel's reads and writes wait as the source says.
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
        } else if s.stores > 0 || p.stores > 0 {
            bad.push(format!(
                "{name}: writes global memory before its grid wait ({} stores in the SASS, {} in the PTX)",
                s.stores, p.stores
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

    fn pw(loads: usize, stores: usize, waits: bool) -> PreWait {
        PreWait {
            loads,
            stores,
            waits,
            prefetches: 0,
        }
    }

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
        assert_eq!(p[k], pw(11, 0, true));
        // Plus the 8 non-coherent residual-row loads ptxas moved up (12 LDG.E.CONSTANT in all).
        assert_eq!(s[k], pw(19, 0, true));
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
        assert_eq!(p[k], pw(11, 0, true));
        // ptxas sank three of the early loads below the wait: allowed.
        assert_eq!(s[k], pw(8, 0, true));
        assert!(hoisted_over_wait(&p, &s).is_empty());
    }

    #[test]
    fn counts_copies_to_shared_memory_as_loads() {
        // `cp.async` (SASS `LDGSTS`) reads global memory: a copy ptxas moved above the wait
        // reads what the kernel before may still be writing, as a load would.
        let ptx = ".visible .entry c(\n)\n{\n\tcp.async.cg.shared.global [%r1], [%rd1], 16;\n\tcp.async.commit_group;\n\tgriddepcontrol.wait;\n\t@%p1 cp.async.cg.shared.global [%r2], [%rd2], 16;\n\tcp.async.wait_group 0;\n}\n";
        assert_eq!(ptx_pre_wait(ptx)["c"], pw(1, 0, true));
        let sass = "c:\n        /*0000*/   LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;\n        /*0010*/   LDGDEPBAR ;\n        /*0020*/   @P0 LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;\n        /*0030*/   ACQBULK ;\n        /*0040*/   DEPBAR.LE SB0, 0x0 ;\n";
        let s = sass_pre_wait(sass);
        assert_eq!(s["c"], pw(2, 0, true));
        assert_eq!(
            hoisted_over_wait(&ptx_pre_wait(ptx), &s),
            ["c: 2 loads before the grid wait in the SASS, 1 in the PTX".to_string()]
        );
    }

    #[test]
    fn counts_l2_prefetches_apart_from_loads() {
        // The long norm-fused kernels ask their first rows into L2 before the wait: counted,
        // not loads (nothing comes back to race with the kernel before); one sunk below the
        // wait is not counted.
        let ptx = ".visible .entry p(\n)\n{\n\t@%p1 prefetch.global.L2 [%rd1];\n\tld.global.nc.f32 %f1, [%rd2];\n\tgriddepcontrol.wait;\n\tprefetch.global.L2 [%rd3];\n}\n";
        let with = |prefetches| PreWait {
            prefetches,
            ..pw(1, 0, true)
        };
        let p = ptx_pre_wait(ptx);
        assert_eq!(p["p"], with(1));
        let sass = "p:\n        /*0000*/   @P5 CCTL.E.PF2 [R20] ;\n        /*0010*/   CCTL.E.PF2 [R28+0x1000] ;\n        /*0020*/   LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n        /*0030*/   ACQBULK ;\n        /*0040*/   CCTL.E.PF2 [R4] ;\n        /*0050*/   CCTL.IVALL ;\n";
        let s = sass_pre_wait(sass);
        assert_eq!(s["p"], with(2));
        assert!(hoisted_over_wait(&p, &s).is_empty());
    }

    #[test]
    fn parses_predicates_spaces_and_missing_waits() {
        let ptx = ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\tld.param.u64 %rd1, [k_param_0];\n\t@%p1 ld.global.nc.f32 %f1, [%rd2];\n\tld.shared.u32 %r1, [%r2];\n\tld.u32 %r3, [%rd3];\n\tgriddepcontrol.wait;\n\tld.global.f32 %f2, [%rd4];\n}\n.visible .entry j(\n)\n{\n\tld.global.f32 %f1, [%rd1];\n}\n";
        let p = ptx_pre_wait(ptx);
        assert_eq!(p["k"], pw(2, 0, true));
        assert_eq!(p["j"], pw(1, 0, false));
        let sass = "k:\n.text.k:\n        /*0000*/   LDC R1, c[0x0][0x28] ;\n        /*0010*/   @!P0 LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n        /*0020*/   LDS R3, [R4] ;\n.L_x_1:\n        /*0030*/   ACQBULK ;\n        /*0040*/   LDG.E R5, desc[UR4][R6.64] ;\nj:\n        /*0000*/   LD.E R1, desc[UR4][R2.64] ;\n";
        let s = sass_pre_wait(sass);
        assert_eq!(s["k"], pw(1, 0, true));
        assert_eq!(s["j"], pw(1, 0, false));
        assert!(hoisted_over_wait(&p, &s).is_empty());
        // Two waits (threads without work wait at once, the others after their loads), the
        // first in the text on the path without loads: the walk still finds the other path's.
        let two = "m:\n        /*0000*/   @!P0 BRA `(.L_x_7) ;\n        /*0010*/   ACQBULK ;\n        /*0020*/   BRA `(.L_x_8) ;\n.L_x_7:\n        /*0030*/   LDG.E.128.CONSTANT R4, desc[UR6][R4.64] ;\n        /*0040*/   BRA.DIV UR7, `(.L_x_9) ;\n        /*0050*/   LDG.E R8, desc[UR6][R6.64] ;\n.L_x_9:\n        /*0060*/   ACQBULK ;\n        /*0070*/   LDG.E R9, desc[UR6][R6.64] ;\n.L_x_8:\n        /*0080*/   EXIT ;\n";
        assert_eq!(sass_pre_wait(two)["m"], pw(2, 0, true));
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
