//! Host instants of a step's stages before its backend sees it, for a backend's own clock (the
//! CUDA replay clock splits the host's time between two replays with them). Off unless a
//! backend turns them on: then each mark is one `Instant::now` into a thread-local slot.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);

thread_local! {
    static AT: Cell<[Option<Instant>; 5]> = const { Cell::new([None; 5]) };
}

/// The stages marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// The engine took the step (`Engine::step`'s first line).
    EngineEntry = 0,
    /// The engine built the batch and hands it to the model graph.
    BatchBuilt = 1,
    /// The engine returns the step's output (its last line).
    EngineExit = 2,
    /// A backend's replay returns (its last line).
    ReplayExit = 3,
    /// The model graph returned the step's output to the engine.
    ForwardReturned = 4,
}

/// Starts recording marks (for the whole process).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Records `m`'s instant on this thread, when marks are on.
pub fn mark(m: Mark) {
    if ON.load(Ordering::Relaxed) {
        AT.with(|a| {
            let mut v = a.get();
            v[m as usize] = Some(Instant::now());
            a.set(v);
        });
    }
}

/// The marks recorded on this thread since the last call, by [`Mark`] index; clears them.
pub fn take() -> [Option<Instant>; 5] {
    AT.with(|a| a.replace([None; 5]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_recorded_once_on_and_taken_once() {
        enable();
        mark(Mark::EngineEntry);
        mark(Mark::BatchBuilt);
        let [a, b, c, d, e] = take();
        assert!(a.is_some() && b.is_some() && a <= b);
        assert!(c.is_none() && d.is_none() && e.is_none());
        assert_eq!(take(), [None; 5]);
    }
}
