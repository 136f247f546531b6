//! Running a model step by step with taps recorded: prefill, then decode steps that are either
//! greedy (the backend's own argmax) or teacher-forced with given ids.

use lockstep_engine::{Engine, EngineError, Logits, SeqId, SeqInput};
use lockstep_graph::taps::Recorder;
use lockstep_graph::{Backend, HostTensor, Taps};

use crate::metrics::argmax;
use crate::taps::TapFilter;
use crate::trace::{StepTrace, Trace, TraceMeta};
use crate::VerifyError;

/// An engine on any backend, behind a trait object so commands can pick the backend at run
/// time.
pub trait AnyEngine {
    fn backend_name(&self) -> String;
    /// The backend's per-layer taps its kernels never hold (`Backend::hidden_taps`).
    fn hidden_taps(&self) -> Vec<String> {
        Vec::new()
    }
    fn n_vocab(&self) -> usize;
    fn n_layers(&self) -> usize;
    fn new_sequence(&mut self) -> SeqId;
    fn free_sequence(&mut self, id: SeqId);
    fn seq_len(&self, id: SeqId) -> Result<usize, EngineError>;
    fn block_table(&self, id: SeqId) -> Result<Vec<u32>, EngineError>;
    fn forward(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
    ) -> Result<Vec<HostTensor>, EngineError>;
}

impl<B: Backend> AnyEngine for Engine<B> {
    fn backend_name(&self) -> String {
        self.backend.name().to_string()
    }
    fn hidden_taps(&self) -> Vec<String> {
        self.backend
            .hidden_taps()
            .iter()
            .map(|t| t.to_string())
            .collect()
    }
    fn n_vocab(&self) -> usize {
        Engine::n_vocab(self)
    }
    fn n_layers(&self) -> usize {
        self.model.config.n_layers
    }
    fn new_sequence(&mut self) -> SeqId {
        Engine::new_sequence(self)
    }
    fn free_sequence(&mut self, id: SeqId) {
        Engine::free_sequence(self, id)
    }
    fn seq_len(&self, id: SeqId) -> Result<usize, EngineError> {
        Engine::seq_len(self, id)
    }
    fn block_table(&self, id: SeqId) -> Result<Vec<u32>, EngineError> {
        Engine::block_table(self, id).map(<[u32]>::to_vec)
    }
    fn forward(
        &mut self,
        inputs: &[SeqInput<'_>],
        taps: &mut Taps<'_>,
    ) -> Result<Vec<HostTensor>, EngineError> {
        Engine::forward(self, inputs, taps)
    }
}

/// Whether forward passes carry an explicit attention mask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MaskMode {
    /// No mask (the causal rule only).
    #[default]
    None,
    /// An explicit all-true mask, which must change nothing.
    AllTrue,
}

impl MaskMode {
    pub fn parse(s: &str) -> Option<MaskMode> {
        match s {
            "none" => Some(MaskMode::None),
            "all-true" => Some(MaskMode::AllTrue),
            _ => None,
        }
    }
}

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    pub prompt: Vec<u32>,
    /// Decode steps after the prefill.
    pub decode: usize,
    /// Teacher-forced decode ids (`force[k]` is fed at decode step k+1); missing entries are
    /// chosen greedily from the previous step's logits.
    pub force: Vec<u32>,
    pub filter: TapFilter,
    pub mask: MaskMode,
    /// Logits of every prompt position (default: the last one only).
    pub all_logits: bool,
}

/// Steps one sequence of an engine, recording the taps of each step.
pub struct Stepper<'e> {
    engine: &'e mut dyn AnyEngine,
    seq: SeqId,
    spec: RunSpec,
    step: usize,
    next_token: Option<u32>,
}

impl<'e> Stepper<'e> {
    pub fn new(engine: &'e mut dyn AnyEngine, spec: RunSpec) -> Result<Stepper<'e>, VerifyError> {
        if spec.prompt.is_empty() {
            return Err(VerifyError::Input("the prompt has no tokens".into()));
        }
        let seq = engine.new_sequence();
        Ok(Stepper {
            engine,
            seq,
            spec,
            step: 0,
            next_token: None,
        })
    }

    pub fn n_steps(&self) -> usize {
        1 + self.spec.decode
    }

    /// The tokens the next step will feed (`None` after the last step).
    pub fn next_tokens(&self) -> Option<Vec<u32>> {
        if self.step == 0 {
            Some(self.spec.prompt.clone())
        } else if self.step < self.n_steps() {
            match self.spec.force.get(self.step - 1) {
                Some(&t) => Some(vec![t]),
                None => self.next_token.map(|t| vec![t]),
            }
        } else {
            None
        }
    }

    /// Runs the next step (with `tokens` overriding the planned ones, for lockstep diffs)
    /// and returns its trace (the logits are always included as `result_output`, even when
    /// the filter leaves other taps out).
    pub fn step(&mut self, tokens: Option<Vec<u32>>) -> Result<Option<StepTrace>, VerifyError> {
        let Some(tokens) = tokens.or_else(|| self.next_tokens()) else {
            return Ok(None);
        };
        let n_past = self.engine.seq_len(self.seq)?;
        let filter = self.spec.filter.clone();
        let mut rec = Recorder::new();
        rec.filter = Some(Box::new(move |n: &str| filter.matches(n)));
        let mask = match self.spec.mask {
            MaskMode::None => None,
            MaskMode::AllTrue => Some(vec![true; tokens.len() * (n_past + tokens.len())]),
        };
        let logits_mode = if self.step == 0 && self.spec.all_logits {
            Logits::All
        } else {
            Logits::Last
        };
        let out = self.engine.forward(
            &[SeqInput {
                seq: self.seq,
                tokens: &tokens,
                logits: logits_mode,
                mask,
            }],
            &mut Taps::new(&mut rec),
        )?;
        let logits = out
            .into_iter()
            .next()
            .ok_or_else(|| VerifyError::Input("the engine returned no logits".into()))?;
        let last = logits.rows().saturating_sub(1);
        self.next_token = Some(argmax(logits.row(last)));
        let mut taps = rec.taps;
        if !taps.iter().any(|(n, _)| n == "result_output") {
            taps.push(("result_output".to_string(), logits));
        }
        let st = StepTrace {
            step: self.step,
            positions: (n_past..n_past + tokens.len()).map(|p| p as u32).collect(),
            tokens,
            taps,
        };
        self.step += 1;
        Ok(Some(st))
    }
}

impl Drop for Stepper<'_> {
    fn drop(&mut self) {
        self.engine.free_sequence(self.seq);
    }
}

/// Runs `spec` to the end and returns the whole trace.
pub fn record(
    engine: &mut dyn AnyEngine,
    spec: &RunSpec,
    meta: TraceMeta,
) -> Result<Trace, VerifyError> {
    let mut s = Stepper::new(engine, spec.clone())?;
    let mut steps = Vec::new();
    while let Some(st) = s.step(None)? {
        steps.push(st);
    }
    Ok(Trace { meta, steps })
}

/// Parses `1,2,3` (spaces allowed) into token ids.
pub fn parse_ids(s: &str) -> Result<Vec<u32>, VerifyError> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<u32>()
                .map_err(|_| VerifyError::Input(format!("`{p}` is not a token id")))
        })
        .collect()
}
