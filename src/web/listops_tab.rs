//! The ListOps tab: type (or draw) a nested expression, and watch a small
//! NRGPT trained on the task work it out, one character at a time, and its
//! answer digit settle (energy per step and the leading candidates). It runs
//! its own worker and model, so the text tab's state is untouched.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use nrgpt_core::listops::{answer_of, parse, Expr, Op, TreeSpec, END};
use nrgpt_core::rng::Rng64;

use super::chart::{CandidateTable, EnergyChart};
use super::client::Client;
use super::manifest::{model_url, ModelEntry};
use super::protocol::{EngineChoice, FromWorker, GenerateRequest, ModelInfo, Token, ToWorker};

/// The shipped ListOps checkpoint, relative to the manifest's folder.
const MODEL_FILE: &str = "listops.safetensors";
/// How long each descent step stays on screen when an answer is replayed.
const STEP_MS: u64 = 450;

thread_local! {
    static CLIENT: RefCell<Option<Client>> = const { RefCell::new(None) };
    static REPLAY: RefCell<Option<IntervalHandle>> = const { RefCell::new(None) };
}

fn send(msg: ToWorker) {
    CLIENT.with(|c| {
        if let Some(c) = c.borrow().as_ref() {
            c.send(msg)
        }
    });
}

/// The two tabs; `open` is true on the ListOps one.
pub fn tabs(open: RwSignal<bool>) -> impl IntoView {
    view! {
        <nav class="tabs" role="tablist">
            <button id="tab-text" role="tab" aria-selected=move || (!open.get()).to_string() on:click=move |_| open.set(false)>"Text"</button>
            <button id="tab-listops" role="tab" aria-selected=move || open.get().to_string() on:click=move |_| open.set(true)>"ListOps"</button>
        </nav>
    }
}

#[derive(Clone, Copy)]
struct Tab {
    info: RwSignal<Option<ModelInfo>>,
    status: RwSignal<String>,
    error: RwSignal<Option<String>>,
    input: RwSignal<String>,
    /// The expression being answered.
    asked: RwSignal<Option<Expr>>,
    run: RwSignal<u32>,
    running: RwSignal<bool>,
    /// The characters written for the current expression, up to the end of its answer.
    tokens: RwSignal<Vec<Arc<Token>>>,
    finished: RwSignal<bool>,
    selected: RwSignal<Option<usize>>,
    step: RwSignal<usize>,
    draws: RwSignal<u64>,
}

impl Tab {
    fn new() -> Self {
        Self {
            info: RwSignal::new(None),
            status: RwSignal::new("Starting the worker…".into()),
            error: RwSignal::new(None),
            input: RwSignal::new("X(M(0 3 1) 8 6)".into()),
            asked: RwSignal::new(None),
            run: RwSignal::new(0),
            running: RwSignal::new(false),
            tokens: RwSignal::new(Vec::new()),
            finished: RwSignal::new(false),
            selected: RwSignal::new(None),
            step: RwSignal::new(0),
            draws: RwSignal::new(0),
        }
    }

    fn on_reply(self, msg: FromWorker) {
        match msg {
            FromWorker::Ready | FromWorker::Reading { .. } | FromWorker::Backend { .. } => {}
            FromWorker::Progress { loaded, total } => {
                let pct = if total > 0.0 { format!(" {:.0}%", 100.0 * loaded / total) } else { String::new() };
                self.status.set(format!("Downloading the ListOps model…{pct}"));
            }
            FromWorker::Loading { phase } => self.status.set(phase),
            FromWorker::Loaded(info) => {
                let note = info.integrity_note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
                self.status.set(format!("{} with {} parameters, T = {} steps{note}: ready", info.arch, info.params, info.steps));
                self.info.set(Some(info));
            }
            FromWorker::Token(t) if t.run == self.run.get_untracked() && !self.finished.get_untracked() => {
                let end = t.ch == END;
                self.tokens.update(|v| v.push(Arc::new(t)));
                if end {
                    self.finished.set(true);
                    send(ToWorker::Stop);
                    self.inspect(self.tokens.with_untracked(|v| v.len().saturating_sub(2)));
                }
            }
            FromWorker::Token(_) => {}
            FromWorker::Done { run, .. } if run == self.run.get_untracked() => {
                self.running.set(false);
                if !self.finished.get_untracked() {
                    self.error.set(Some("The model filled its window without finishing an answer.".into()));
                }
            }
            FromWorker::Done { .. } => {}
            FromWorker::Error { run, message } => {
                if run == 0 || run == self.run.get_untracked() {
                    self.running.set(false);
                    self.error.set(Some(message));
                }
            }
        }
    }

    /// Shows character `i`'s descent, replaying its steps from the first.
    fn inspect(self, i: usize) {
        self.selected.set(Some(i));
        self.step.set(0);
        let last = self.tokens.with_untracked(|v| v.get(i).map(|t| t.energies.len().max(t.step_logits.len()).saturating_sub(1)).unwrap_or(0));
        REPLAY.with(|r| {
            if let Some(h) = r.borrow_mut().take() {
                h.clear();
            }
            let step = self.step;
            let h = set_interval_with_handle(
                move || {
                    if step.get_untracked() < last {
                        step.update(|s| *s += 1);
                    } else if let Some(h) = REPLAY.with(|r| r.borrow_mut().take()) {
                        h.clear();
                    }
                },
                Duration::from_millis(STEP_MS),
            );
            *r.borrow_mut() = h.ok();
        });
    }

    /// The typed expression, or what is wrong with it for this model.
    fn checked(self) -> Result<Expr, String> {
        let e = parse(&self.input.get()).map_err(|e| e.to_string())?;
        if let Some(block) = self.info.with(|i| i.as_ref().map(|i| i.block_size)) {
            let need = e.example().chars().count();
            if need > block {
                return Err(format!("Worked out, this expression takes {need} characters; the model reads at most {block}. Try a shorter one."));
            }
        }
        Ok(e)
    }

    fn answer(self) {
        let expr = match self.checked() {
            Ok(e) => e,
            Err(m) => return self.error.set(Some(m)),
        };
        let Some(block) = self.info.with_untracked(|i| i.as_ref().map(|i| i.block_size)) else { return };
        let prompt = expr.prompt();
        self.run.update(|r| *r += 1);
        self.tokens.set(Vec::new());
        self.finished.set(false);
        self.selected.set(None);
        self.error.set(None);
        self.running.set(true);
        self.asked.set(Some(expr));
        send(ToWorker::Generate(GenerateRequest {
            run: self.run.get_untracked(),
            len: block - prompt.chars().count(),
            prompt,
            // greedy, as `trainer listops-answer`
            temperature: 0.0,
            top_k: 0,
            seed: 1,
            steps: None,
            early_exit: None,
            candidates: 1,
            langevin: 0.0,
        }));
    }

    fn draw_one(self) {
        self.draws.update(|d| *d += 1);
        let seed = (js_sys::Math::random() * 9.0e15) as u64 ^ self.draws.get_untracked();
        let e = TreeSpec::default().sample(&mut Rng64::new(seed));
        self.input.set(e.text());
        self.error.set(None);
    }

    /// Once the example ended: its answer digit (the digit before the end,
    /// as `trainer listops-answer` scores it), None if the model wrote none.
    fn answer_digit(self) -> Option<Option<u8>> {
        self.finished.get().then(|| answer_of(&self.tokens.with(|v| v.iter().map(|t| t.ch).collect::<String>())))
    }
}

/// A note when `e` lies outside what the shipped model was trained on.
fn outside_training(e: &Expr) -> Option<String> {
    let spec = TreeSpec::default();
    let mut ops = Vec::new();
    let mut args_ok = true;
    fn walk(e: &Expr, spec: &TreeSpec, ops: &mut Vec<Op>, args_ok: &mut bool) {
        if let Expr::Apply(op, args) = e {
            ops.push(*op);
            *args_ok &= (spec.min_args..=spec.max_args).contains(&args.len());
            args.iter().for_each(|a| walk(a, spec, ops, args_ok));
        }
    }
    walk(e, &spec, &mut ops, &mut args_ok);
    let unseen: Vec<&str> = ops.iter().filter(|o| !spec.ops.contains(o)).map(|o| o.name()).collect();
    let trained = spec.ops.iter().map(|o| format!("{} = {}", o.symbol(), o.name())).collect::<Vec<_>>().join(", ");
    (e.depth() > spec.max_depth || !args_ok || !unseen.is_empty()).then(|| {
        format!(
            "Outside what the model learned ({trained}; nesting depth at most {}; {} or {} arguments), so its answer is a guess.",
            spec.max_depth, spec.min_args, spec.max_args
        )
    })
}

/// The ListOps tab's content; its worker and model start the first time it opens.
#[component]
pub fn ListOpsPanel(open: RwSignal<bool>) -> impl IntoView {
    let started = RwSignal::new(false);
    let tab = Tab::new();
    Effect::new(move |_| {
        if open.get() && !started.get_untracked() {
            started.set(true);
            match Client::start(move |m| tab.on_reply(m)) {
                Ok(c) => {
                    CLIENT.with(|cl| *cl.borrow_mut() = Some(c));
                    let entry = ModelEntry {
                        name: "listops".into(),
                        file: MODEL_FILE.into(),
                        summary: String::new(),
                        description: String::new(),
                        arch: String::new(),
                        params: 0,
                        size: 0,
                        energy_loss_r: None,
                    };
                    // tiny: the CPU engine answers at once, and exactly as `trainer listops-answer`
                    let engine = EngineChoice { cpu_because: Some("a ListOps model is tiny".into()), gpu_trusted: false };
                    send(ToWorker::Load { url: model_url(&entry), engine });
                }
                Err(e) => tab.error.set(Some(e)),
            }
        }
    });
    let current = Signal::derive(move || tab.selected.get().and_then(|i| tab.tokens.with(|v| v.get(i).cloned())));
    let step = Signal::derive(move || tab.step.get());
    let vocab = Signal::derive(move || tab.info.with(|i| i.as_ref().map(|i| i.vocab.chars().collect()).unwrap_or_default()));
    let caption = Signal::derive(|| "Top-5 candidates per descent step (softmax of the readout of x(t))");
    let problem = Memo::new(move |_| tab.checked().err());
    let note = Memo::new(move |_| tab.checked().ok().and_then(|e| outside_training(&e)));
    let can_answer = move || tab.info.with(|i| i.is_some()) && !tab.running.get() && problem.with(|p| p.is_none());
    let chain = move || {
        let prompt = tab.asked.with(|a| a.as_ref().map(Expr::prompt)).unwrap_or_default();
        let chars = tab
            .tokens
            .get()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.ch != END)
            .map(|(i, t)| {
                view! {
                    <span class="lch" role="button" tabindex="0" data-i=i class:sel=move || tab.selected.get() == Some(i)
                        title=format!("p = {:.2} · click to replay its descent", t.prob) on:click=move |_| tab.inspect(i)>{t.ch.to_string()}</span>
                }
            })
            .collect_view();
        view! { <span class="lprompt">{prompt}</span>{chars} }
    };
    let verdict = move || {
        let digit = tab.answer_digit()?;
        let truth = tab.asked.with(|a| a.as_ref().map(Expr::value))?;
        let right = digit == Some(truth);
        let shown = digit.map(|d| d.to_string()).unwrap_or_else(|| "none (no digit before the end)".into());
        Some(view! {
            <p class="verdict" class:right=right>
                "Answer: " <strong id="listops-answer">{shown}</strong>
                <span id="listops-truth">{format!(" · true value {truth} ")}{if right { "✓" } else { "✗" }}</span>
            </p>
        })
    };
    view! {
        <section id="listops" class="listops" class:hidden=move || !open.get() role="tabpanel" aria-labelledby="tab-listops">
            <p class="tagline">
                "ListOps: nested operations over digits. S = sum mod 10, X = max, M = median, N = min (the model learned S, X and M). "
                "A small NRGPT reads the expression, then writes out its work, the innermost operation first, and ends with the answer; "
                "each character is the state that settled after T descent steps. "
                "It is small (28k parameters, 10 minutes of training) and gets about half of unseen expressions right."
            </p>
            <p class="status" id="listops-status">{move || tab.status.get()}</p>
            <form class="lform" on:submit=move |ev: leptos::ev::SubmitEvent| { ev.prevent_default(); tab.answer(); }>
                <label class="field" for="listops-expr"><span>"Expression"</span>
                    <input id="listops-expr" name="listops-expr" type="text" spellcheck="false" autocomplete="off"
                        prop:value=move || tab.input.get() on:input=move |ev| { tab.input.set(event_target_value(&ev)); tab.error.set(None); } />
                </label>
                <button type="button" id="listops-draw" on:click=move |_| tab.draw_one()>"Generate one"</button>
                <button type="submit" id="listops-go" disabled=move || !can_answer()>"Answer"</button>
            </form>
            {move || problem.get().map(|p| view! { <p class="error" id="listops-problem">{p}</p> })}
            {move || note.get().map(|n| view! { <p class="note" id="listops-note">{n}</p> })}
            {move || tab.error.get().map(|e| view! { <p class="error" id="listops-error">{e}</p> })}
            <p class="lchain" id="listops-chain">{chain}</p>
            {verdict}
            <div class="figs">
                <figure>
                    <EnergyChart token=current step=step />
                    <figcaption>"The energy of the state that chose the selected character (the answer, unless you click another), per descent step."</figcaption>
                </figure>
            </div>
            <CandidateTable token=current step=step vocab=vocab caption=caption />
        </section>
    }
}
