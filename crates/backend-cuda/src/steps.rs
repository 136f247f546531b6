//! Step graphs, host side: what a recorded forward step reads from the host, and how each of
//! those tables is derived again from a new batch before a replay. Free of CUDA, so CI tests it.
//!
//! A CUDA graph bakes in every kernel's arguments: device pointers and scalars. Scalars follow
//! from the step's shape ([`lockstep_graph::StepKey`]); pointers stay valid because the graph
//! owns its buffers. What changes from step to step (token ids, positions, cache slots, the
//! attention tables) lives in per-graph device buffers sized for any step of that shape, which
//! are rewritten before each replay. Each table is derived by the same function the op itself
//! uses, with the op's checks, and while a step is being captured every op compares the table
//! it computes with the one staged for it: a mismatch abandons the capture.

use lockstep_graph::{BackendError, Batch};

use crate::plan::{self, AttnPlan, ROW_INFO};

/// The host tables an op uploads, by what determines them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// `embed`'s token ids, checked against the table's rows.
    Ids { vocab: usize },
    /// `rope`'s (cos, sin) table for the batch's positions.
    Rope { n_rot: usize, base_bits: u32 },
    /// `kv_store`'s destination slots.
    KvSlots { n_slots: usize },
    /// `attention`'s per-row table, key slots and masks.
    Attn { n_heads: usize, n_slots: usize },
    /// `select_rows`' row indices (the rows whose logits are wanted).
    Select { n_rows: usize },
}

/// One staged table. Two tables of a kind are equal when they would upload the same values
/// (a rope table is a function of its positions, which are compared instead).
#[derive(Clone, Debug, PartialEq)]
pub enum HostInput {
    U32(Vec<u32>),
    Rope {
        positions: Vec<u32>,
        table: Vec<f64>,
    },
    Attn(AttnPlan),
}

/// Device elements of each buffer an input needs, for any step of `n_tokens` rows: enough
/// for every row to read every cache slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// u32 ids/slots/indices, f64 rope values, or the attention plan's key slots.
    pub main: usize,
    /// The attention plan's row table (i32).
    pub info: usize,
    /// The attention plan's masks (u8).
    pub mask: usize,
    /// Attention scores (rows x heads x keys).
    pub scores: usize,
}

impl InputKind {
    /// The table for `batch`, derived as the op derives it and checked as the op checks it.
    pub fn derive(self, batch: &Batch) -> Result<HostInput, BackendError> {
        match self {
            InputKind::Ids { vocab } => {
                for (row, &id) in batch.tokens.iter().enumerate() {
                    if id as usize >= vocab {
                        return Err(BackendError::TokenOutOfRange { id, row, vocab });
                    }
                }
                Ok(HostInput::U32(batch.tokens.clone()))
            }
            InputKind::Rope { n_rot, base_bits } => Ok(HostInput::Rope {
                positions: batch.positions.clone(),
                table: plan::rope_table(&batch.positions, n_rot, f32::from_bits(base_bits)),
            }),
            InputKind::KvSlots { n_slots } => {
                if let Some(&s) = batch.slots.iter().find(|&&s| s as usize >= n_slots) {
                    return Err(BackendError::Kv(format!(
                        "slot {s} outside the cache ({n_slots} slots)"
                    )));
                }
                Ok(HostInput::U32(batch.slots.clone()))
            }
            InputKind::Attn { n_heads, n_slots } => Ok(HostInput::Attn(plan::attention_plan(
                batch,
                batch.n_tokens(),
                n_heads,
                n_slots,
            )?)),
            InputKind::Select { n_rows } => {
                let mut idx = Vec::with_capacity(batch.output_rows.len());
                for &r in &batch.output_rows {
                    if r >= n_rows {
                        return Err(BackendError::Other(format!(
                            "output row {r} outside the batch of {n_rows} rows"
                        )));
                    }
                    idx.push(r as u32);
                }
                Ok(HostInput::U32(idx))
            }
        }
    }

    /// The table for `batch` where it differs from `staged` (what the device holds), `None`
    /// where it is the same. A rope table is a function of its positions: only those are
    /// compared, so an unchanged table costs no trigonometry.
    pub fn derive_changed(
        self,
        batch: &Batch,
        staged: &HostInput,
    ) -> Result<Option<HostInput>, BackendError> {
        if let (InputKind::Rope { .. }, HostInput::Rope { positions, .. }) = (self, staged) {
            if *positions == batch.positions {
                return Ok(None);
            }
        }
        let host = self.derive(batch)?;
        Ok((host != *staged).then_some(host))
    }

    /// Room for this input in any step of `n_tokens` rows and `n_outputs` outputs.
    pub fn capacity(self, n_tokens: usize, n_outputs: usize) -> Capacity {
        let none = Capacity {
            main: 0,
            info: 0,
            mask: 0,
            scores: 0,
        };
        match self {
            InputKind::Ids { .. } | InputKind::KvSlots { .. } => Capacity {
                main: n_tokens,
                ..none
            },
            InputKind::Rope { n_rot, .. } => Capacity {
                main: n_tokens * (n_rot / 2) * 2,
                ..none
            },
            InputKind::Select { .. } => Capacity {
                main: n_outputs,
                ..none
            },
            InputKind::Attn { n_heads, n_slots } => Capacity {
                main: n_tokens * n_slots,
                info: n_tokens * ROW_INFO,
                mask: n_tokens * n_slots,
                scores: n_tokens * n_heads * n_slots,
            },
        }
    }
}

impl HostInput {
    /// Whether the table fits buffers of `cap` (a replay falls back to running the ops one by
    /// one when it does not).
    pub fn fits(&self, cap: Capacity) -> bool {
        match self {
            HostInput::U32(v) => v.len() <= cap.main,
            HostInput::Rope { table, .. } => table.len() <= cap.main,
            HostInput::Attn(p) => {
                p.slots.len() <= cap.main
                    && p.info.len() <= cap.info
                    && p.mask.len() <= cap.mask
                    && p.n_scores <= cap.scores
            }
        }
    }
}

/// Scores a step's own attention buffers hold: room for any step of the shape (`cap`), and in
/// every case for this table's own scores, which the recording step writes for real. (A
/// shape whose buffers would be too large to keep is still recorded once, run eagerly with
/// its tables at their exact size, then refused: its scores must fit that table.)
pub fn score_room(cap: Capacity, host: &HostInput) -> usize {
    let need = match host {
        HostInput::Attn(p) => p.n_scores,
        _ => 0,
    };
    cap.scores.max(need).max(1)
}

/// The step most likely to follow the decode step `batch`, for staging its tables while
/// `batch`'s graph runs (the cuda backend's `prestage`): every sequence one position on, its
/// new key in the slot after its last one (the engine's pages are runs of consecutive slots,
/// so this holds but at a page's end), the same tokens. A guess: the step that comes is
/// staged from its own tables as always, and only the tables that differ from the guess are
/// written again. `None` for what is not a plain decode step (a row of several tokens, a mask).
pub fn next_decode_batch(batch: &Batch) -> Option<Batch> {
    if batch.seqs.is_empty() || batch.seqs.iter().any(|s| s.n_rows != 1 || s.mask.is_some()) {
        return None;
    }
    let mut next = batch.clone();
    for s in &mut next.seqs {
        let slot = s.kv_slots.last()?.checked_add(1)?;
        s.first_pos = s.first_pos.checked_add(1)?;
        s.kv_slots.push(slot);
        *next.positions.get_mut(s.first_row)? = s.first_pos;
        *next.slots.get_mut(s.first_row)? = slot;
    }
    Some(next)
}

/// Whether a step's graph may be launched ahead for the guess `next_decode_batch` makes after
/// `batch` (a cache of pages of `block_size` slots): one sequence of one token, unmasked, whose
/// next slot is on the page of its last. A launch ahead that the next step does not take runs
/// anyway, on a dummy token: its K/V must land in a slot the sequence owns and will write
/// before it reads (never the first slot of a page it may not get).
pub fn launch_ahead_safe(batch: &Batch, block_size: usize) -> bool {
    let [s] = batch.seqs.as_slice() else {
        return false;
    };
    batch.tokens.len() == 1
        && s.n_rows == 1
        && s.mask.is_none()
        && block_size > 0
        && s.kv_slots
            .last()
            .and_then(|l| l.checked_add(1))
            .is_some_and(|next| !(next as usize).is_multiple_of(block_size))
}

/// Whether a one-token step graph captured for a caller who asks for `out` takes its token
/// through a gate (`graph_exec::gate_rewrite`): only where launches ahead happen, for callers
/// who want the logits on the host (`bench`'s lent rows, `check`'s full ones), or with
/// `PRELAUNCH=gate`. The gate's read of host memory costs the graph about 2 us (session 39),
/// which `run` and `serve` (`Top`: the rows reduced on the device, no launch ahead) would pay
/// for nothing. A graph keeps what it was captured with.
pub(crate) fn gates(knob: crate::knobs::Prelaunch, out: lockstep_graph::LogitsOut<'_>) -> bool {
    use crate::knobs::Prelaunch;
    match knob {
        Prelaunch::Off => false,
        Prelaunch::GateOnly => true,
        Prelaunch::On => matches!(
            out,
            lockstep_graph::LogitsOut::Lend(_) | lockstep_graph::LogitsOut::Full
        ),
    }
}

/// Steps of at most this many rows are recorded and replayed (decode and small batches; a
/// long prefill is bound by its matmuls, not by launches, and its shape rarely recurs).
pub const MAX_GRAPH_TOKENS: usize = 64;
/// At most this many step shapes are kept recorded or captured at once.
pub const MAX_GRAPHS: usize = 32;
/// A shape whose attention buffers would exceed this many bytes is not captured.
pub const MAX_GRAPH_SCORE_BYTES: usize = 256 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_graph::BatchSeq;

    fn decode_batch(pos: &[u32], kv: &[Vec<u32>]) -> Batch {
        let seqs: Vec<BatchSeq> = kv
            .iter()
            .enumerate()
            .map(|(i, s)| BatchSeq {
                first_row: i,
                n_rows: 1,
                first_pos: pos[i],
                kv_slots: s.clone(),
                mask: None,
            })
            .collect();
        Batch {
            tokens: (0..pos.len() as u32).map(|i| 10 + i).collect(),
            positions: pos.to_vec(),
            slots: kv.iter().map(|s| *s.last().unwrap()).collect(),
            seqs,
            output_rows: (0..pos.len()).collect(),
        }
    }

    #[test]
    fn the_guessed_next_step_is_the_engines_next_step_inside_a_page() {
        // Two sequences at positions 2 and 0, their keys in pages of consecutive slots.
        let b = decode_batch(&[2, 0], &[vec![16, 17, 18], vec![32]]);
        let n = next_decode_batch(&b).unwrap();
        assert_eq!(n.positions, vec![3, 1]);
        assert_eq!(n.slots, vec![19, 33]);
        assert_eq!(n.tokens, b.tokens);
        assert_eq!(n.seqs[0].kv_slots, vec![16, 17, 18, 19]);
        assert_eq!(
            (n.seqs[1].first_pos, n.seqs[1].kv_slots.clone()),
            (1, vec![32, 33])
        );
        // Its tables are the ones that step would derive.
        let kinds = [
            InputKind::KvSlots { n_slots: 64 },
            InputKind::Attn {
                n_heads: 2,
                n_slots: 64,
            },
        ];
        let real = decode_batch(&[3, 1], &[vec![16, 17, 18, 19], vec![32, 33]]);
        for k in kinds {
            assert_eq!(k.derive(&n).unwrap(), k.derive(&real).unwrap(), "{k:?}");
        }
        // Not a plain decode step: no guess.
        let mut m = b.clone();
        m.seqs[0].mask = Some(vec![true; 3]);
        assert!(next_decode_batch(&m).is_none());
        let mut p = b;
        p.seqs[0].n_rows = 2;
        assert!(next_decode_batch(&p).is_none());
    }

    #[test]
    fn a_step_is_launched_ahead_only_where_its_guess_stays_on_the_sequences_page() {
        // Pages of 16 slots: the sequence's last key in slot 18 (page 1), next 19: fine.
        assert!(launch_ahead_safe(
            &decode_batch(&[2], &[vec![16, 17, 18]]),
            16
        ));
        // Last key in the page's last slot: the next one is another page's first.
        let end = decode_batch(&[15], &[(16..32).collect()]);
        assert!(!launch_ahead_safe(&end, 16));
        assert!(launch_ahead_safe(&end, 64));
        // Two sequences, two rows, a mask, no page size: never.
        assert!(!launch_ahead_safe(
            &decode_batch(&[2, 0], &[vec![16, 17, 18], vec![32]]),
            16
        ));
        let mut m = decode_batch(&[2], &[vec![16, 17, 18]]);
        m.seqs[0].mask = Some(vec![true; 3]);
        assert!(!launch_ahead_safe(&m, 16));
        let mut p = decode_batch(&[2], &[vec![16, 17, 18]]);
        p.seqs[0].n_rows = 2;
        assert!(!launch_ahead_safe(&p, 16));
        assert!(!launch_ahead_safe(
            &decode_batch(&[2], &[vec![16, 17, 18]]),
            0
        ));
        // A slot at the top of the u32 range has no next one.
        assert!(!launch_ahead_safe(
            &decode_batch(&[0], &[vec![u32::MAX]]),
            16
        ));
    }

    #[test]
    fn graphs_are_gated_for_the_callers_that_launch_ahead() {
        use crate::knobs::Prelaunch;
        use lockstep_graph::{LendRows, LogitsOut};
        let f = |_: &[f32]| {};
        let lend = LendRows(&f);
        for (knob, lent, full, top) in [
            (Prelaunch::On, true, true, false),
            (Prelaunch::GateOnly, true, true, true),
            (Prelaunch::Off, false, false, false),
        ] {
            assert_eq!(gates(knob, LogitsOut::Lend(&lend)), lent, "{knob:?}");
            assert_eq!(gates(knob, LogitsOut::Full), full, "{knob:?}");
            assert_eq!(gates(knob, LogitsOut::Top(8)), top, "{knob:?}");
        }
    }

    #[test]
    fn a_table_is_derived_again_only_where_it_changed() {
        let b = decode_batch(&[2, 0], &[vec![7, 8, 9], vec![3]]);
        let rope = InputKind::Rope {
            n_rot: 4,
            base_bits: 10000f32.to_bits(),
        };
        let staged = rope.derive(&b).unwrap();
        assert_eq!(rope.derive_changed(&b, &staged).unwrap(), None);
        // Same positions: the rope table is taken as staged, whatever it holds.
        let HostInput::Rope { positions, .. } = staged.clone() else {
            panic!("rope")
        };
        let stale = HostInput::Rope {
            positions,
            table: Vec::new(),
        };
        assert_eq!(rope.derive_changed(&b, &stale).unwrap(), None);
        let moved = decode_batch(&[3, 1], &[vec![7, 8, 9, 10], vec![3, 4]]);
        assert_eq!(
            rope.derive_changed(&moved, &staged).unwrap(),
            Some(rope.derive(&moved).unwrap())
        );
        let ids = InputKind::Ids { vocab: 100 };
        let staged = ids.derive(&b).unwrap();
        assert_eq!(ids.derive_changed(&b, &staged).unwrap(), None);
        let mut other = b.clone();
        other.tokens[1] = 50;
        assert_eq!(
            ids.derive_changed(&other, &staged).unwrap(),
            Some(HostInput::U32(vec![10, 50]))
        );
        // The op's checks still run.
        other.tokens[0] = 100;
        assert!(ids.derive_changed(&other, &staged).is_err());
    }

    #[test]
    fn derived_tables_are_the_ops_own() {
        let b = decode_batch(&[2, 0], &[vec![7, 8, 9], vec![3]]);
        assert_eq!(
            InputKind::Ids { vocab: 100 }.derive(&b).unwrap(),
            HostInput::U32(vec![10, 11])
        );
        assert_eq!(
            InputKind::KvSlots { n_slots: 16 }.derive(&b).unwrap(),
            HostInput::U32(vec![9, 3])
        );
        let HostInput::Rope { table, .. } = InputKind::Rope {
            n_rot: 4,
            base_bits: 10000f32.to_bits(),
        }
        .derive(&b)
        .unwrap() else {
            panic!("rope")
        };
        assert_eq!(table, plan::rope_table(&[2, 0], 4, 10000.0));
        let HostInput::Attn(p) = InputKind::Attn {
            n_heads: 2,
            n_slots: 16,
        }
        .derive(&b)
        .unwrap() else {
            panic!("attn")
        };
        assert_eq!(p, plan::attention_plan(&b, 2, 2, 16).unwrap());
        assert_eq!(p.slots, vec![7, 8, 9, 3]);
    }

    #[test]
    fn replay_inputs_are_checked_like_the_ops_inputs() {
        let b = decode_batch(&[2], &[vec![7, 8, 9]]);
        let e = InputKind::Ids { vocab: 10 }.derive(&b).unwrap_err();
        assert!(e.to_string().contains("10"), "{e}");
        let e = InputKind::KvSlots { n_slots: 9 }.derive(&b).unwrap_err();
        assert!(e.to_string().contains("slot 9"), "{e}");
        let e = InputKind::Attn {
            n_heads: 1,
            n_slots: 8,
        }
        .derive(&b)
        .unwrap_err();
        assert!(e.to_string().contains("key slot 8"), "{e}");
        let mut b2 = b.clone();
        b2.output_rows = vec![1];
        let e = InputKind::Select { n_rows: 1 }.derive(&b2).unwrap_err();
        assert!(e.to_string().contains("output row 1"), "{e}");
    }

    /// The recording step of a shape too large to keep (its capacity replaced by the exact
    /// sizes, `capacity(0, 0)`) still runs its attention for real: its score buffers must hold
    /// that step's scores. (Sized by the capacity alone they held 1 value, and the kernel wrote
    /// past them: NaN logits under `serve` at 46+ rows with a 32768-token cache.)
    #[test]
    fn a_recording_step_always_has_room_for_its_own_scores() {
        let kind = InputKind::Attn {
            n_heads: 9,
            n_slots: 32768,
        };
        let b = decode_batch(&[40, 12], &[(0..41).collect(), (100..113).collect()]);
        let host = kind.derive(&b).unwrap();
        let HostInput::Attn(p) = &host else {
            panic!("attn")
        };
        assert_eq!(p.n_scores, 9 * (41 + 13));
        // Too large to keep: exact sizes, yet room for this step's scores.
        let exact = kind.capacity(0, 0);
        assert_eq!(exact.scores, 0);
        assert_eq!(score_room(exact, &host), p.n_scores);
        // Kept: the shape's capacity, larger than this step needs.
        let kept = kind.capacity(2, 2);
        assert_eq!(score_room(kept, &host), 2 * 9 * 32768);
        assert_eq!(
            score_room(exact, &HostInput::U32(vec![1, 2])),
            1,
            "non-attention tables have no scores"
        );
    }

    #[test]
    fn capacity_holds_every_step_of_the_shape_until_the_cache_is_full() {
        let kind = InputKind::Attn {
            n_heads: 3,
            n_slots: 4,
        };
        let cap = kind.capacity(2, 2);
        // Both rows reading all four slots: the largest plan of this shape.
        let full = decode_batch(&[3, 3], &[vec![0, 1, 2, 3], vec![0, 1, 2, 3]]);
        assert!(kind.derive(&full).unwrap().fits(cap));
        let small = decode_batch(&[0, 1], &[vec![0], vec![1, 2]]);
        assert!(kind.derive(&small).unwrap().fits(cap));
        // Key lists longer than the cache (a slot listed twice) do not fit: replay falls back
        // to the ops.
        let over = decode_batch(&[4, 4], &[vec![0, 1, 2, 3, 3], vec![0, 1, 2, 3, 3]]);
        assert!(!kind.derive(&over).unwrap().fits(cap));
        let rope = InputKind::Rope {
            n_rot: 6,
            base_bits: 1f32.to_bits(),
        };
        assert!(rope.derive(&full).unwrap().fits(rope.capacity(2, 2)));
        assert_eq!(rope.capacity(2, 2).main, 12);
    }
}
