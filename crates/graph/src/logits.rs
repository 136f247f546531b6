//! What a step hands back from its logits rows: the rows themselves, or, reduced where the
//! logits live, their `k` largest entries and the statistics the generation monitors read.
//!
//! On a GPU a vocabulary-wide row is 0.2 to 1 MiB per token; sampling with top-k (and greedy
//! decoding, top-1) needs only the k largest logits in the sampler's order, so with
//! [`LogitsOut::Top`] the backend reduces every row on the device and only a few hundred
//! bytes cross to the host. [`LogitsSummary::of_row`] is the definition every backend's
//! reduction must match: the same ids and values, bit for bit, and the same counts.
//!
//! Sampling without top-k needs the whole row; with [`LogitsOut::TopPick`] the backend does
//! that part where the row is: temperature sampling without top-p draws there (the sampler's
//! random value handed in, only the token crosses; [`draw_row`] is the definition), and top-p
//! gets the row's total weight ([`row_total`]) beside its largest logits, the row itself only
//! when the nucleus reaches past them.

use std::cmp::Ordering;

pub use lockstep_sampling::row_draw::DRAW_FANOUT;
pub use lockstep_sampling::{draw_row, nucleus_len, nucleus_prefix, row_total, RowDraw};

/// What the caller wants from a step's output rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LogitsOut<'a> {
    /// Every output row's logits, on the host.
    Full,
    /// Every output row's logits on the host, lent to the caller instead of handed over: the
    /// backend calls the function once with the rows (consecutive, `n_vocab` values each)
    /// wherever they landed on the host, so a GPU backend makes no copy beyond the device's
    /// own (llama.cpp's logits buffer; `bench`'s tg).
    Lend(&'a LendRows<'a>),
    /// Per output row, a [`LogitsSummary`] with the `k` largest logits (`k >= 1`).
    Top(usize),
    /// As `Top(k)`, and for each output row whose entry of the slice is `Some`, what
    /// [`RowPick`] asks of the whole row. The slice has one entry per output row.
    TopPick(usize, &'a [Option<RowPick<'a>>]),
}

/// What a backend makes of one output row beyond its summary ([`LogitsOut::TopPick`]), so
/// that sampling without top-k, and logprobs, need no copy of the row.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowPick<'a> {
    /// A token drawn from the whole row ([`LogitsSummary::drawn`], its logit in
    /// [`LogitsSummary::drawn_logit`]), bitwise [`draw_row`]'s: temperature sampling without
    /// top-k or top-p.
    pub draw: Option<RowDraw>,
    /// Top-p at this `p` without top-k: a prefix of the row in the sampler's order that holds
    /// the nucleus ([`LogitsSummary::nucleus`]: [`nucleus_len`] of it against the total is
    /// `Some`); a backend that gathers too short a prefix hands back the row itself instead
    /// ([`LogitsSummary::row`]). Implies `total`.
    pub nucleus: Option<f32>,
    /// The row's total weight at temperature 1 ([`LogitsSummary::total`], bitwise
    /// [`row_total`]'s): what top-p measures against, and the logprobs' normalizer.
    pub total: bool,
    /// Tokens whose logits to hand back ([`LogitsSummary::gathered`], the row's own bits, in
    /// this order): what penalties and a logit bias adjust, beside the largest logits
    /// (`Sampler::top_needed_adjusted`). Each below the row's length.
    pub gather: &'a [u32],
    /// How many of the row's largest logits outside `gather` the caller needs (what its
    /// sampler keeps of the tokens nothing adjusts): when the `k` largest hold fewer, the row
    /// itself comes back too ([`LogitsSummary::row`]).
    pub untouched: usize,
    /// The row itself ([`LogitsSummary::row`]), for a sampler that needs all of it (or a
    /// caller that keeps it): the step's other rows still cross reduced.
    pub whole: bool,
}

impl<'a> RowPick<'a> {
    /// A token drawn from the whole row.
    pub fn draw(d: RowDraw) -> RowPick<'a> {
        RowPick {
            draw: Some(d),
            ..RowPick::default()
        }
    }

    /// Top-p at `p` without top-k: the total and the nucleus.
    pub fn nucleus(p: f32) -> RowPick<'a> {
        RowPick {
            nucleus: Some(p),
            total: true,
            ..RowPick::default()
        }
    }

    /// The logits of `ids` too, and the row when the largest logits hold fewer than
    /// `untouched` tokens outside `ids`.
    pub fn gathering(ids: &'a [u32], untouched: usize) -> RowPick<'a> {
        RowPick {
            gather: ids,
            untouched,
            ..RowPick::default()
        }
    }

    /// Whether `top` (a row's largest logits) holds fewer than [`untouched`](Self::untouched)
    /// tokens outside [`gather`](Self::gather) while the row has more: then the row itself is
    /// handed back.
    pub fn needs_row(&self, top: &[(u32, f32)], n_vocab: usize) -> bool {
        if self.untouched == 0 || top.len() >= n_vocab {
            return false;
        }
        // `gather` may hold thousands of tokens (a whole conversation's penalty window): look
        // the top's few up in a sorted copy rather than scan it once each.
        let mut ids = self.gather.to_vec();
        ids.sort_unstable();
        let outside = top
            .iter()
            .filter(|t| ids.binary_search(&t.0).is_err())
            .count();
        outside < self.untouched
    }

    /// The row itself.
    pub fn whole_row() -> RowPick<'a> {
        RowPick {
            whole: true,
            ..RowPick::default()
        }
    }

    /// This pick and the row's total too.
    pub fn with_total(self) -> RowPick<'a> {
        RowPick {
            total: true,
            ..self
        }
    }

    /// Whether the row's total is asked for.
    pub fn wants_total(&self) -> bool {
        self.total || self.nucleus.is_some()
    }

    /// What `row` gives for this pick, into `s` (the row's summary): the definition every
    /// backend's must match.
    pub fn fill(&self, row: &[f32], s: &mut LogitsSummary) {
        if let Some(d) = &self.draw {
            s.drawn = draw_row(row, d);
            s.drawn_logit = s.drawn.and_then(|t| row.get(t as usize).copied());
        }
        if self.wants_total() {
            s.total = row_total(row);
        }
        if let Some(p) = self.nucleus {
            s.nucleus = nucleus_prefix(row, p);
        }
        s.gathered = self
            .gather
            .iter()
            .map(|&i| (i, row.get(i as usize).copied().unwrap_or(f32::NAN)))
            .collect();
        if self.whole || s.non_finite == 0 && self.needs_row(&s.top, row.len()) {
            s.row = Some(row.to_vec());
        }
    }
}

/// The function [`LogitsOut::Lend`] lends the rows to (`Fn`, so the request stays `Copy`;
/// a caller that keeps something from the rows keeps it in a cell).
pub struct LendRows<'a>(pub &'a dyn Fn(&[f32]));

impl LendRows<'_> {
    pub fn lend(&self, rows: &[f32]) {
        (self.0)(rows)
    }
}

impl std::fmt::Debug for LendRows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LendRows")
    }
}

/// Two requests to lend are the same request when they lend to the same function.
impl PartialEq for LendRows<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(
            self.0 as *const dyn Fn(&[f32]),
            other.0 as *const dyn Fn(&[f32]),
        )
    }
}

/// A step's result, as asked by [`LogitsOut`].
#[derive(Clone, Debug, PartialEq)]
pub enum StepOut {
    Full(crate::HostTensor),
    Top(Vec<LogitsSummary>),
    /// The rows went to [`LogitsOut::Lend`]'s function: their count and length.
    Lent {
        rows: usize,
        n_vocab: usize,
    },
}

impl StepOut {
    /// `out` made from logits already on the host: the rows themselves, or each reduced by
    /// [`LogitsSummary::of_row`] (and drawn from by [`draw_row`]).
    pub fn from_host(host: crate::HostTensor, out: LogitsOut<'_>) -> StepOut {
        let (k, picks) = match out {
            LogitsOut::Full => return StepOut::Full(host),
            LogitsOut::Lend(to) => {
                to.lend(&host.data);
                return StepOut::Lent {
                    rows: host.rows(),
                    n_vocab: host.cols(),
                };
            }
            LogitsOut::Top(k) => (k, &[][..]),
            LogitsOut::TopPick(k, picks) => (k, picks),
        };
        StepOut::Top(
            (0..host.rows())
                .map(|r| {
                    let mut s = LogitsSummary::of_row(host.row(r), k);
                    if let Some(Some(p)) = picks.get(r) {
                        p.fill(host.row(r), &mut s);
                    }
                    s
                })
                .collect(),
        )
    }
}

/// One logits row, reduced.
#[derive(Clone, Debug, PartialEq)]
pub struct LogitsSummary {
    /// The `k` largest logits (fewer when the row is shorter) with their ids: descending by
    /// value, ties broken by the lower id (the sampler's order). Meaningless when the row has
    /// non-finite values (`non_finite > 0`).
    pub top: Vec<(u32, f32)>,
    /// The row's length.
    pub n_vocab: usize,
    /// Non-finite logits (NaN or ±inf), and how many of them are NaN.
    pub non_finite: usize,
    pub nan: usize,
    /// The first non-finite logit: its index and value.
    pub first_non_finite: Option<(u32, f32)>,
    /// Entropy of softmax(row) in nats; 0 when the row has non-finite values. Backends may
    /// compute it in another order or precision (it feeds the flat-logits monitor, never a
    /// token choice).
    pub entropy: f64,
    /// The token drawn from the whole row when the step was asked to ([`RowPick::draw`]),
    /// and its logit; `None` otherwise, or when the row has non-finite values.
    pub drawn: Option<u32>,
    pub drawn_logit: Option<f32>,
    /// The row's total weight at temperature 1 when the step was asked for it
    /// ([`RowPick::total`]); `None` otherwise, or when the row has non-finite values.
    pub total: Option<f64>,
    /// For [`RowPick::nucleus`]: a prefix of the row in the sampler's order holding the
    /// nucleus (the host's reduction gives the nucleus itself, a device a longer prefix).
    pub nucleus: Option<Vec<(u32, f32)>>,
    /// The row itself: asked for ([`RowPick::whole`]), or when a [`RowPick::nucleus`] reached
    /// past what the backend gathered, or the largest logits hold too few tokens outside
    /// [`RowPick::gather`] ([`RowPick::needs_row`]).
    pub row: Option<Vec<f32>>,
    /// [`RowPick::gather`]'s tokens with their logits, in its order (NaN for one past the row).
    pub gathered: Vec<(u32, f32)>,
}

/// The sort key of the sampler's order: a larger key is a larger logit, or the same logit
/// with a lower id. `-0.0` and `+0.0` are one value, as in `f32::partial_cmp`.
pub fn top_key(id: u32, logit: f32) -> u64 {
    let bits = if logit == 0.0 { 0 } else { logit.to_bits() };
    let ordered = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    (u64::from(ordered) << 32) | u64::from(u32::MAX - id)
}

impl LogitsSummary {
    /// The reference reduction of `row` with the `k` largest logits (`k == 0`: statistics only).
    pub fn of_row(row: &[f32], k: usize) -> LogitsSummary {
        let mut non_finite = 0;
        let mut nan = 0;
        let mut first_non_finite = None;
        for (i, &v) in row.iter().enumerate() {
            if !v.is_finite() {
                non_finite += 1;
                nan += usize::from(v.is_nan());
                if first_non_finite.is_none() {
                    first_non_finite = Some((i as u32, v));
                }
            }
        }
        let mut entropy = 0.0;
        let mut top = Vec::new();
        if non_finite == 0 && !row.is_empty() {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let (mut z, mut s) = (0f64, 0f64);
            for &v in row {
                let d = f64::from(v) - f64::from(max);
                let e = d.exp();
                z += e;
                s += e * d;
            }
            // H = log Z - E[d]
            entropy = z.ln() - s / z;
            if k > 0 {
                let mut all: Vec<(u32, f32)> = row
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as u32, v))
                    .collect();
                let by_key = |a: &(u32, f32), b: &(u32, f32)| -> Ordering {
                    top_key(b.0, b.1).cmp(&top_key(a.0, a.1))
                };
                if k < all.len() {
                    all.select_nth_unstable_by(k - 1, by_key);
                    all.truncate(k);
                }
                all.sort_unstable_by(by_key);
                top = all;
            }
        }
        LogitsSummary {
            top,
            n_vocab: row.len(),
            non_finite,
            nan,
            first_non_finite,
            entropy,
            drawn: None,
            drawn_logit: None,
            total: None,
            nucleus: None,
            row: None,
            gathered: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_is_the_sampler_order() {
        let row = [1.0, 3.0, -0.0, 3.0, 0.0, -2.5, 7.0, -1e30];
        let s = LogitsSummary::of_row(&row, 5);
        assert_eq!(
            s.top,
            vec![(6, 7.0), (1, 3.0), (3, 3.0), (0, 1.0), (2, -0.0)]
        );
        assert_eq!(s.non_finite, 0);
        let all = LogitsSummary::of_row(&row, 100);
        assert_eq!(all.top.len(), row.len());
        assert_eq!(all.top[7], (7, -1e30));
        // -0.0 and 0.0 tie: the lower id first.
        assert_eq!(&all.top[4..6], &[(2, -0.0), (4, 0.0)]);
    }

    #[test]
    fn keys_order_like_the_values() {
        let vals = [
            f32::MIN,
            -1.0,
            -f32::MIN_POSITIVE,
            0.0,
            1e-45,
            0.5,
            f32::MAX,
        ];
        for w in vals.windows(2) {
            assert!(top_key(0, w[0]) < top_key(0, w[1]), "{} < {}", w[0], w[1]);
        }
        assert!(top_key(3, 1.0) > top_key(4, 1.0));
        assert_eq!(top_key(3, -0.0), top_key(3, 0.0));
    }

    #[test]
    fn non_finite_rows_are_counted_not_ranked() {
        let s = LogitsSummary::of_row(&[0.0, f32::NAN, f32::INFINITY, 1.0, f32::NAN], 2);
        assert_eq!((s.non_finite, s.nan), (3, 2));
        assert_eq!(s.first_non_finite.map(|f| f.0), Some(1));
        assert!(s.top.is_empty());
        assert_eq!(s.entropy, 0.0);
    }

    #[test]
    fn gathered_logits_and_the_row_when_the_top_holds_too_few_others() {
        let row = [1.0, 3.0, -0.0, 3.0, 0.0, -2.5, 7.0, -1e30];
        let ids = [6, 7, 1, 8];
        // Two tokens outside `ids` wanted among the top 3 (6, 1, 3): only 3 is.
        let pick = RowPick::gathering(&ids, 2);
        let mut s = LogitsSummary::of_row(&row, 3);
        pick.fill(&row, &mut s);
        assert_eq!(s.gathered.len(), 4);
        assert_eq!(&s.gathered[..3], &[(6, 7.0), (7, -1e30), (1, 3.0)]);
        assert!(s.gathered[3].1.is_nan(), "one past the row");
        assert_eq!(s.row.as_deref(), Some(&row[..]));
        // One is there: no row.
        let mut s = LogitsSummary::of_row(&row, 3);
        RowPick::gathering(&ids, 1).fill(&row, &mut s);
        assert_eq!(s.row, None);
        // The top is the whole row: nothing more to hand back.
        let mut s = LogitsSummary::of_row(&row, 8);
        RowPick::gathering(&ids, 7).fill(&row, &mut s);
        assert_eq!(s.row, None);
    }

    #[test]
    fn entropy_of_uniform_and_peaked_rows() {
        let s = LogitsSummary::of_row(&[2.0; 8], 1);
        assert!((s.entropy - 8f64.ln()).abs() < 1e-12);
        assert_eq!(s.top, vec![(0, 2.0)]);
        let p = LogitsSummary::of_row(&[0.0, 100.0, 0.0], 1);
        assert!(p.entropy >= 0.0 && p.entropy < 1e-30);
    }
}
