//! The inference worker: owns the engines, runs generation off the page's
//! thread and streams one message per character. It hosts sessions (the page
//! is session 0; the widgets on WebGPU each take one), every one its own model
//! and sequence, all on one GPU device; their runs interleave at every
//! character. Entry point `worker_main` is called by www/worker.js once the
//! wasm module is initialised.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{spawn_local, JsFuture};
use web_sys::{DedicatedWorkerGlobalScope, MessageChannel, MessageEvent};

use super::fetch::fetch_cached;
use super::protocol::{from_js, to_js, EngineChoice, FromWorker, GenerateRequest, InSession, ModelInfo, Token, ToWorker};
use nrgpt_core::rng::Rng64;
use nrgpt_core::sample::{draw, filtered_probs, SampleOpts};
use nrgpt_core::ebt::Verify;
use nrgpt_core::session::{window_after, EbtThinkOpts, Session, StepOpts, TokenTrace};
use nrgpt_core::{ModelConfig, Vocab};
use nrgpt_engine::GpuDevice;

/// The inference backend. Every NRGPT checkpoint runs on the incremental
/// engine (cached keys, O(T n D) per character): WebGPU when the page chose
/// it, else the same algorithm in plain Rust; an EBT thinks in WGSL only on a
/// GPU the page trusts. The recomputing reference is kept for the GPT
/// baselines, which have no incremental engine.
pub enum PageBackend {
    Reference(Session),
    Incremental(nrgpt_engine::Decoder),
}

impl PageBackend {
    /// Picks the incremental engine when it takes this checkpoint, else the reference, and says why.
    async fn load(bytes: &[u8], choice: &EngineChoice, gpu: Option<GpuDevice>) -> Result<Self, String> {
        use nrgpt_engine::{Backend, Decoder, DecoderOpts};
        let opts = DecoderOpts { force_cpu: choice.cpu_because.is_some(), gpu, ebt_on_software_gpu: choice.gpu_trusted };
        match Decoder::new(bytes, opts).await {
            Ok(e) => {
                if let Backend::Cpu { reason } = e.backend() {
                    web_sys::console::info_1(&format!("using the CPU engine: {reason}").into());
                }
                Ok(PageBackend::Incremental(e))
            }
            Err(why) => {
                web_sys::console::info_1(&format!("using the CPU reference: {why}").into());
                Session::from_bytes(bytes).map(PageBackend::Reference).map_err(|e| e.to_string())
            }
        }
    }
    pub fn backend(&self) -> String {
        use nrgpt_engine::Backend;
        match self {
            PageBackend::Reference(_) => "CPU reference (wasm)".into(),
            // the page names the adapter itself (browsers often leave wgpu's adapter info empty)
            PageBackend::Incremental(e) => match e.backend() {
                Backend::Gpu { .. } => "WebGPU engine".into(),
                Backend::Cpu { .. } => "CPU engine (wasm)".into(),
            },
        }
    }

    /// Why the CPU engine runs although it was not asked for.
    pub fn backend_note(&self) -> Option<String> {
        match self {
            PageBackend::Incremental(e) => match e.backend() {
                nrgpt_engine::Backend::Cpu { reason } => Some(reason.clone()),
                nrgpt_engine::Backend::Gpu { .. } => None,
            },
            PageBackend::Reference(_) => None,
        }
    }
    pub fn config(&self) -> &ModelConfig {
        match self {
            PageBackend::Reference(s) => &s.model.cfg,
            PageBackend::Incremental(e) => e.config(),
        }
    }
    pub fn vocab(&self) -> &Vocab {
        match self {
            PageBackend::Reference(s) => &s.vocab,
            PageBackend::Incremental(e) => e.vocab(),
        }
    }
    pub fn integrity(&self) -> nrgpt_core::format::Integrity {
        match self {
            PageBackend::Reference(s) => s.integrity,
            PageBackend::Incremental(e) => e.integrity(),
        }
    }
    pub fn reset(&mut self) {
        match self {
            PageBackend::Reference(s) => s.reset(),
            PageBackend::Incremental(e) => e.reset(),
        }
    }
    pub async fn push(&mut self, token: u32, opts: &StepOpts) -> Result<TokenTrace, String> {
        match self {
            PageBackend::Reference(s) => s.push(token, opts).map_err(|e| e.to_string()),
            PageBackend::Incremental(e) => e.push(token, opts).await.map_err(|e| e.to_string()),
        }
    }
    /// Feeds part of a prompt: the incremental engine takes it in one
    /// submission (one GPU read-back), the reference recomputes its window once.
    async fn push_prompt(&mut self, tokens: &[u32], opts: &StepOpts) -> Result<TokenTrace, String> {
        match self {
            PageBackend::Reference(s) => s.push_many(tokens, opts).map_err(|e| e.to_string()),
            PageBackend::Incremental(e) => e.push_many(tokens, opts).await.map_err(|e| e.to_string()),
        }
    }
}

/// Prompt characters fed between two checks of the stop button.
const PROMPT_CHUNK: usize = 32;

/// One session: a model and the sequence it writes.
#[derive(Default)]
struct SessionState {
    id: u32,
    /// None while a run has it (taken out so no borrow lives across an await).
    engine: RefCell<Option<PageBackend>>,
    running: Cell<bool>,
    stop: Cell<bool>,
}

impl SessionState {
    fn post(&self, msg: FromWorker) {
        post(self.id, msg);
    }
}

/// Everything the worker holds: its sessions and the GPU device they share.
#[derive(Default)]
struct Host {
    sessions: RefCell<HashMap<u32, Rc<SessionState>>>,
    /// Opened by the first load that wants the GPU; dropped when it is lost.
    gpu: RefCell<Option<GpuDevice>>,
    /// Resolves when the device being opened is there, so loads arriving
    /// meanwhile wait for it instead of opening a second one.
    opening: RefCell<Option<js_sys::Promise>>,
}

impl Host {
    fn session(&self, id: u32) -> Rc<SessionState> {
        self.sessions.borrow_mut().entry(id).or_insert_with(|| Rc::new(SessionState { id, ..Default::default() })).clone()
    }

    /// The shared device: the one open, else a new one (None without an adapter: the engine then says why).
    async fn device(&self) -> Option<GpuDevice> {
        let pending = self.opening.borrow().clone();
        if let Some(p) = pending {
            let _ = JsFuture::from(p).await;
        }
        if let Some(gpu) = self.gpu.borrow().clone() {
            return Some(gpu);
        }
        let mut done = None;
        *self.opening.borrow_mut() = Some(js_sys::Promise::new(&mut |resolve, _| done = Some(resolve)));
        let gpu = GpuDevice::open().await.ok();
        self.gpu.borrow_mut().clone_from(&gpu);
        *self.opening.borrow_mut() = None;
        if let Some(resolve) = done {
            let _ = resolve.call0(&JsValue::NULL);
        }
        gpu
    }
}

fn scope() -> DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

fn post(session: u32, msg: FromWorker) {
    if let Err(e) = scope().post_message(&to_js(&InSession { session, msg })) {
        web_sys::console::error_2(&"worker: postMessage failed".into(), &e);
    }
}

fn now_ms() -> f64 {
    scope().performance().map(|p| p.now()).unwrap_or_else(js_sys::Date::now)
}

/// Lets the worker's event loop run (so a Stop message is handled) without
/// the 4 ms clamp that nested setTimeout(0) gets.
async fn yield_now() {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        let Ok(ch) = MessageChannel::new() else {
            let _ = resolve.call0(&JsValue::NULL);
            return;
        };
        let port = ch.port1();
        let cb = Closure::once_into_js(move |_: JsValue| {
            let _ = resolve.call0(&JsValue::NULL);
        });
        port.set_onmessage(Some(cb.unchecked_ref()));
        let _ = ch.port2().post_message(&JsValue::NULL);
    });
    let _ = JsFuture::from(p).await;
}

#[wasm_bindgen]
pub fn worker_main() {
    console_panic_hook();
    let host = Rc::new(Host::default());
    let on_msg = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
        let InSession { session, msg } = match from_js::<InSession<ToWorker>>(ev.data()) {
            Ok(m) => m,
            Err(e) => return post(0, FromWorker::Error { run: 0, message: e }),
        };
        let s = host.session(session);
        match msg {
            ToWorker::Stop => s.stop.set(true),
            ToWorker::Load { url, engine } => {
                if s.running.get() {
                    return s.post(FromWorker::Error { run: 0, message: "stop the generation before loading another model".into() });
                }
                spawn_local(load(host.clone(), s, url, engine));
            }
            ToWorker::Generate(req) => spawn_local(generate(host.clone(), s, req)),
        }
    });
    scope().set_onmessage(Some(on_msg.as_ref().unchecked_ref()));
    on_msg.forget(); // lives as long as the worker
    post(0, FromWorker::Ready);
}

async fn load(host: Rc<Host>, s: Rc<SessionState>, url: String, choice: EngineChoice) {
    let fetched = fetch_cached(&url, |loaded, total| s.post(FromWorker::Progress { loaded, total })).await;
    let (bytes, from_cache) = match fetched {
        Ok(x) => x,
        Err(message) => return s.post(FromWorker::Error { run: 0, message }),
    };
    let phase = if choice.cpu_because.is_some() {
        "Reading the checkpoint and starting the CPU engine…"
    } else {
        "Reading the checkpoint and starting the WebGPU engine…"
    };
    s.post(FromWorker::Loading { phase: phase.into() });
    yield_now().await; // let the message leave before the parse holds the thread
    let gpu = if choice.cpu_because.is_none() { host.device().await } else { None };
    let engine = match PageBackend::load(&bytes, &choice, gpu).await {
        Ok(e) => e,
        Err(e) => return s.post(FromWorker::Error { run: 0, message: format!("could not read the checkpoint {url}: {e}") }),
    };
    let cfg = engine.config();
    let info = ModelInfo {
        arch: cfg.arch.name().into(),
        steps: cfg.steps,
        block_size: cfg.block_size,
        d_model: cfg.d_model,
        vocab: engine.vocab().chars().iter().collect(),
        params: nrgpt_core::model::num_params(cfg),
        think_step: match (cfg.arch, cfg.ebt_update) {
            (nrgpt_core::Arch::Ebt, nrgpt_core::EbtUpdate::Logits) => "z ← z − α∇E".into(),
            (nrgpt_core::Arch::Ebt, nrgpt_core::EbtUpdate::Probs) => "z ← softmax(z) − α∇E".into(),
            _ => String::new(),
        },
        backend: engine.backend(),
        backend_note: choice.cpu_because.clone().or_else(|| engine.backend_note()),
        integrity_note: engine.integrity().note().map(String::from),
        from_cache,
    };
    *s.engine.borrow_mut() = Some(engine);
    s.post(FromWorker::Loaded(info));
}

/// Exactly `sample::generate`'s procedure (same filtering, same draws from the
/// same `Rng64` stream), so the page reproduces `trainer sample` for a seed.
async fn generate(host: Rc<Host>, s: Rc<SessionState>, req: GenerateRequest) {
    let run = req.run;
    let fail = |message: String| s.post(FromWorker::Error { run, message });
    if s.running.get() {
        return fail("a generation is already running".into());
    }
    let Some(mut engine) = s.engine.borrow_mut().take() else { return fail("no model is loaded".into()) };
    s.running.set(true);
    s.stop.set(false);
    let t0 = now_ms();
    let result = run_generation(&host, &s, &mut engine, &req).await;
    *s.engine.borrow_mut() = Some(engine);
    s.running.set(false);
    match result {
        Ok((chars, stopped)) => s.post(FromWorker::Done { run, chars, ms: now_ms() - t0, stopped }),
        Err(message) => fail(message),
    }
}

async fn run_generation(host: &Host, s: &SessionState, engine: &mut PageBackend, req: &GenerateRequest) -> Result<(usize, bool), String> {
    let stopped = || s.stop.get();
    let ids = engine.vocab().encode(&req.prompt).map_err(|e| format!("the prompt has a {e}"))?;
    if ids.is_empty() {
        return Err("the prompt is empty: type at least one character".into());
    }
    // The EBT's candidate noise is seeded by the sampling seed, as `trainer sample` does.
    let ebt = EbtThinkOpts { samples: req.candidates.max(1), verify: Verify::MinEnergy, accept_lower: false, seed: req.seed, langevin: req.langevin };
    let opts = StepOpts { steps: req.steps, early_exit: req.early_exit, ebt };
    let sopts = SampleOpts { temperature: req.temperature, top_k: (req.top_k > 0).then_some(req.top_k), top_p: None, seed: req.seed };
    engine.reset();
    let mut backend = engine.backend();
    // Only what the window will hold is read: the first piece carries the
    // characters before it, which the engine skips by the shared window rule
    // (`window_after`, as `trainer sample` does), so the text stays exact.
    let block = engine.config().block_size;
    let total = window_after(&[], &ids, block).0.len();
    let skipped = ids.len() - total;
    let (mut start, mut end) = (0, skipped + PROMPT_CHUNK.min(total));
    s.post(FromWorker::Reading { run: req.run, read: 0, total, skipped });
    let mut trace = loop {
        if stopped() {
            return Ok((0, true));
        }
        let trace = engine.push_prompt(&ids[start..end], &opts).await?;
        s.post(FromWorker::Reading { run: req.run, read: end - skipped, total, skipped });
        yield_now().await;
        if end == ids.len() {
            break trace;
        }
        (start, end) = (end, (end + PROMPT_CHUNK).min(ids.len()));
    };
    report_takeover(host, s, engine, &mut backend);
    let mut push_ms = 0.0;
    let asked = req.steps.unwrap_or(engine.config().steps);
    let mut rng = Rng64::new(req.seed);
    for index in 0..req.len {
        if stopped() {
            return Ok((index, true));
        }
        let probs = filtered_probs(&trace.logits, &sopts);
        let next = draw(&probs, &mut rng);
        let ch = engine.vocab().chars()[next];
        // The trace that chose `ch` is the descent of the previous position.
        s.post(FromWorker::Token(Token::new(req.run, index, ch, probs[next], asked, trace, push_ms)));
        if index + 1 == req.len {
            break;
        }
        let t0 = now_ms();
        trace = engine.push(next as u32, &opts).await?;
        push_ms = now_ms() - t0;
        report_takeover(host, s, engine, &mut backend);
        yield_now().await;
    }
    Ok((req.len, false))
}

/// Tells the page when the engine changed under a run (a lost GPU's CPU
/// takeover), and drops the lost device so the next load opens a new one.
fn report_takeover(host: &Host, s: &SessionState, engine: &PageBackend, shown: &mut String) {
    let now = engine.backend();
    if now != *shown {
        host.gpu.borrow_mut().take();
        s.post(FromWorker::Backend { backend: now.clone(), note: engine.backend_note() });
        *shown = now;
    }
}

/// Panics show up in the console with their message instead of "unreachable".
pub fn console_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        web_sys::console::error_1(&format!("nrgpt-web panicked: {info}").into());
    }));
}
