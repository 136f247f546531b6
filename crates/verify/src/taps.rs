//! What the verifier knows about tap names: their kind, canonical execution order, which taps
//! each one consumes, what a divergence there means, and name filters.

use std::cmp::Ordering;

/// Op order within a layer, as `lockstep_models::forward` emits them (`docs/taps.md`).
pub const LAYER_OPS: &[&str] = &[
    "attn_norm",
    "q",
    "k",
    "v",
    "q_norm",
    "k_norm",
    "q_rope",
    "k_rope",
    "k_read",
    "v_read",
    "kq",
    "kq_softmax",
    "kqv",
    "attn_out",
    "attn_post_norm",
    "ffn_inp",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_act",
    "ffn_out",
    "ffn_post_norm",
    "l_out",
];

/// A tap name split into its layer (if any) and op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapName<'a> {
    pub layer: Option<usize>,
    pub op: &'a str,
}

pub fn parse_tap(name: &str) -> TapName<'_> {
    if let Some(rest) = name.strip_prefix("blk.") {
        if let Some((l, op)) = rest.split_once('.') {
            if let Ok(layer) = l.parse::<usize>() {
                return TapName {
                    layer: Some(layer),
                    op,
                };
            }
        }
    }
    TapName {
        layer: None,
        op: name,
    }
}

/// Sort key of a tap within one step: model inputs, layers in order (ops in graph order), head.
/// Unknown names sort last, alphabetically.
pub fn order_key(name: &str) -> (u8, usize, usize, String) {
    let t = parse_tap(name);
    match (t.layer, t.op) {
        (None, "inp_embd") => (0, 0, 0, String::new()),
        (None, "inp_scaled") => (0, 0, 1, String::new()),
        (Some(l), op) => match LAYER_OPS.iter().position(|o| *o == op) {
            Some(i) => (1, l, i, String::new()),
            None => (1, l, LAYER_OPS.len(), op.to_string()),
        },
        (None, "result_norm") => (2, 0, 0, String::new()),
        (None, "result_output") => (2, 0, 1, String::new()),
        (None, other) => (3, 0, 0, other.to_string()),
    }
}

pub fn cmp_taps(a: &str, b: &str) -> Ordering {
    order_key(a).cmp(&order_key(b))
}

/// The taps (same step) that `name` is computed from, alternatives resolved against `present`
/// (gemma has `q_norm`, llama does not; the residual stream starts at `inp_scaled` or
/// `inp_embd`). Returns names that exist in `present`.
pub fn inputs_of(name: &str, present: &dyn Fn(&str) -> bool) -> Vec<String> {
    let t = parse_tap(name);
    let first = |cands: Vec<String>| -> Option<String> { cands.into_iter().find(|c| present(c)) };
    let residual_in = |layer: usize| -> Option<String> {
        if layer == 0 {
            first(vec!["inp_scaled".into(), "inp_embd".into()])
        } else {
            first(vec![format!("blk.{}.l_out", layer - 1)])
        }
    };
    let mut out: Vec<Option<String>> = Vec::new();
    match (t.layer, t.op) {
        (None, "inp_embd") => {}
        (None, "inp_scaled") => out.push(first(vec!["inp_embd".into()])),
        (None, "result_norm") | (None, "result_output") => {
            if t.op == "result_output" {
                out.push(first(vec!["result_norm".into()]));
            } else {
                // The last layer present.
                let mut l = 0usize;
                let mut last = None;
                while l < 4096 {
                    let n = format!("blk.{l}.l_out");
                    if present(&n) {
                        last = Some(n);
                    } else if last.is_some() {
                        break;
                    }
                    l += 1;
                }
                out.push(last);
            }
        }
        (Some(l), op) => {
            let b = |o: &str| format!("blk.{l}.{o}");
            match op {
                "attn_norm" => out.push(residual_in(l)),
                "q" | "k" | "v" => out.push(first(vec![b("attn_norm")])),
                "q_norm" => out.push(first(vec![b("q")])),
                "k_norm" => out.push(first(vec![b("k")])),
                "q_rope" => out.push(first(vec![b("q_norm"), b("q")])),
                "k_rope" => out.push(first(vec![b("k_norm"), b("k")])),
                "k_read" => out.push(first(vec![b("k_rope")])),
                "v_read" => out.push(first(vec![b("v")])),
                "kq" => {
                    out.push(first(vec![b("q_rope")]));
                    out.push(first(vec![b("k_read")]));
                }
                "kq_softmax" => out.push(first(vec![b("kq")])),
                "kqv" => {
                    out.push(first(vec![b("kq_softmax")]));
                    out.push(first(vec![b("v_read")]));
                }
                "attn_out" => out.push(first(vec![b("kqv")])),
                "attn_post_norm" => out.push(first(vec![b("attn_out")])),
                "ffn_inp" => {
                    out.push(residual_in(l));
                    out.push(first(vec![b("attn_post_norm"), b("attn_out")]));
                }
                "ffn_norm" => out.push(first(vec![b("ffn_inp")])),
                "ffn_gate" | "ffn_up" => out.push(first(vec![b("ffn_norm")])),
                "ffn_act" => {
                    out.push(first(vec![b("ffn_gate")]));
                    out.push(first(vec![b("ffn_up")]));
                }
                "ffn_out" => out.push(first(vec![b("ffn_act")])),
                "ffn_post_norm" => out.push(first(vec![b("ffn_out")])),
                "l_out" => {
                    out.push(first(vec![b("ffn_inp")]));
                    out.push(first(vec![b("ffn_post_norm"), b("ffn_out")]));
                }
                _ => {}
            }
        }
        _ => {}
    }
    out.into_iter().flatten().collect()
}

/// What a divergence first appearing at this tap means (the op that produced it).
pub fn explain(name: &str) -> String {
    let t = parse_tap(name);
    let l = t.layer.map(|l| format!("blk.{l}.")).unwrap_or_default();
    match t.op {
        "inp_embd" => "the embedding lookup is wrong (token_embd rows)".into(),
        "inp_scaled" => "the embedding scale is wrong".into(),
        "attn_norm" | "ffn_norm" | "q_norm" | "k_norm" | "attn_post_norm" | "ffn_post_norm" => {
            format!("the RMS norm producing {name} is wrong")
        }
        "result_norm" => {
            "the final RMS norm, or the selection of output rows before it, is wrong".into()
        }
        "q" => format!("the Q projection (matmul with {l}attn_q.weight) is wrong"),
        "k" => format!("the K projection (matmul with {l}attn_k.weight) is wrong"),
        "v" => format!("the V projection (matmul with {l}attn_v.weight) is wrong"),
        "q_rope" | "k_rope" => "RoPE is wrong (positions, frequencies or pairing)".into(),
        "k_read" => {
            "the K cache read is wrong (what was written, where, or how it is read back)".into()
        }
        "v_read" => {
            "the V cache read is wrong (what was written, where, or how it is read back)".into()
        }
        "kq" => "the attention scores are wrong (Q.K per head, scale or mask)".into(),
        "kq_softmax" => "the attention softmax is wrong".into(),
        "kqv" => "the attention weighted sum (softmax x V) is wrong".into(),
        "attn_out" => format!(
            "the attention output projection (matmul of kqv with {l}attn_output.weight) is wrong"
        ),
        "ffn_inp" | "l_out" => "the residual add is wrong".into(),
        "ffn_gate" => format!("the FFN gate projection (matmul with {l}ffn_gate.weight) is wrong"),
        "ffn_up" => format!("the FFN up projection (matmul with {l}ffn_up.weight) is wrong"),
        "ffn_act" => "the FFN activation (act(gate) * up) is wrong".into(),
        "ffn_out" => format!("the FFN down projection (matmul with {l}ffn_down.weight) is wrong"),
        "result_output" => "the LM head (output projection) is wrong".into(),
        _ => format!("the op producing {name} is wrong"),
    }
}

/// A tap-name filter: comma-separated glob patterns (`*` matches any run of characters);
/// a pattern starting with `-` excludes. `result_output` keeps only the logits;
/// `blk.*.k_read,blk.*.v_read` the cache reads; `-blk.*.kq*` everything but the attention
/// scores; an empty filter keeps everything.
#[derive(Clone, Debug, Default)]
pub struct TapFilter {
    patterns: Vec<String>,
}

impl TapFilter {
    pub fn all() -> TapFilter {
        TapFilter::default()
    }

    pub fn parse(spec: &str) -> TapFilter {
        TapFilter {
            patterns: spec
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect(),
        }
    }

    pub fn is_all(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn spec(&self) -> String {
        self.patterns.join(",")
    }

    pub fn matches(&self, name: &str) -> bool {
        let mut any_include = false;
        let mut included = false;
        for p in &self.patterns {
            match p.strip_prefix('-') {
                Some(ex) => {
                    if glob(ex, name) {
                        return false;
                    }
                }
                None => {
                    any_include = true;
                    included |= glob(p, name);
                }
            }
        }
        !any_include || included
    }
}

/// `*`-only glob matching, iterative (no backtracking blow-up).
pub fn glob(pattern: &str, s: &str) -> bool {
    let p = pattern.as_bytes();
    let t = s.as_bytes();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_works() {
        assert!(glob("blk.*.k_read", "blk.12.k_read"));
        assert!(!glob("blk.*.k_read", "blk.12.k_rope"));
        assert!(glob("*", "anything"));
        assert!(glob("result_output", "result_output"));
        assert!(!glob("result_output", "result_norm"));
        assert!(glob("blk.1.*", "blk.1.q"));
        assert!(!glob("blk.1.*", "blk.11.q"));
        let f = TapFilter::parse("-blk.*.kq*");
        assert!(f.matches("blk.0.q") && !f.matches("blk.3.kq_softmax") && !f.matches("blk.3.kq"));
        assert!(TapFilter::parse("blk.0.*,-blk.0.kq").matches("blk.0.q"));
        assert!(!TapFilter::parse("blk.0.*,-blk.0.kq").matches("blk.1.q"));
    }

    #[test]
    fn order_and_inputs() {
        let mut v = vec![
            "result_output",
            "blk.1.q",
            "blk.0.l_out",
            "inp_embd",
            "blk.0.k_read",
        ];
        v.sort_by(|a, b| cmp_taps(a, b));
        assert_eq!(
            v,
            [
                "inp_embd",
                "blk.0.k_read",
                "blk.0.l_out",
                "blk.1.q",
                "result_output"
            ]
        );
        let present = |n: &str| n != "blk.0.q_norm" && n != "inp_scaled";
        assert_eq!(inputs_of("blk.0.q_rope", &present), ["blk.0.q"]);
        assert_eq!(inputs_of("blk.0.attn_norm", &present), ["inp_embd"]);
        assert_eq!(
            inputs_of("blk.0.kq", &present),
            ["blk.0.q_rope", "blk.0.k_read"]
        );
    }
}
