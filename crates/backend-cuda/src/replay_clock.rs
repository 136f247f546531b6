//! The replay clock (`LOCKSTEP_CUDA_REPLAY_CLOCK=1`): where the wall time of a replayed step
//! goes between the host and the device.
//!
//! The step timeline (timeline.rs) says how a step graph's kernels share the graph's span; it
//! cannot see what happens outside the graph: the host deriving and uploading the step's
//! tables, the launch, the logits' copy to the host, and the engine's work between steps,
//! during all of which the GPU may be idle. This clock charges every replay's wall time to
//! those phases: host instants around each phase, and three device events (before the graph,
//! after it, after the logits' copy) for the device's side. The arithmetic (means, the table)
//! is plain host code, tested in CI; the backend only feeds it durations.

use std::fmt::Write as _;

/// The phases of one replay, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplaySample {
    /// From the end of the replay before to this one's start: the engine and its caller.
    pub between_us: Option<f64>,
    /// Of `between_us` (`lockstep_graph::marks`): until the engine took the step (the caller,
    /// and the engine's return from the step before), the engine building the batch, and the
    /// model graph until its backend's replay.
    pub caller_us: Option<f64>,
    /// Of `caller_us`: from the replay before to the engine's return of that step.
    pub unwind_us: Option<f64>,
    /// Of `unwind_us`: until the replay before returned.
    pub tail_us: Option<f64>,
    /// Of `unwind_us`: from that replay's return to the model graph's (the drops between).
    pub return_us: Option<f64>,
    pub engine_us: Option<f64>,
    pub graph_fn_us: Option<f64>,
    /// Deriving the step's tables and writing the changed ones to the device.
    pub restage_us: f64,
    /// Of `restage_us`: the writes (`uploads` of the step's `tables` tables changed).
    pub upload_us: f64,
    pub uploads: usize,
    pub tables: usize,
    /// The host's graph launch call.
    pub launch_us: f64,
    /// From the launch's return until the logits are on the host (the host waits).
    pub wait_us: f64,
    /// Of `wait_us`: the next step's tables guessed and written while the graph runs
    /// (`prestage`).
    pub ahead_us: f64,
    /// Handing the logits over (out of the page-locked staging buffer) and the rest.
    pub finish_us: f64,
    /// Device: from the event before the graph to the one after it.
    pub graph_us: Option<f64>,
    /// Device: the logits' copy to the page-locked buffer.
    pub copy_us: Option<f64>,
}

/// Samples of every replay, the first `skip` left out of the means (warm-up).
#[derive(Debug, Default)]
pub struct ReplayClock {
    samples: Vec<ReplaySample>,
    /// The host thread's counters when the replay after the warm-up began, and how many
    /// replays had been pushed then (`mark_counters`).
    counters_from: Option<(usize, ThreadCounters)>,
}

/// What the kernel counts for a thread (Linux: /proc/thread-self): page faults (minor, major)
/// and context switches (voluntary, involuntary). A step of a few hundred us that loses
/// several us to something outside its code shows up here, or is ruled out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCounters {
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl ThreadCounters {
    /// The calling thread's counters (`None` where /proc/thread-self is not there).
    pub fn now() -> Option<ThreadCounters> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
        ThreadCounters::parse(&stat, &status)
    }

    /// From the texts of /proc/<pid>/task/<tid>/stat and .../status. The stat line's second
    /// field (the command, in parentheses) may hold spaces and parentheses: the fields are
    /// counted after its last ')'. minflt and majflt are fields 10 and 12 (proc(5)).
    pub fn parse(stat: &str, status: &str) -> Option<ThreadCounters> {
        let after = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = after.split_whitespace().collect();
        let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
        let status_value = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some(ThreadCounters {
            minor_faults: field(10)?,
            major_faults: field(12)?,
            voluntary_switches: status_value("voluntary_ctxt_switches:")?,
            involuntary_switches: status_value("nonvoluntary_ctxt_switches:")?,
        })
    }

    fn since(self, earlier: ThreadCounters) -> ThreadCounters {
        ThreadCounters {
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }
}

impl ReplayClock {
    pub fn push(&mut self, s: ReplaySample) {
        self.samples.push(s);
    }

    /// Takes the host thread's counters (`now`) as the start of the span `counters_line`
    /// reports, once, when `skip` replays have been pushed (the first after the warm-up).
    pub fn mark_counters(&mut self, skip: usize, now: impl FnOnce() -> Option<ThreadCounters>) {
        if self.counters_from.is_none() && self.samples.len() == skip {
            self.counters_from = now().map(|c| (skip, c));
        }
    }

    /// The counters' growth from `mark_counters` to `end` (taken after the last replay; the
    /// end of the run between them counts too), per replay in that span.
    pub fn counters_line(&self, end: Option<ThreadCounters>) -> Option<String> {
        let (at, from) = self.counters_from?;
        let n = self.samples.len().checked_sub(at).filter(|&n| n > 0)? as f64;
        let d = end?.since(from);
        Some(format!(
            "  host thread, a replay (the last {n}): {:.2} minor and {:.2} major page faults, {:.2} voluntary and {:.2} involuntary context switches\n",
            d.minor_faults as f64 / n,
            d.major_faults as f64 / n,
            d.voluntary_switches as f64 / n,
            d.involuntary_switches as f64 / n,
        ))
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The table of means over the samples after the first `skip` (a phase with no value in
    /// some samples is averaged over those that have one).
    pub fn summary(&self, skip: usize) -> String {
        let s: Vec<&ReplaySample> = self.samples.iter().skip(skip).collect();
        let mut o = String::new();
        if s.is_empty() {
            let _ = writeln!(o, "cuda replay clock: no replays after the first {skip}");
            return o;
        }
        let mean = |f: &dyn Fn(&ReplaySample) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = s.iter().filter_map(|x| f(x)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let between = mean(&|x| x.between_us);
        let restage = mean(&|x| Some(x.restage_us)).unwrap_or(0.0);
        let launch = mean(&|x| Some(x.launch_us)).unwrap_or(0.0);
        let wait = mean(&|x| Some(x.wait_us)).unwrap_or(0.0);
        let finish = mean(&|x| Some(x.finish_us)).unwrap_or(0.0);
        let step = between.unwrap_or(0.0) + restage + launch + wait + finish;
        let _ = writeln!(
            o,
            "cuda replay clock: {} replays (the first {skip} left out), means in us",
            s.len()
        );
        let uploads = mean(&|x| Some(x.uploads as f64)).unwrap_or(0.0);
        let tables = mean(&|x| Some(x.tables as f64)).unwrap_or(0.0);
        let upload_what =
            format!("of which writing the changed tables ({uploads:.1} of {tables:.1} a step)");
        // (name, mean, what it is); a name's indent says whose part it is.
        let rows: [(&str, Option<f64>, &str); 16] = [
            (
                "between",
                between,
                "host: the engine and its caller, between replays",
            ),
            (
                "  caller",
                mean(&|x| x.caller_us),
                "of which until the engine takes the step",
            ),
            (
                "   unwind",
                mean(&|x| x.unwind_us),
                "of which the replay before returning through the engine",
            ),
            (
                "    tail",
                mean(&|x| x.tail_us),
                "of which until that replay returned",
            ),
            (
                "    return",
                mean(&|x| x.return_us),
                "of which from its return to the model graph's",
            ),
            (
                "  engine",
                mean(&|x| x.engine_us),
                "of which the engine building the batch",
            ),
            (
                "  graph fn",
                mean(&|x| x.graph_fn_us),
                "of which the model graph until the replay",
            ),
            (
                "restage",
                Some(restage),
                "host: the step's tables derived and uploaded",
            ),
            ("  upload", mean(&|x| Some(x.upload_us)), &upload_what),
            ("launch", Some(launch), "host: the graph launch call"),
            (
                "wait",
                Some(wait),
                "host: waiting for the graph and the logits' copy",
            ),
            (
                "  ahead",
                mean(&|x| Some(x.ahead_us)),
                "of which staging the next step's tables, the graph running",
            ),
            ("finish", Some(finish), "host: the logits handed over"),
            (
                "step",
                Some(step),
                "all of the above: the wall time of a step",
            ),
            (
                "graph",
                mean(&|x| x.graph_us),
                "device: the graph, event to event",
            ),
            (
                "copy",
                mean(&|x| x.copy_us),
                "device: the logits' copy to the host",
            ),
        ];
        for (name, v, what) in rows {
            let _ = match v {
                Some(v) => writeln!(
                    o,
                    "  {name:<10} {v:>9.1} {:>5.1}%  {what}",
                    100.0 * v / step.max(1e-12)
                ),
                None => writeln!(o, "  {name:<10} {:>9}         {what}", "-"),
            };
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(between: Option<f64>, graph: Option<f64>) -> ReplaySample {
        ReplaySample {
            between_us: between,
            caller_us: between.map(|b| b / 2.0),
            unwind_us: None,
            tail_us: None,
            return_us: None,
            engine_us: None,
            graph_fn_us: None,
            restage_us: 10.0,
            upload_us: 6.0,
            uploads: 3,
            tables: 5,
            launch_us: 5.0,
            wait_us: 70.0,
            ahead_us: 7.0,
            finish_us: 15.0,
            graph_us: graph,
            copy_us: Some(4.0),
        }
    }

    #[test]
    fn the_means_leave_out_the_warm_up_and_missing_values() {
        let mut c = ReplayClock::default();
        c.push(ReplaySample {
            restage_us: 1000.0,
            ..sample(None, None)
        });
        c.push(sample(Some(20.0), Some(60.0)));
        c.push(sample(Some(40.0), None));
        let t = c.summary(1);
        assert!(t.contains("2 replays (the first 1 left out)"), "{t}");
        // between: (20 + 40) / 2; the step: 30 + 10 + 5 + 70 + 15 = 130.
        assert!(t.contains("between         30.0  23.1%"), "{t}");
        assert!(t.contains("  caller        15.0  11.5%"), "{t}");
        assert!(t.contains("  engine           -"), "{t}");
        assert!(t.contains("restage         10.0   7.7%"), "{t}");
        assert!(t.contains("  upload         6.0   4.6%  of which writing the changed tables (3.0 of 5.0 a step)"), "{t}");
        // ahead is part of wait, not added to the step
        assert!(
            t.contains("  ahead          7.0   5.4%  of which staging"),
            "{t}"
        );
        assert!(t.contains("step           130.0 100.0%"), "{t}");
        // graph only in one sample.
        assert!(t.contains("graph           60.0  46.2%"), "{t}");
        assert!(t.contains("copy             4.0   3.1%"), "{t}");
    }

    #[test]
    fn thread_counters_are_read_past_the_command_and_per_replay() {
        // A command with a space and a parenthesis; minflt 1234, majflt 5 (fields 10, 12).
        let stat = "4242 (lock (step) x) R 1 4242 4242 0 -1 4194304 1234 0 5 0 7 3 0 0 20 0 1 0";
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n";
        let c = ThreadCounters::parse(stat, status).unwrap();
        assert_eq!(
            c,
            ThreadCounters {
                minor_faults: 1234,
                major_faults: 5,
                voluntary_switches: 17,
                involuntary_switches: 3
            }
        );
        assert_eq!(ThreadCounters::parse("4242 (x) R 1", status), None);
        assert_eq!(ThreadCounters::parse(stat, "Name:\tx\n"), None);
        // Marked once, when the warm-up's replays are in; 4 replays later, 8 faults more.
        let mut clock = ReplayClock::default();
        clock.push(sample(None, None));
        clock.mark_counters(2, || panic!("not yet"));
        clock.push(sample(None, None));
        clock.mark_counters(2, || Some(c));
        clock.mark_counters(2, || panic!("once"));
        for _ in 0..4 {
            clock.push(sample(None, None));
        }
        let end = ThreadCounters {
            minor_faults: 1242,
            involuntary_switches: 7,
            ..c
        };
        let line = clock.counters_line(Some(end)).unwrap();
        assert!(line.contains("(the last 4): 2.00 minor and 0.00 major page faults, 0.00 voluntary and 1.00 involuntary"), "{line}");
        assert_eq!(ReplayClock::default().counters_line(Some(end)), None);
        // This thread's own, from the real files.
        #[cfg(target_os = "linux")]
        assert!(ThreadCounters::now().is_some());
    }

    #[test]
    fn no_samples_say_so() {
        let mut c = ReplayClock::default();
        assert!(c.summary(0).contains("no replays"));
        c.push(sample(None, None));
        assert!(c.summary(1).contains("no replays after the first 1"));
        let t = c.summary(0);
        assert!(t.contains("between            -"), "{t}");
    }
}
