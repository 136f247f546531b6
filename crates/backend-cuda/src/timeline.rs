//! The step timeline (`LOCKSTEP_CUDA_TIMELINE=FILE`): where a replayed step's time goes, kernel
//! by kernel, measured inside the real step graph.
//!
//! Nsight Compute times each kernel alone, serialized, so it cannot say what a kernel costs in a
//! replayed graph whose launches overlap (programmatic edges). The timeline can: the kernels are
//! compiled with `LOCKSTEP_TIMELINE` (kernels.cu), and the first thread of every grid's first
//! block stamps the GPU's global timer just before and just after its `griddepcontrol.wait`.
//! The wait returns once the kernel before has finished and its writes are visible, so the
//! second stamp is the moment this kernel is *released*, and the stamps come in launch order.
//! A kernel's share of the step is the time from its release to the next kernel's release: its
//! own critical path, plus the hand-over to the next. The first stamp says how early the block
//! was resident (its *lead* over the release of the kernel before).
//!
//! The host synchronizes around each replay to know which records it wrote (the step itself
//! runs untouched on the device; only the time between steps grows), and matches them with the
//! graph's kernels in chain order. This module's arithmetic is plain host code, tested in CI.

use std::collections::HashMap;
use std::fmt::Write as _;

/// One kernel node of a step graph.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelNode {
    pub name: String,
    pub blocks: u64,
}

/// The records one replay of graph `graph` wrote: `first..end` of the device's record list.
#[derive(Clone, Copy, Debug)]
pub struct Replay {
    pub graph: usize,
    pub first: u32,
    pub end: u32,
}

/// One kernel's means over the replays that matched their graph, in microseconds.
#[derive(Clone, Debug)]
pub struct NodeStat {
    pub name: String,
    pub blocks: u64,
    /// From this kernel's release to the next kernel's (`None` for the last).
    pub release_us: Option<f64>,
    /// From the stamp before the wait to the release.
    pub wait_us: f64,
    /// The release of the kernel before minus this block's arrival at its wait (positive: the
    /// block was waiting before the kernel before had finished).
    pub lead_us: Option<f64>,
    /// The kernel's marks (`TL_MARK(tag)` in kernels.cu): per tag, the mean time from the
    /// release to the mark (a tag met several times in one run counts each time).
    pub marks: Vec<(u32, f64)>,
}

/// A graph's timeline.
#[derive(Clone, Debug)]
pub struct GraphTimeline {
    pub graph: usize,
    pub replays: usize,
    /// Replays whose record count was not the graph's kernel count (not used).
    pub mismatched: usize,
    /// From the first kernel's release to the last one's, mean.
    pub span_us: f64,
    pub nodes: Vec<NodeStat>,
}

/// The nodes `0..n` in an order that respects every edge (`preds(i)`: the nodes before `i`),
/// ties broken by index; nodes on a cycle (none in a captured graph) come last, by index.
pub fn chain_order(n: usize, preds: impl Fn(usize) -> Vec<usize>) -> Vec<usize> {
    let before: Vec<Vec<usize>> = (0..n).map(&preds).collect();
    let mut indegree: Vec<usize> = before.iter().map(|p| p.len()).collect();
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, p) in before.iter().enumerate() {
        for &j in p {
            after[j].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        out.push(i);
        for &k in &after[i] {
            indegree[k] -= 1;
            if indegree[k] == 0 {
                ready.insert(k);
            }
        }
    }
    if out.len() < n {
        let placed: std::collections::HashSet<usize> = out.iter().copied().collect();
        out.extend((0..n).filter(|i| !placed.contains(i)));
    }
    out
}

/// Marks a kernel may make (kernels.cu `TL_TAGS`): the device keeps, per record, one slot a
/// tag holding the time from the kernel's release to the mark in ns, 0 where none was made.
pub const MARK_TAGS: usize = 16;

/// Each graph's timeline from the device's records (`(before wait, after wait)` in
/// nanoseconds), the kernels' marks (`MARK_TAGS` slots a record) and the replays that wrote
/// them. A replay's records are taken in release order (their indices are drawn before the
/// waits, so two kernels may draw theirs out of order). Graphs with no matching replay are
/// left out.
pub fn summarize(
    chains: &[Vec<KernelNode>],
    replays: &[Replay],
    records: &[(u64, u64)],
    marks: &[u32],
) -> Vec<GraphTimeline> {
    let mut out = Vec::new();
    for (g, chain) in chains.iter().enumerate() {
        let n = chain.len();
        let mut release = vec![0.0f64; n];
        let mut wait = vec![0.0f64; n];
        let mut lead = vec![0.0f64; n];
        // Per node, per tag: (sum of ns, count).
        let mut tags = vec![[(0.0f64, 0usize); MARK_TAGS]; n];
        let (mut used, mut mismatched) = (0usize, 0usize);
        let mut span = 0.0f64;
        for r in replays.iter().filter(|r| r.graph == g) {
            let (a, b) = (r.first as usize, r.end as usize);
            if b < a || b - a != n || b > records.len() || n == 0 {
                mismatched += 1;
                continue;
            }
            let mut idx: Vec<usize> = (a..b).collect();
            idx.sort_by_key(|&k| (records[k].1, k));
            let rec: Vec<(u64, u64)> = idx.iter().map(|&k| records[k]).collect();
            used += 1;
            for i in 0..n {
                let (t0, t1) = rec[i];
                wait[i] += t1.saturating_sub(t0) as f64;
                if i + 1 < n {
                    release[i] += rec[i + 1].1 as f64 - t1 as f64;
                }
                if i > 0 {
                    lead[i] += rec[i - 1].1 as f64 - t0 as f64;
                }
                let slots = marks.get(idx[i] * MARK_TAGS..(idx[i] + 1) * MARK_TAGS);
                for (tag, &m) in slots.into_iter().flatten().enumerate() {
                    if m != 0 {
                        tags[i][tag].0 += m as f64;
                        tags[i][tag].1 += 1;
                    }
                }
            }
            span += rec[n - 1].1 as f64 - rec[0].1 as f64;
        }
        if used == 0 {
            if mismatched > 0 {
                out.push(GraphTimeline {
                    graph: g,
                    replays: 0,
                    mismatched,
                    span_us: 0.0,
                    nodes: Vec::new(),
                });
            }
            continue;
        }
        let us = |ns: f64| ns / used as f64 / 1000.0;
        let nodes = chain
            .iter()
            .enumerate()
            .map(|(i, k)| NodeStat {
                name: k.name.clone(),
                blocks: k.blocks,
                release_us: (i + 1 < n).then(|| us(release[i])),
                wait_us: us(wait[i]),
                lead_us: (i > 0).then(|| us(lead[i])),
                marks: tags[i]
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.1 > 0)
                    .map(|(tag, &(sum, c))| (tag as u32, sum / c as f64 / 1000.0))
                    .collect(),
            })
            .collect();
        out.push(GraphTimeline {
            graph: g,
            replays: used,
            mismatched,
            span_us: us(span),
            nodes,
        });
    }
    out
}

/// A kernel name's calls, total release-to-release time per step and mean per call, largest
/// total first (the last kernel of the step, which has no successor, is left out).
pub fn by_name(t: &GraphTimeline) -> Vec<(String, usize, f64, f64)> {
    let mut m: HashMap<&str, (usize, f64)> = HashMap::new();
    for n in &t.nodes {
        if let Some(r) = n.release_us {
            let e = m.entry(n.name.as_str()).or_default();
            e.0 += 1;
            e.1 += r;
        }
    }
    let mut v: Vec<(String, usize, f64, f64)> = m
        .into_iter()
        .map(|(k, (c, t))| (k.to_string(), c, t, t / c as f64))
        .collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    v
}

/// The summary printed at exit: per graph, its span and the kernels by name.
pub fn render(timelines: &[GraphTimeline]) -> String {
    let mut s = String::new();
    for t in timelines {
        let _ = writeln!(
            s,
            "cuda timeline, graph {}: {} kernels, {} replays ({} mismatched), span {:.1} us (first release to last)",
            t.graph,
            t.nodes.len(),
            t.replays,
            t.mismatched,
            t.span_us
        );
        for (name, calls, total, per) in by_name(t) {
            let share = if t.span_us > 0.0 {
                100.0 * total / t.span_us
            } else {
                0.0
            };
            let _ = write!(
                s,
                "  {name:<40} {calls:>4} calls {total:>9.1} us {share:>5.1}%  {per:>7.2} us a call"
            );
            // Marks: per tag, the mean over this name's kernels of the time from release.
            let mut m: std::collections::BTreeMap<u32, (f64, usize)> = Default::default();
            for n in t.nodes.iter().filter(|n| n.name == name) {
                for &(tag, us) in &n.marks {
                    let e = m.entry(tag).or_default();
                    e.0 += us;
                    e.1 += 1;
                }
            }
            if !m.is_empty() {
                let _ = write!(s, "  marks:");
                for (tag, (sum, c)) in m {
                    let _ = write!(s, " {tag}@{:.2}", sum / c as f64);
                }
            }
            let _ = writeln!(s);
        }
    }
    s
}

/// Every kernel of every graph, one line each (tab-separated, for the file).
pub fn render_tsv(timelines: &[GraphTimeline]) -> String {
    let mut s = String::from(
        "graph\treplays\tindex\tkernel\tblocks\trelease_us\twait_us\tlead_us\tmarks\n",
    );
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
    for t in timelines {
        for (i, n) in t.nodes.iter().enumerate() {
            let marks: Vec<String> = n
                .marks
                .iter()
                .map(|(tag, us)| format!("{tag}@{us:.3}"))
                .collect();
            let _ = writeln!(
                s,
                "{}\t{}\t{}\t{}\t{}\t{}\t{:.3}\t{}\t{}",
                t.graph,
                t.replays,
                i,
                n.name,
                n.blocks,
                f(n.release_us),
                n.wait_us,
                f(n.lead_us),
                marks.join(" ")
            );
        }
    }
    s
}

/// The records' capacity in kernels.cu (`TL_CAP`).
const RECORD_CAP: usize = 1 << 19;

/// The host's side of the timeline: the graphs' kernel chains and which records each replay
/// wrote. Only built with `LOCKSTEP_CUDA_TIMELINE` set (the kernels then carry the stamps).
pub(crate) struct Recorder {
    module: std::sync::Arc<cudarc::driver::CudaModule>,
    chains: Vec<Vec<KernelNode>>,
    replays: Vec<Replay>,
    path: std::path::PathBuf,
}

impl Recorder {
    pub(crate) fn new(
        module: std::sync::Arc<cudarc::driver::CudaModule>,
        path: std::path::PathBuf,
    ) -> Recorder {
        Recorder {
            module,
            chains: Vec::new(),
            replays: Vec::new(),
            path,
        }
    }

    /// The records written so far (waits for the stream).
    fn count(
        &self,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    ) -> Result<u32, cudarc::driver::DriverError> {
        stream.synchronize()?;
        let g = self.module.get_global("lockstep_timeline_n", stream)?;
        let mut b = [0u8; 4];
        stream.memcpy_dtoh(&g, &mut b[..])?;
        stream.synchronize()?;
        // kernels.cu keeps the count as a float (tl_arrive): exact below 2^24.
        Ok(f32::from_le_bytes(b) as u32)
    }

    /// Registers a captured graph's kernel chain; its id.
    pub(crate) fn add_graph(&mut self, chain: Vec<KernelNode>) -> usize {
        self.chains.push(chain);
        self.chains.len() - 1
    }

    /// Runs `launch` (one replay of graph `graph`) between two reads of the record count.
    pub(crate) fn around<E>(
        &mut self,
        graph: usize,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        launch: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let first = self.count(stream).ok();
        launch()?;
        if let (Some(first), Ok(end)) = (first, self.count(stream)) {
            self.replays.push(Replay { graph, first, end });
        }
        Ok(())
    }

    /// Reads the records, writes every kernel's line to the file and returns the summary.
    pub(crate) fn finish(
        &self,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    ) -> Result<String, String> {
        let n = (self.count(stream).map_err(|e| e.to_string())? as usize).min(RECORD_CAP);
        let g = self
            .module
            .get_global("lockstep_timeline", stream)
            .map_err(|e| e.to_string())?;
        let mut bytes = vec![0u8; n * 16];
        if n > 0 {
            stream
                .memcpy_dtoh(&g.as_view().slice(0..n * 16), &mut bytes[..])
                .map_err(|e| e.to_string())?;
            stream.synchronize().map_err(|e| e.to_string())?;
        }
        let word = |c: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        };
        let records: Vec<(u64, u64)> = bytes
            .chunks_exact(16)
            .map(|c| (word(&c[..8]), word(&c[8..])))
            .collect();
        let mut mbytes = vec![0u8; n * MARK_TAGS * 4];
        if n > 0 {
            let g = self
                .module
                .get_global("lockstep_marks", stream)
                .map_err(|e| e.to_string())?;
            stream
                .memcpy_dtoh(&g.as_view().slice(0..mbytes.len()), &mut mbytes[..])
                .map_err(|e| e.to_string())?;
            stream.synchronize().map_err(|e| e.to_string())?;
        }
        let marks: Vec<u32> = mbytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let t = summarize(&self.chains, &self.replays, &records, &marks);
        std::fs::write(&self.path, render_tsv(&t))
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok(render(&t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> KernelNode {
        KernelNode {
            name: name.into(),
            blocks: 4,
        }
    }

    #[test]
    fn chain_order_follows_edges_not_listing() {
        // Listed 0..4, the chain runs 2 -> 0 -> 3 -> 1.
        let preds = |i: usize| match i {
            0 => vec![2],
            3 => vec![0],
            1 => vec![3],
            _ => vec![],
        };
        assert_eq!(chain_order(4, preds), vec![2, 0, 3, 1]);
        // A cycle cannot be ordered: its nodes come last, by index.
        let cyc = |i: usize| match i {
            1 => vec![2],
            2 => vec![1],
            _ => vec![],
        };
        assert_eq!(chain_order(3, cyc), vec![0, 1, 2]);
    }

    #[test]
    fn release_wait_and_lead_are_means_over_matching_replays() {
        let chains = vec![vec![node("a"), node("b"), node("a")], vec![node("x")]];
        // Replay 1: releases at 1000, 4000, 6000 ns; replay 2: 10000, 12000, 16000.
        let records = vec![
            (500, 1000),
            (2000, 4000),
            (5000, 6000),
            (9000, 10000),
            (9500, 12000),
            (13000, 16000),
            // A replay of graph 0 that wrote two records (mismatched, ignored).
            (0, 1),
            (1, 2),
        ];
        let replays = [
            Replay {
                graph: 0,
                first: 0,
                end: 3,
            },
            Replay {
                graph: 0,
                first: 3,
                end: 6,
            },
            Replay {
                graph: 0,
                first: 6,
                end: 8,
            },
        ];
        // b's tag 9 at 2000 ns after its release, on average; tag 1 of the first a once; a
        // mark of the mismatched replay, ignored.
        let mut marks = vec![0u32; 8 * MARK_TAGS];
        marks[MARK_TAGS + 9] = 1000;
        marks[4 * MARK_TAGS + 9] = 3000;
        marks[1] = 500;
        marks[7 * MARK_TAGS + 9] = 3;
        let t = summarize(&chains, &replays, &records, &marks);
        assert_eq!(t.len(), 1, "graph 1 never replayed");
        let t = &t[0];
        assert_eq!((t.replays, t.mismatched), (2, 1));
        // Spans 5000 and 6000 ns.
        assert!((t.span_us - 5.5).abs() < 1e-9);
        // a: (3000 + 2000) / 2, b: (2000 + 4000) / 2, the last none.
        assert_eq!(t.nodes[0].release_us, Some(2.5));
        assert_eq!(t.nodes[1].release_us, Some(3.0));
        assert_eq!(t.nodes[2].release_us, None);
        // Waits: a (500 + 1000) / 2; b (2000 + 2500) / 2.
        assert!((t.nodes[0].wait_us - 0.75).abs() < 1e-9);
        assert!((t.nodes[1].wait_us - 2.25).abs() < 1e-9);
        // Leads: b arrived 1000 ns after a's release, then 500 ns before it; the second a
        // 1000 ns after b's release both times.
        assert_eq!(t.nodes[0].lead_us, None);
        assert!((t.nodes[1].lead_us.unwrap() - (-0.25)).abs() < 1e-9);
        assert!((t.nodes[2].lead_us.unwrap() - (-1.0)).abs() < 1e-9);
        assert_eq!(t.nodes[1].marks, vec![(9, 2.0)]);
        assert_eq!(t.nodes[0].marks, vec![(1, 0.5)]);
        assert!(t.nodes[2].marks.is_empty());
        // By name: a's one call with a successor (2.5 us), b's 3.0: b first.
        let names = by_name(t);
        assert_eq!(names[0].0, "b");
        assert_eq!((names[1].0.as_str(), names[1].1), ("a", 1));
        assert!(render(std::slice::from_ref(t)).contains("2 replays (1 mismatched)"));
        assert!(render(std::slice::from_ref(t)).contains("marks: 9@2.00"));
        assert_eq!(render_tsv(std::slice::from_ref(t)).lines().count(), 4);
    }

    #[test]
    fn records_drawn_out_of_order_are_placed_by_release() {
        let chains = vec![vec![node("a"), node("b")]];
        // The second kernel drew index 0: its release (3000) is the later one.
        let records = [(2500, 3000), (0, 1000)];
        let mut marks = vec![0u32; 2 * MARK_TAGS];
        marks[MARK_TAGS + 2] = 700; // a's mark, at record 1
        let replays = [Replay {
            graph: 0,
            first: 0,
            end: 2,
        }];
        let t = summarize(&chains, &replays, &records, &marks);
        assert_eq!(t[0].nodes[0].release_us, Some(2.0));
        assert_eq!(t[0].nodes[0].marks, vec![(2, 0.7)]);
        assert!(t[0].nodes[1].marks.is_empty());
        assert!((t[0].nodes[1].lead_us.unwrap() - (-1.5)).abs() < 1e-9);
    }

    #[test]
    fn a_graph_whose_replays_never_match_is_reported_not_averaged() {
        let chains = vec![vec![node("a"), node("b")]];
        let replays = [Replay {
            graph: 0,
            first: 0,
            end: 1,
        }];
        let t = summarize(&chains, &replays, &[(0, 5)], &[]);
        assert_eq!((t[0].replays, t[0].mismatched), (0, 1));
        assert!(t[0].nodes.is_empty());
        // Records past the end of what was read are a mismatch, not a panic.
        let replays = [Replay {
            graph: 0,
            first: 0,
            end: 2,
        }];
        let t = summarize(&chains, &replays, &[(0, 5)], &[]);
        assert_eq!((t[0].replays, t[0].mismatched), (0, 1));
    }
}
