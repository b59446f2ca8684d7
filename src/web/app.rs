//! The page: controls, the streamed text and the inspector of one
//! character's descent. All inference happens in the worker (client.rs);
//! this thread only renders, so typing and scrolling stay smooth.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use leptos::ev::{KeyboardEvent, SubmitEvent};
use leptos::prelude::*;

use super::chart::{show_char, CandidateTable, EnergyChart, TrajectoryChart};
use super::client::Client;
use super::explain::how_it_works;
use super::ebt_chart::CandidateCurves;
use super::gpu_probe::{probe, GpuProbe};
use super::listops_tab::{tabs, ListOpsPanel};
use super::manifest::{self, ModelEntry};
use super::protocol::{EngineChoice, FromWorker, GenerateRequest, ModelInfo, Token, ToWorker};
use super::watch::{settling_char, Pace, Watch};

thread_local! {
    static CLIENT: RefCell<Option<Client>> = const { RefCell::new(None) };
    static REPLAY: Cell<Option<IntervalHandle>> = const { Cell::new(None) };
    /// Characters received but not yet rendered (see `Ui::flush`).
    static PENDING: RefCell<Vec<Arc<Token>>> = const { RefCell::new(Vec::new()) };
    /// When the inspector last followed the newest character (ms).
    static LAST_LIVE: Cell<f64> = const { Cell::new(0.0) };
}

fn send(msg: ToWorker) {
    CLIENT.with(|c| {
        if let Some(c) = c.borrow().as_ref() {
            c.send(msg)
        }
    });
}

fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map(|p| p.now()).unwrap_or_else(js_sys::Date::now)
}

/// `ModelInfo.arch` / the manifest's `arch` of an Energy-Based Transformer.
const EBT_ARCH: &str = "ebt";
/// "Think longer" goes up to this many steps (or the checkpoint's, if more).
const EBT_MAX_STEPS: usize = 32;
/// Best-of-N choices the page offers.
const EBT_CANDIDATES: [usize; 3] = [1, 4, 16];
/// The Langevin noise stds the page offers (0 = plain descent). 1 keeps the
/// shipped EBT's candidates visibly apart for a small cost in loss (docs/ebt.md).
const EBT_NOISE: [&str; 4] = ["0", "0.5", "1", "2"];

/// Which engine the reader asked for; `Auto` picks what is fast here.
#[derive(Debug, Clone, Copy, PartialEq)]
enum EnginePref {
    Auto,
    WebGpu,
    Cpu,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ColorMode {
    Plain,
    Energy,
    Steps,
}

/// Everything the page shows, as signals (all `Copy`, so closures share them).
#[derive(Clone, Copy)]
struct Ui {
    models: RwSignal<Vec<ModelEntry>>,
    model_idx: RwSignal<usize>,
    info: RwSignal<Option<ModelInfo>>,
    loading: RwSignal<bool>,
    progress: RwSignal<(f64, f64)>,
    /// What the loading does after the download (parse, engine start-up).
    phase: RwSignal<Option<String>>,
    /// Prompt characters read of those the window holds, while a run reads its prompt.
    reading: RwSignal<Option<(usize, usize, usize)>>,
    engine_pref: RwSignal<EnginePref>,
    running: RwSignal<bool>,
    error: RwSignal<Option<String>>,
    status: RwSignal<String>,
    cps: RwSignal<f64>,
    prompt: RwSignal<String>,
    len: RwSignal<String>,
    temperature: RwSignal<String>,
    top_k: RwSignal<String>,
    seed: RwSignal<String>,
    steps: RwSignal<String>,
    /// EBT: candidates per character (Best-of-N).
    candidates: RwSignal<usize>,
    /// EBT: Langevin noise std before every thinking step (one of EBT_NOISE).
    langevin: RwSignal<String>,
    tol: RwSignal<String>,
    run: RwSignal<u32>,
    run_prompt: RwSignal<String>,
    /// The manifest name of the model being loaded or loaded.
    model_name: RwSignal<String>,
    /// Keep the newest text in view: set by each run, cleared while the reader scrolls up.
    follow: RwSignal<bool>,
    t_start: RwSignal<f64>,
    tokens: RwSignal<Vec<Arc<Token>>>,
    /// The newest character as the inspector shows it (throttled).
    live: RwSignal<Option<Arc<Token>>>,
    /// Final energies' range over this run, for the colour map.
    e_range: RwSignal<(f32, f32)>,
    /// None: follow the newest character.
    selected: RwSignal<Option<usize>>,
    step: RwSignal<usize>,
    color: RwSignal<ColorMode>,
    gpu: RwSignal<GpuProbe>,
    watch: Watch,
}

impl Ui {
    fn new() -> Self {
        let (tokens, status) = (RwSignal::new(Vec::new()), RwSignal::new("Starting the inference worker…".into()));
        Self {
            models: RwSignal::new(Vec::new()),
            model_idx: RwSignal::new(0),
            info: RwSignal::new(None),
            loading: RwSignal::new(true),
            progress: RwSignal::new((0.0, 0.0)),
            phase: RwSignal::new(None),
            reading: RwSignal::new(None),
            engine_pref: RwSignal::new(EnginePref::Auto),
            running: RwSignal::new(false),
            error: RwSignal::new(None),
            status,
            cps: RwSignal::new(0.0),
            prompt: RwSignal::new("ROMEO:\n".into()),
            len: RwSignal::new("300".into()),
            temperature: RwSignal::new("0.8".into()),
            top_k: RwSignal::new("0".into()),
            seed: RwSignal::new("1337".into()),
            steps: RwSignal::new(String::new()),
            candidates: RwSignal::new(4),
            langevin: RwSignal::new("1".into()),
            tol: RwSignal::new("0".into()),
            run: RwSignal::new(0),
            run_prompt: RwSignal::new(String::new()),
            t_start: RwSignal::new(0.0),
            tokens,
            live: RwSignal::new(None),
            e_range: RwSignal::new((f32::INFINITY, f32::NEG_INFINITY)),
            selected: RwSignal::new(None),
            follow: RwSignal::new(true),
            model_name: RwSignal::new(String::new()),
            step: RwSignal::new(0),
            color: RwSignal::new(ColorMode::Plain),
            gpu: RwSignal::new(GpuProbe::Checking),
            watch: Watch::new(tokens, status),
        }
    }

    /// Whether colouring by final energy means something for the model
    /// picked: always for an NRGPT (its energy is what each state descends);
    /// for an EBT only when its energy tracks a character's loss (the
    /// manifest's measured r), since its level is otherwise free.
    fn energy_colour_offered(self) -> bool {
        !self.is_ebt() || self.models.with(|m| m.get(self.model_idx.get()).and_then(|m| m.energy_loss_r).is_some_and(|r| r >= manifest::MEANINGFUL_ENERGY_R))
    }

    /// Whether the model picked is an EBT: the loaded checkpoint's word, or
    /// the manifest's while it loads (so the controls do not flicker).
    fn is_ebt(self) -> bool {
        match self.info.with(|i| i.as_ref().map(|i| i.arch == EBT_ARCH)) {
            Some(ebt) => ebt,
            None => self.models.with(|m| m.get(self.model_idx.get()).is_some_and(|m| m.arch == EBT_ARCH)),
        }
    }

    fn on_reply(self, msg: FromWorker) {
        match msg {
            // the model's own load status says more while it loads
            FromWorker::Ready if self.loading.get_untracked() => {}
            FromWorker::Ready => self.status.set("Worker ready.".into()),
            FromWorker::Progress { loaded, total } => self.progress.set((loaded, total)),
            FromWorker::Loading { phase } => self.phase.set(Some(phase)),
            FromWorker::Reading { run, read, total, skipped } if run == self.run.get_untracked() => {
                self.reading.set((read < total).then_some((read, total, skipped)));
            }
            FromWorker::Reading { .. } => {}
            FromWorker::Backend { backend, note } => self.info.update(|i| {
                if let Some(i) = i {
                    i.backend = backend;
                    i.backend_note = note;
                }
            }),
            FromWorker::Loaded(info) => {
                self.loading.set(false);
                self.phase.set(None);
                self.steps.set(info.steps.to_string());
                let steps = if info.arch == EBT_ARCH { format!("S = {} thinking steps", info.steps) } else { format!("T = {}", info.steps) };
                self.status.set(format!(
                    "Loaded {} ({}, {} parameters, {steps}){}{}.",
                    self.model_name.get_untracked(),
                    info.arch,
                    thousands(info.params),
                    if info.from_cache { ", from the browser cache" } else { "" },
                    info.integrity_note.as_ref().map(|n| format!("; {n}")).unwrap_or_default()
                ));
                self.info.set(Some(info));
            }
            FromWorker::Token(tok) if tok.run == self.run.get_untracked() => {
                // Characters can arrive faster than frames: render them once per frame.
                let first = PENDING.with(|p| {
                    let mut p = p.borrow_mut();
                    p.push(Arc::new(tok));
                    p.len() == 1
                });
                if first {
                    request_animation_frame(move || self.flush(false));
                }
            }
            FromWorker::Token(_) => {} // from a run that was replaced
            FromWorker::Done { run, chars, ms, stopped } if run == self.run.get_untracked() => {
                self.flush(true);
                self.reading.set(None);
                self.running.set(false);
                let secs = (now_ms() - self.t_start.get_untracked()) / 1000.0;
                self.watch.done(format!(
                    "{} {chars} characters in {secs:.1} s ({:.1} chars/s; worker {:.1} s).",
                    if stopped { "Stopped after" } else { "Generated" },
                    chars as f64 / secs.max(1e-9),
                    ms / 1000.0
                ));
            }
            FromWorker::Done { .. } => {}
            FromWorker::Error { run, message } => {
                if run == 0 {
                    self.loading.set(false);
                }
                if run == 0 || run == self.run.get_untracked() {
                    self.running.set(false);
                    self.reading.set(None);
                    self.error.set(Some(message));
                }
            }
        }
    }

    /// Appends the characters received since the last frame. The inspector
    /// follows the newest one at most ~8 times a second (redrawing its charts
    /// for every character would only cost the main thread time).
    fn flush(self, last: bool) {
        let new = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
        if new.is_empty() && !last {
            return;
        }
        self.e_range.update(|(lo, hi)| {
            for t in &new {
                let e = t.energies.last().copied().unwrap_or(0.0);
                *lo = lo.min(e);
                *hi = hi.max(e);
            }
        });
        let n = self.tokens.with_untracked(|v| v.len()) + new.len();
        let newest = new.last().cloned();
        self.watch.enqueue(new);
        let now = now_ms();
        let secs = (now - self.t_start.get_untracked()) / 1000.0;
        if secs > 0.0 {
            self.cps.set(n as f64 / secs);
        }
        // a chart redrawn more often than this only flickers
        if last || now - LAST_LIVE.with(|l| l.get()) >= 400.0 {
            LAST_LIVE.with(|l| l.set(now));
            let newest = newest.or_else(|| self.tokens.with_untracked(|v| v.last().cloned()));
            if self.selected.get_untracked().is_none() {
                if let Some(t) = &newest {
                    self.step.set(t.steps_used);
                }
            }
            self.live.set(newest);
        }
    }

    /// Loads model `idx`; `keep_text` when only the engine changes, so the
    /// text and its traces (the same weights' descent) stay to be inspected.
    fn load_model(self, idx: usize, keep_text: bool) {
        let Some(entry) = self.models.with_untracked(|m| m.get(idx).cloned()) else { return };
        self.model_idx.set(idx);
        if self.color.get_untracked() == ColorMode::Energy && !self.energy_colour_offered() {
            self.color.set(ColorMode::Plain);
        }
        stop_replay();
        PENDING.with(|p| p.borrow_mut().clear());
        self.watch.finish();
        if !keep_text {
            // The old text's traces belong to the old model (and its inspector).
            self.tokens.set(Vec::new());
            self.live.set(None);
            self.selected.set(None);
            self.run_prompt.set(String::new());
        }
        self.info.set(None);
        self.loading.set(true);
        self.error.set(None);
        self.progress.set((0.0, entry.size as f64));
        self.phase.set(None);
        self.status.set(format!("Loading {}…", entry.name));
        self.model_name.set(entry.name.clone());
        send(ToWorker::Load { url: manifest::model_url(&entry), engine: self.engine_choice() });
    }

    /// The engine to start, decided here because only this thread sees the
    /// adapter's info: wgpu in the worker cannot tell a software GPU, which
    /// runs the kernels about 20x slower than the CPU engine.
    fn engine_choice(self) -> EngineChoice {
        let gpu = self.gpu.get_untracked();
        match (self.engine_pref.get_untracked(), gpu) {
            (EnginePref::Cpu, _) => EngineChoice { cpu_because: Some("you chose the CPU engine".into()), gpu_trusted: false },
            // an EBT thinks in WGSL only on hardware: on a software adapter its CPU engine is 8x faster
            (EnginePref::WebGpu, gpu) => EngineChoice { cpu_because: None, gpu_trusted: matches!(gpu, GpuProbe::Adapter { software: false, .. }) },
            (EnginePref::Auto, GpuProbe::Adapter { name, software: true }) => EngineChoice {
                cpu_because: Some(format!(
                    "the WebGPU adapter here is software ({name}), about 20x slower than the CPU engine: choose WebGPU under Engine to run it anyway"
                )),
                gpu_trusted: false,
            },
            (EnginePref::Auto, GpuProbe::Adapter { software: false, .. }) => EngineChoice { cpu_because: None, gpu_trusted: true },
            (EnginePref::Auto, GpuProbe::NoApi) => EngineChoice { cpu_because: Some("this browser offers no WebGPU".into()), gpu_trusted: false },
            (EnginePref::Auto, GpuProbe::NoAdapter(why)) => {
                EngineChoice { cpu_because: Some(format!("the browser gave no WebGPU adapter: {why}")), gpu_trusted: false }
            }
            // not probed yet (the page probes before it loads): let the worker look
            (EnginePref::Auto, GpuProbe::Checking) => EngineChoice::default(),
        }
    }

    /// The loaded model's characters, as a set: a 1 MB paste is checked on every keystroke.
    fn known_chars(self) -> HashSet<char> {
        self.info.with(|i| i.as_ref().map(|i| i.vocab.chars().collect()).unwrap_or_default())
    }

    /// What keeps the model from reading the prompt: every character outside its vocabulary at once.
    fn prompt_problem(self) -> Option<String> {
        let info = self.info.get()?;
        let prompt = self.prompt.get();
        if prompt.is_empty() {
            return Some("Type a prompt (at least one character).".into());
        }
        let in_vocab = self.known_chars();
        let mut bad: Vec<char> = prompt.chars().filter(|c| !in_vocab.contains(c)).collect();
        bad.sort_unstable();
        bad.dedup();
        let known = info.vocab.chars().count();
        match bad.as_slice() {
            [] => None,
            [c] => Some(format!("The character {c:?} is not in this model's vocabulary (it knows {known} characters).")),
            cs => {
                let list = cs.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", ");
                Some(format!("{} characters are not in this model's vocabulary (it knows {known}): {list}.", cs.len()))
            }
        }
    }

    fn generate(self) {
        if self.running.get_untracked() || self.info.get_untracked().is_none() {
            return;
        }
        // the prompt's hint already says what is wrong, and follows the typing
        if self.prompt_problem().is_some() {
            return;
        }
        // each field in its own range, named in the message
        let parse = |s: RwSignal<String>, what: &str, lo: f64, hi: f64| -> Result<f64, String> {
            let v = s.get_untracked().trim().parse::<f64>().map_err(|_| format!("{what} must be a number"))?;
            if !(lo..=hi).contains(&v) {
                let hi = if hi.is_finite() { format!("{hi}") } else { "any".into() };
                return Err(format!("{what} must be between {lo} and {hi} (it is {v})."));
            }
            Ok(v)
        };
        let req = (|| -> Result<GenerateRequest, String> {
            let ebt = self.is_ebt();
            let max_steps = if ebt { self.ebt_max_steps() } else { 64 };
            let len = parse(self.len, "Length", 1.0, 100_000.0)?;
            let temperature = parse(self.temperature, "Temperature", 0.0, f64::INFINITY)?;
            let top_k = parse(self.top_k, "Top-k", 0.0, f64::INFINITY)?;
            let seed = parse(self.seed, "Seed", 0.0, u64::MAX as f64)?;
            let steps = parse(self.steps, if ebt { "Thinking steps S" } else { "Recursion steps T" }, 1.0, max_steps as f64)?;
            let tol = parse(self.tol, "Early-exit tolerance", 0.0, f64::INFINITY)?;
            Ok(GenerateRequest {
                run: self.run.get_untracked() + 1,
                prompt: self.prompt.get_untracked(),
                len: len as usize,
                temperature: temperature as f32,
                top_k: top_k as usize,
                seed: seed as u64,
                steps: Some(steps as usize),
                early_exit: (tol > 0.0).then_some(tol as f32),
                candidates: if ebt { self.candidates.get_untracked() } else { 1 },
                langevin: if ebt { parse(self.langevin, "Thinking noise", 0.0, 100.0)? as f32 } else { 0.0 },
            })
        })();
        let req = match req {
            Ok(r) => r,
            Err(e) => return self.error.set(Some(e)),
        };
        stop_replay();
        self.run.set(req.run);
        self.run_prompt.set(prompt_tail(&req.prompt));
        // a long prompt fills the box: the new text must come into view anyway
        self.follow.set(true);
        PENDING.with(|p| p.borrow_mut().clear());
        self.watch.clear();
        self.tokens.set(Vec::new());
        self.live.set(None);
        self.e_range.set((f32::INFINITY, f32::NEG_INFINITY));
        self.selected.set(None);
        self.error.set(None);
        self.cps.set(0.0);
        self.running.set(true);
        self.reading.set(None);
        self.status.set("Generating…".into());
        self.t_start.set(now_ms());
        send(ToWorker::Generate(req));
    }

    fn ebt_max_steps(self) -> usize {
        self.info.with(|i| i.as_ref().map_or(EBT_MAX_STEPS, |i| i.steps.max(EBT_MAX_STEPS)))
    }

    /// Shows character `i` and replays its descent one step at a time.
    fn replay(self, i: usize) {
        let Some(n) = self.tokens.with_untracked(|v| v.get(i).map(|t| t.steps_used)) else { return };
        stop_replay();
        self.selected.set(Some(i));
        self.step.set(0);
        let step = self.step;
        let handle = set_interval_with_handle(
            move || {
                let s = step.get_untracked();
                if s >= n {
                    stop_replay();
                } else {
                    step.set(s + 1);
                }
            },
            Duration::from_millis(350),
        );
        REPLAY.with(|r| r.set(handle.ok()));
    }
}

fn stop_replay() {
    REPLAY.with(|r| {
        if let Some(h) = r.take() {
            h.clear()
        }
    });
}

/// How many prompt characters the marked copy shows around the first unknown one.
const MARKED_SHOWN: usize = 240;

/// The prompt again, below the box (a textarea cannot mark its own text),
/// with every character outside the vocabulary marked where it stands.
fn marked_prompt(ui: Ui) -> impl IntoView {
    let known = ui.known_chars();
    let prompt = ui.prompt.get();
    let len = prompt.chars().count();
    let first = prompt.chars().position(|c| !known.contains(&c)).unwrap_or(0);
    let start = first.saturating_sub(MARKED_SHOWN / 4);
    let end = (start + MARKED_SHOWN).min(len);
    let pieces = prompt
        .chars()
        .skip(start)
        .take(end - start)
        .map(|c| if known.contains(&c) { view! { {c.to_string()} }.into_any() } else { view! { <mark>{c.to_string()}</mark> }.into_any() })
        .collect_view();
    view! {
        <p class="marked-prompt" aria-hidden="true">
            {(start > 0).then_some("…")}{pieces}{(end < len).then_some("…")}
        </p>
    }
}

/// Moves the keyboard focus to generated character `i`.
fn focus_char(i: usize) {
    use wasm_bindgen::JsCast;
    let el = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.query_selector(&format!("#output .ch[data-i=\"{i}\"]")).ok().flatten())
        .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
    if let Some(el) = el {
        let _ = el.focus();
    }
}

fn token_key(t: &Arc<Token>) -> (u32, usize) {
    (t.run, t.index)
}

/// 723271 -> "723k", 1250000 -> "1.25M": parameter counts as people say them.
fn thousands(n: usize) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.0}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

/// Prompt characters the text box shows above a run: a pasted book would
/// otherwise cost the page a long layout for text the model does not even read.
const PROMPT_SHOWN: usize = 2_000;

fn prompt_tail(prompt: &str) -> String {
    let n = prompt.chars().count();
    if n <= PROMPT_SHOWN {
        return prompt.to_string();
    }
    let tail: String = prompt.chars().skip(n - PROMPT_SHOWN).collect();
    format!("[{} earlier characters of the prompt not shown] …{tail}", n - PROMPT_SHOWN)
}

/// The run's status while the engine reads a long prompt.
fn reading_status(read: usize, total: usize, skipped: usize) -> String {
    let skip = if skipped > 0 { format!(" (the first {skipped} lie outside the model's window and are not read)") } else { String::new() };
    format!("Reading the prompt: {read} of {total} characters{skip}…")
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

/// NRGPT's recursion steps T, and what leaving the trained T does.
fn nrgpt_steps(ui: Ui) -> impl IntoView {
    let trained = move || ui.info.with(|i| i.as_ref().map(|i| i.steps));
    let off = move || trained().is_some_and(|t| ui.steps.get().trim().parse::<usize>().is_ok_and(|s| s != t));
    let note = move || {
        trained().map(|t| {
            if off() {
                format!("trained at T = {t}: the weights learned a {t}-step descent, so another T usually writes worse text")
            } else {
                format!("descent steps per character; trained at T = {t}")
            }
        })
    };
    view! {
        <label class="field" for="steps">
            <span>"Recursion steps T"</span>
            <input id="steps" name="steps" type="number" inputmode="decimal" step="1" min="1" aria-describedby="steps-note"
                prop:value=move || ui.steps.get() on:input=move |ev| { ui.steps.set(event_target_value(&ev)); ui.error.set(None); } />
            <small id="steps-note" class="hint" class:bad=off>{note}</small>
        </label>
    }
}

/// The EBT's own knobs: how long each guess thinks and how many guesses compete.
fn ebt_controls(ui: Ui) -> impl IntoView {
    let trained = move || ui.info.with(|i| i.as_ref().map(|i| i.steps));
    view! {
        <label class="field" for="think-steps">
            <span>"Think longer: S = " {move || ui.steps.get()}</span>
            <input id="think-steps" name="think-steps" type="range" min="1" step="1" aria-describedby="think-note"
                max=move || ui.ebt_max_steps().to_string()
                prop:value=move || ui.steps.get() on:input=move |ev| ui.steps.set(event_target_value(&ev)) />
            <small id="think-note" class="hint">{move || trained().map(|s| format!("thinking steps per guess; trained with {s}"))}</small>
        </label>
        <label class="field" for="candidates">
            <span>"Candidates N"</span>
            <select id="candidates" name="candidates" aria-describedby="cand-note"
                on:change=move |ev| if let Ok(n) = event_target_value(&ev).parse() { ui.candidates.set(n) }>
                {EBT_CANDIDATES.into_iter().map(|n| view! {
                    <option value=n selected=move || ui.candidates.get() == n>{n}</option>
                }).collect_view()}
            </select>
            <small id="cand-note" class="hint">"Best-of-N: the lowest final energy wins"</small>
        </label>
        <label class="field" for="langevin">
            <span>"Thinking noise σ"</span>
            <select id="langevin" name="langevin" aria-describedby="noise-note"
                on:change=move |ev| ui.langevin.set(event_target_value(&ev))>
                {EBT_NOISE.into_iter().map(|n| view! {
                    <option value=n selected=move || ui.langevin.get() == n>{n}</option>
                }).collect_view()}
            </select>
            <small id="noise-note" class="hint">"Langevin noise added before each step: keeps the candidates apart"</small>
        </label>
    }
}

#[component]
pub fn App() -> impl IntoView {
    let ui = Ui::new();
    let listops_open = RwSignal::new(false);
    match Client::start(move |m| ui.on_reply(m)) {
        Ok(c) => CLIENT.with(|cl| *cl.borrow_mut() = Some(c)),
        Err(e) => ui.error.set(Some(e)),
    }
    leptos::task::spawn_local(async move {
        // the engine is chosen by the adapter, so the probe comes first
        ui.gpu.set(probe().await);
        match manifest::load().await {
            Ok(models) => {
                ui.models.set(models);
                ui.load_model(0, false);
            }
            Err(e) => {
                ui.loading.set(false);
                ui.error.set(Some(e));
            }
        }
    });

    // in slow motion the inspector follows the character settling in the text, step by step
    let slow = move || ui.watch.pace.get() == Pace::Slow;
    let current = Signal::derive(move || match ui.selected.get() {
        Some(i) => ui.tokens.with(|v| v.get(i).cloned()),
        None if slow() && ui.watch.busy() => ui.watch.settling.with(|s| s.as_ref().map(|(t, _)| t.clone())),
        None => ui.live.get(),
    });
    let step = Signal::derive(move || match ui.watch.settling.get() {
        Some((_, s)) if slow() && ui.selected.get().is_none() => s,
        _ => ui.step.get(),
    });
    // Where the last 40 characters settled: the basins the states fall into.
    let landscape = Signal::derive(move || ui.tokens.with(|v| v.iter().rev().take(40).filter_map(|t| t.proj.last().copied()).collect::<Vec<_>>()));
    let vocab = Signal::derive(move || ui.info.with(|i| i.as_ref().map(|i| i.vocab.chars().collect::<Vec<char>>()).unwrap_or_default()));
    // Only a change of family rebuilds the controls and the inspector's figures.
    let ebt = Memo::new(move |_| ui.is_ebt());
    let table_caption = Signal::derive(move || {
        if ebt.get() {
            "The kept guess sharpening: its top-5 characters per thinking step s, softmax(z(s))"
        } else {
            "Top-5 candidates per step (softmax of the readout of x(t))"
        }
    });
    let state = move || {
        if ui.running.get() || ui.watch.busy() {
            "generating"
        } else if ui.loading.get() {
            "loading"
        } else if ui.info.with(|i| i.is_some()) {
            "ready"
        } else {
            "error"
        }
    };
    let can_generate = move || !ui.running.get() && ui.info.with(|i| i.is_some());
    // the hint and the marked copy read one scan of the prompt per edit
    let prompt_problem = Memo::new(move |_| ui.prompt_problem());
    let backend = move || ui.info.with(|i| i.as_ref().map(|i| i.backend.clone()).unwrap_or_else(|| "loading…".into()));
    let num_input = move |id: &'static str, label: &'static str, sig: RwSignal<String>, step: &'static str, min: &'static str| {
        view! {
            <label class="field" for=id>
                <span>{label}</span>
                <input id=id name=id type="number" inputmode="decimal" step=step min=min
                    prop:value=move || sig.get() on:input=move |ev| { sig.set(event_target_value(&ev)); ui.error.set(None); } />
            </label>
        }
    };

    // Keep the newest text in view while streaming, unless the reader scrolled up.
    let out_ref = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        ui.tokens.track();
        request_animation_frame(move || {
            if let (Some(el), true) = (out_ref.get_untracked(), ui.follow.get_untracked()) {
                el.set_scroll_top(el.scroll_height());
            }
        });
    });
    // content growing fires no scroll event: only the reader (or the follow above) does
    let on_scroll = move |_| {
        if let Some(el) = out_ref.get_untracked() {
            ui.follow.set(el.scroll_height() - el.scroll_top() - el.client_height() < 80);
        }
    };

    let render_char = move |t: Arc<Token>| {
        let i = t.index;
        let e = t.energies.last().copied().unwrap_or(0.0);
        let s = t.steps_used as f32 / t.steps.max(1) as f32;
        let kept = (t.candidates.len() > 1).then(|| format!(" · candidate {} of {} kept", t.chosen + 1, t.candidates.len()));
        // an EBT's guess after each thinking step: the thought, in one line
        let guesses = (!t.candidates.is_empty()).then(|| {
            let chars = vocab.get_untracked();
            let top1 = |z: &Vec<f32>| z.iter().enumerate().fold(0, |b, (i, x)| if *x > z[b] { i } else { b });
            let g: Vec<String> = t.step_logits.iter().skip(1).map(|z| show_char(chars.get(top1(z)).copied().unwrap_or('?'))).collect();
            format!(" · guesses {}", g.join(" → "))
        });
        let title =
            format!("{} · E = {e:.2} · p = {:.2} · {} steps{}{}", show_char(t.ch), t.prob, t.steps_used, kept.unwrap_or_default(), guesses.unwrap_or_default());
        view! {
            // one tab stop for the whole text (the selected character, else the first); arrows move it
            <span class="ch" role="button" data-i=i title=title style:--e=format!("{e:.4}") style:--s=format!("{s:.3}")
                tabindex=move || if ui.selected.get().unwrap_or(0) == i { "0" } else { "-1" }
                class:sel=move || ui.selected.get() == Some(i)
                on:click=move |_| ui.replay(i)
                on:keydown=move |ev: KeyboardEvent| {
                    let last = ui.tokens.with_untracked(|v| v.len().saturating_sub(1));
                    let to = match ev.key().as_str() {
                        "ArrowRight" => Some((i + 1).min(last)),
                        "ArrowLeft" => Some(i.saturating_sub(1)),
                        "Home" => Some(0),
                        "End" => Some(last),
                        "Enter" | " " => Some(i),
                        _ => None,
                    };
                    if let Some(j) = to {
                        ev.prevent_default();
                        ui.replay(j);
                        focus_char(j);
                    }
                }>{t.ch.to_string()}</span>
        }
    };

    view! {
        <main id="app" data-state=state>
            <header class="top">
                <h1>{move || if ebt.get() { "EBT: watch a language model think" } else { "NRGPT: watch a language model think" }}</h1>
                <p class="tagline" id="tagline">
                    {move || if ebt.get() {
                        "An EBT thinks about the prediction itself: a guess at the next character starts as noise and descends a learned energy for S steps, and of N guesses the one with the lowest energy wins. \
                         Below: the text as it streams, and for each character every guess's energy per thinking step and how the kept guess sharpens."
                    } else {
                        "Each character is chosen by a state that descends an energy landscape for T steps. \
                         Below: the text as it streams, and for each character its energy E(t), its path into the basin and the candidates at every step."
                    }}
                </p>
                <p class="backend" data-webgpu=move || ui.gpu.with(|g| g.code())>
                    "Backend: " <strong id="backend-name">{backend}</strong>
                    {move || ui.info.with(|i| i.as_ref().and_then(|i| i.backend_note.clone())).map(|n| view! { <span id="backend-note">" ("{n}")"</span> })}
                    " — inference runs in a Web Worker. "
                    <span class="gpu-probe">{move || ui.gpu.with(|g| g.describe())}</span>
                </p>
                {how_it_works()}
                {tabs(listops_open)}
            </header>
            <ListOpsPanel open=listops_open />
            <div class="layout" class:hidden=move || listops_open.get()>
                // the app checks every field and names it; the browser's step checks refused 0.72 and 0.001
                <form class="controls panel" novalidate on:submit=move |ev: SubmitEvent| {
                    ev.prevent_default();
                    ui.generate();
                }>
                    <label class="field wide" for="model">
                        <span>"Model"</span>
                        <select id="model" name="model" prop:disabled=move || ui.running.get()
                            on:change=move |ev| {
                                if let Ok(i) = event_target_value(&ev).parse() {
                                    ui.load_model(i, false)
                                }
                            }>
                            {move || ui.models.get().into_iter().enumerate().map(|(i, m)| {
                                // short enough for the narrowest control column; the arch is in the details
                                let text = format!("{} ({} params)", m.name, thousands(m.params));
                                view! { <option value=i selected=move || ui.model_idx.get() == i>{text}</option> }
                            }).collect_view()}
                        </select>
                        {move || ui.models.with(|m| m.get(ui.model_idx.get()).cloned()).map(|m| view! {
                            <p class="hint model-summary">{m.summary.clone()}</p>
                            <details class="hint model-details">
                                <summary>"Details"</summary>
                                {format!("{} ({}, {})", m.description, m.arch, mb(m.size as f64))}
                            </details>
                        })}
                    </label>
                    <label class="field wide" for="engine">
                        <span>"Engine"</span>
                        <select id="engine" name="engine" prop:disabled=move || ui.running.get()
                            on:change=move |ev| {
                                let pref = match event_target_value(&ev).as_str() {
                                    "webgpu" => EnginePref::WebGpu,
                                    "cpu" => EnginePref::Cpu,
                                    _ => EnginePref::Auto,
                                };
                                ui.engine_pref.set(pref);
                                ui.load_model(ui.model_idx.get_untracked(), true);
                            }>
                            <option value="auto" selected=move || ui.engine_pref.get() == EnginePref::Auto>"Auto: the fastest here"</option>
                            <option value="webgpu" selected=move || ui.engine_pref.get() == EnginePref::WebGpu>"WebGPU"</option>
                            <option value="cpu" selected=move || ui.engine_pref.get() == EnginePref::Cpu>"CPU (wasm)"</option>
                        </select>
                    </label>
                    <Show when=move || ui.loading.get()>
                        <div class="progress" role="status">
                            <progress id="download" max=move || ui.progress.get().1.max(1.0) value=move || ui.progress.get().0></progress>
                            <span id="load-phase">{move || match ui.phase.get() {
                                Some(p) => p,
                                None => match ui.progress.get() {
                                    (_, 0.0) => "Finding the models…".to_string(),
                                    (a, b) => format!("Downloading {} of {}…", mb(a), mb(b)),
                                },
                            }}</span>
                        </div>
                    </Show>
                    <label class="field wide" for="prompt">
                        <span>"Prompt " <small>"(Ctrl+Enter to generate)"</small></span>
                        <textarea id="prompt" name="prompt" rows="3" spellcheck="false"
                            prop:value=move || ui.prompt.get()
                            on:input=move |ev| { ui.prompt.set(event_target_value(&ev)); ui.error.set(None); }
                            on:keydown=move |ev: KeyboardEvent| {
                                if ev.key() == "Enter" && (ev.ctrl_key() || ev.meta_key()) {
                                    ev.prevent_default();
                                    ui.generate();
                                }
                            }></textarea>
                        <small class="hint bad" role="alert">{move || prompt_problem.get()}</small>
                        {move || prompt_problem.with(Option::is_some).then(|| marked_prompt(ui))}
                    </label>
                    <div class="grid">
                        {num_input("len", "Length", ui.len, "1", "1")}
                        {num_input("temperature", "Temperature", ui.temperature, "0.05", "0")}
                        {num_input("top-k", "Top-k (0 = all)", ui.top_k, "1", "0")}
                        {num_input("seed", "Seed", ui.seed, "1", "0")}
                        {move || if ebt.get() { ebt_controls(ui).into_any() } else { nrgpt_steps(ui).into_any() }}
                        <label class="field" for="tol">
                            <span>"Early-exit tolerance"</span>
                            <input id="tol" name="tol" type="number" inputmode="decimal" step="0.01" min="0" aria-describedby="tol-note"
                                prop:value=move || ui.tol.get() on:input=move |ev| { ui.tol.set(event_target_value(&ev)); ui.error.set(None); } />
                            <small id="tol-note" class="hint">"0 = off; not on the CPU reference (GPT baselines)"</small>
                        </label>
                    </div>
                    <div class="buttons">
                        <button id="generate" type="submit" class="primary" prop:disabled=move || !can_generate()>"Generate"</button>
                        <button id="stop" type="button" prop:disabled=move || !ui.running.get() && !ui.watch.busy()
                            on:click=move |_| { send(ToWorker::Stop); ui.watch.finish(); }>"Stop"</button>
                    </div>
                    <p id="status" class="status" aria-live="polite" data-cps=move || format!("{:.2}", ui.cps.get())>
                        {move || match ui.reading.get() {
                            Some((read, total, skipped)) => reading_status(read, total, skipped),
                            None => ui.status.get(),
                        }}
                        {move || (ui.running.get() && ui.reading.get().is_none())
                            .then(|| format!(" {} chars, {:.1} chars/s", ui.tokens.with(|v| v.len()), ui.cps.get()))}
                    </p>
                    {move || ui.error.get().map(|e| view! { <p id="error" class="error" role="alert">{e}</p> })}
                </form>

                <section class="panel text-panel" aria-labelledby="out-h">
                    <div class="panel-head">
                        <h2 id="out-h">"Text"</h2>
                        <label class="pace" for="pace">
                            "Watch "
                            <select id="pace" name="pace" on:change=move |ev| {
                                let pace = Pace::from_code(&event_target_value(&ev));
                                if pace == Pace::Off {
                                    ui.watch.finish();
                                }
                                ui.watch.pace.set(pace);
                            }>
                                {[(Pace::RealTime, "each character settle"), (Pace::Slow, "in slow motion (250 ms a step)"), (Pace::Off, "only the result")]
                                    .into_iter()
                                    .map(|(p, label)| view! { <option value=p.code() selected=move || ui.watch.pace.get() == p>{label}</option> })
                                    .collect_view()}
                            </select>
                        </label>
                        <fieldset class="color-mode">
                            <legend>"Colour by"</legend>
                            {[(ColorMode::Plain, "none", "plain"), (ColorMode::Energy, "final energy", "energy"), (ColorMode::Steps, "steps used", "steps")]
                                .into_iter()
                                .map(|(mode, label, id)| view! {
                                    <label hidden=move || mode == ColorMode::Energy && !ui.energy_colour_offered()>
                                        <input type="radio" name="color" id=format!("color-{id}") prop:checked=move || ui.color.get() == mode
                                            on:change=move |_| ui.color.set(mode) />
                                        {label}
                                    </label>
                                })
                                .collect_view()}
                        </fieldset>
                    </div>
                    <div id="output" class="output" node_ref=out_ref on:scroll=on_scroll
                        class:color-energy=move || ui.color.get() == ColorMode::Energy
                        class:color-steps=move || ui.color.get() == ColorMode::Steps
                        style:--emin=move || { let lo = ui.e_range.get().0; if lo.is_finite() { lo } else { 0.0 }.to_string() }
                        style:--erange=move || { let (lo, hi) = ui.e_range.get(); (hi - lo).max(1e-3).to_string() }>
                        <span class="prompt-text">{move || ui.run_prompt.get()}</span>
                        <For each=move || ui.tokens.get() key=token_key children=render_char />
                        {settling_char(ui.watch, vocab)}
                        <span class="caret" class:on=move || ui.running.get() aria-hidden="true"></span>
                    </div>
                    <p class="legend">
                        {move || match ui.color.get() {
                            ColorMode::Plain => "Click a character to replay how it settled.",
                            ColorMode::Energy => "Green: low final energy (a deep basin); red: high. Click a character to replay it.",
                            ColorMode::Steps if ui.tokens.with(|v| !v.is_empty() && v.iter().all(|t| t.steps_used >= t.steps)) =>
                                "Every character used all its steps: nothing exited early (set an early-exit tolerance above 0 to let characters stop once they settle).",
                            ColorMode::Steps => "Green: few descent steps used; red: all of them (early exit works on the incremental engines, WebGPU and CPU).",
                        }}
                    </p>
                </section>

                <section class="panel inspector" aria-labelledby="insp-h">
                    <div class="panel-head">
                        <h2 id="insp-h">{move || match (current.get(), ui.selected.get()) {
                            (Some(t), Some(_)) => format!("Character #{}: “{}” (replay)", t.index, show_char(t.ch)),
                            (Some(t), None) => format!("Character #{}: “{}” (newest)", t.index, show_char(t.ch)),
                            _ => if ebt.get() { "The thinking" } else { "The descent" }.to_string(),
                        }}</h2>
                        <div class="nav">
                            <button type="button" aria-label="previous character" prop:disabled=move || current.with(|c| c.as_ref().is_none_or(|t| t.index == 0))
                                on:click=move |_| if let Some(t) = current.get_untracked() { ui.replay(t.index.saturating_sub(1)) }>"◀"</button>
                            <button type="button" id="replay" prop:disabled=move || current.with(|c| c.is_none())
                                on:click=move |_| if let Some(t) = current.get_untracked() { ui.replay(t.index) }>"Replay"</button>
                            <button type="button" aria-label="next character" prop:disabled=move || current.with(|c| c.as_ref().is_none_or(|t| t.index + 1 >= ui.tokens.with(|v| v.len())))
                                on:click=move |_| if let Some(t) = current.get_untracked() { ui.replay(t.index + 1) }>"▶"</button>
                            <button type="button" id="follow" prop:disabled=move || ui.selected.get().is_none()
                                on:click=move |_| { stop_replay(); ui.selected.set(None); ui.step.set(usize::MAX); }>"Newest"</button>
                        </div>
                    </div>
                    {move || if current.with(|c| c.is_none()) {
                        // before any character there is nothing to draw: say what will be here
                        view! {
                            <p id="insp-empty" class="hint">{move || if ebt.get() {
                                "Generate some text: for each character, every guess's energy per thinking step appears here, and how the kept guess sharpened."
                            } else {
                                "Generate some text: for each character, its energy per descent step, its path into the basin and its candidates appear here."
                            }}</p>
                        }.into_any()
                    } else if ebt.get() {
                        // An EBT has no hidden-state path (`proj` is empty): its picture is the candidates.
                        view! {
                            <div class="figs ebt">
                                <figure>
                                    <CandidateCurves token=current step=step />
                                    <figcaption>
                                        {move || format!("Each guess's energy per thinking step, {}. Self-verification keeps the lowest final energy (thick).",
                                            ui.info.with(|i| i.as_ref().map(|i| i.think_step.clone()).unwrap_or_default()))}
                                    </figcaption>
                                </figure>
                            </div>
                        }.into_any()
                    } else {
                        view! {
                            <div class="figs">
                                <figure>
                                    <EnergyChart token=current step=step />
                                    <figcaption>"How far the energy of the state that chose this character fell from where it started, per descent step (a hollow ring marks a rise)."</figcaption>
                                </figure>
                                <figure>
                                    <TrajectoryChart token=current step=step landscape=landscape />
                                    <figcaption>"Its path seen from above: the hidden state on the two directions that matter most for the next character (hollow dot: start; bar: scale). Grey: where recent characters settled."</figcaption>
                                </figure>
                            </div>
                        }.into_any()
                    }}
                    <CandidateTable token=current step=step vocab=vocab caption=table_caption />
                </section>
            </div>
        </main>
    }
}
