//! Taps: every op output of a forward pass, offered by canonical name to an observer.
//!
//! Names follow `docs/taps.md` (`inp_embd`, `blk.3.attn_norm`, `blk.3.k_read`, `result_output`,
//! ...). With no observer attached, [`Taps::emit`] is a branch on `None`: no name is formatted
//! and nothing is copied to the host, so taps cost nothing measurable in normal runs.

use crate::HostTensor;

/// Receives tap values. `wants` lets an observer filter before any copy is made.
pub trait TapObserver {
    fn wants(&self, name: &str) -> bool;
    fn record(&mut self, name: &str, value: HostTensor);
}

/// The handle a forward pass carries; `Taps::none()` for normal runs.
pub struct Taps<'a> {
    observer: Option<&'a mut dyn TapObserver>,
}

impl<'a> Taps<'a> {
    pub fn none() -> Taps<'static> {
        Taps { observer: None }
    }

    pub fn new(observer: &'a mut dyn TapObserver) -> Taps<'a> {
        Taps {
            observer: Some(observer),
        }
    }

    pub fn active(&self) -> bool {
        self.observer.is_some()
    }

    /// Whether the per-layer tap `blk.{layer}.{name}` is wanted; lets a backend skip keeping
    /// intermediates (attention scores) that only a trace needs.
    pub fn wants_layer(&self, layer: usize, name: &str) -> bool {
        match self.observer.as_deref() {
            Some(obs) => obs.wants(&layer_tap(layer, name)),
            None => false,
        }
    }

    /// Offers a model-level tap (`inp_embd`, `result_norm`, ...). `value` runs only if wanted.
    pub fn emit(&mut self, name: &str, value: impl FnOnce() -> HostTensor) {
        if let Some(obs) = self.observer.as_deref_mut() {
            if obs.wants(name) {
                obs.record(name, value());
            }
        }
    }

    /// Offers a per-layer tap, named `blk.{layer}.{name}`.
    pub fn emit_layer(&mut self, layer: usize, name: &str, value: impl FnOnce() -> HostTensor) {
        if let Some(obs) = self.observer.as_deref_mut() {
            let full = layer_tap(layer, name);
            if obs.wants(&full) {
                obs.record(&full, value());
            }
        }
    }
}

/// The canonical name of a per-layer tap.
pub fn layer_tap(layer: usize, name: &str) -> String {
    format!("blk.{layer}.{name}")
}

/// Decides by name which taps an observer keeps.
pub type TapFilter = Box<dyn Fn(&str) -> bool + Send>;

/// Records every tap it is offered, in execution order. Handy for tests and traces.
#[derive(Default)]
pub struct Recorder {
    pub filter: Option<TapFilter>,
    pub taps: Vec<(String, HostTensor)>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::default()
    }

    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.taps.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

impl TapObserver for Recorder {
    fn wants(&self, name: &str) -> bool {
        self.filter.as_ref().is_none_or(|f| f(name))
    }

    fn record(&mut self, name: &str, value: HostTensor) {
        self.taps.push((name.to_string(), value));
    }
}
