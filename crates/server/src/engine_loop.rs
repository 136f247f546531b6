//! The engine thread: owns the [`Scheduler`] (and so the backend and its KV cache), takes
//! submissions and cancellations from the HTTP handlers, steps while there is work, and routes
//! each event to its request's channel. A request whose channel is closed (its client went
//! away) is cancelled, so its blocks are freed at the next step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;

use lockstep_engine::scheduler::{Event, Request, RequestId, Scheduler, SubmitError};
use lockstep_graph::Backend;
use tokio::sync::{mpsc, oneshot};

use crate::audit::AuditJob;
use crate::metrics::Metrics;

/// Events of one HTTP request: `(choice index, event)`.
pub type EventSender = mpsc::UnboundedSender<(usize, Event)>;

pub enum Command {
    Submit {
        req: Box<Request>,
        choice: usize,
        events: EventSender,
        reply: oneshot::Sender<Result<RequestId, SubmitError>>,
    },
    Cancel(RequestId),
}

struct Route {
    choice: usize,
    events: EventSender,
    /// Audited requests: the prompt, generated tokens and the logits they were drawn from.
    audit: Option<AuditJob>,
}

/// Marks the engine dead when the loop ends, by return or by a panic unwinding through it, so
/// `/health` reports it and handlers answer 503.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Runs until every command sender is dropped and no work is left.
pub fn run<B: Backend>(
    mut sched: Scheduler<B>,
    commands: Receiver<Command>,
    metrics: Arc<Metrics>,
    audit: Option<SyncSender<AuditJob>>,
    alive: Arc<AtomicBool>,
) {
    let _alive = AliveGuard(alive);
    let mut routes: HashMap<RequestId, Route> = HashMap::new();
    let mut open = true;
    loop {
        if !sched.has_work() {
            if !open {
                break;
            }
            // Idle: sleep until a command arrives.
            match commands.recv() {
                Ok(c) => handle(&mut sched, &mut routes, c),
                Err(_) => break,
            }
        }
        loop {
            match commands.try_recv() {
                Ok(c) => handle(&mut sched, &mut routes, c),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        for (id, ev) in sched.step() {
            let Some(route) = routes.get_mut(&id) else {
                continue;
            };
            let last = matches!(ev, Event::Finished(_) | Event::Failed(_));
            let ev = match ev {
                Event::Token {
                    token,
                    text,
                    logprob,
                    logits,
                } => {
                    if let (Some(job), Some(l)) = (route.audit.as_mut(), logits) {
                        job.generated.push(token);
                        job.served_logits.push(l);
                    }
                    Event::Token {
                        token,
                        text,
                        logprob,
                        logits: None,
                    }
                }
                Event::Alarm(w) => {
                    eprintln!("monitor alarm: request {id}: {w}");
                    metrics.alarm(w.kind.name());
                    Event::Alarm(w)
                }
                other => other,
            };
            let delivered = route.events.send((route.choice, ev)).is_ok();
            if last {
                if let Some(route) = routes.remove(&id) {
                    if let (Some(job), Some(tx)) = (route.audit, audit.as_ref()) {
                        // A full audit queue drops the job: auditing must never slow serving.
                        if tx.try_send(job).is_err() {
                            metrics.audit_error();
                        }
                    }
                }
            } else if !delivered {
                sched.cancel(id);
                routes.remove(&id);
            }
        }
        metrics.scheduler(sched.stats());
    }
}

fn handle<B: Backend>(
    sched: &mut Scheduler<B>,
    routes: &mut HashMap<RequestId, Route>,
    c: Command,
) {
    match c {
        Command::Submit {
            req,
            choice,
            events,
            reply,
        } => {
            let audit = req.capture_logits.then(|| AuditJob {
                prompt: req.prompt.clone(),
                generated: Vec::new(),
                served_logits: Vec::new(),
            });
            let r = sched.submit(*req);
            if let Ok(id) = r {
                routes.insert(
                    id,
                    Route {
                        choice,
                        events,
                        audit,
                    },
                );
            }
            let _ = reply.send(r);
        }
        Command::Cancel(id) => {
            sched.cancel(id);
            routes.remove(&id);
        }
    }
}
