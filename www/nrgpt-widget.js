// <nrgpt-widget>: an energy-based language model writing in a blog post.
// One script tag defines the element; it drives the page's own inference
// worker (www/worker.js, the same wasm and protocol as the page) and resolves
// every asset of its own against this script's URL, so any static host works.
// Nothing here needs eval, inline script or inline style (strict CSP).

// `cargo xtask dist` replaces 'dev' with a content hash: every URL this file
// derives gets ?v=<hash>, so a new release is never taken from a cache.
const BUILD = 'dev';
const HERE = new URL('./', import.meta.url);

function assetUrl(path) {
  const u = new URL(path, HERE);
  if (BUILD !== 'dev') u.searchParams.set('v', BUILD);
  return u.href;
}

// CPU runs: at least two workers, so two widgets write at once; a core is left to the page.
const POOL_SIZE = Math.min(4, Math.max(2, (navigator.hardwareConcurrency || 2) - 1));
const TRACE_VERSION = 1;
const TOP_PER_STEP = 3;
// Reveal pace: a new character at most every CHAR_MS, each settling over its steps at STEP_MS a step.
const CHAR_MS = 28;
const STEP_MS = 70;

// ---------------------------------------------------------------- downloads

/** One download per model URL for the whole page; workers read it from a blob: URL. */
const downloads = new Map();

function download(url, onProgress) {
  let d = downloads.get(url);
  if (!d) {
    d = { listeners: new Set(), loaded: 0, total: 0 };
    const tell = () => d.listeners.forEach((f) => f(d.loaded, d.total));
    d.promise = (async () => {
      // no-cache revalidates with the server, so a re-trained model is never served stale
      const resp = await fetch(url, { cache: 'no-cache' }).catch((e) => {
        throw new Error(`could not fetch ${url}: ${e.message}`);
      });
      if (!resp.ok) throw new Error(`could not fetch ${url}: HTTP ${resp.status}`);
      d.total = Number(resp.headers.get('content-length')) || 0;
      const chunks = [];
      const reader = resp.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        chunks.push(value);
        d.loaded += value.length;
        tell();
      }
      return URL.createObjectURL(new Blob(chunks));
    })();
    d.promise.catch(() => downloads.delete(url));
    downloads.set(url, d);
  }
  d.listeners.add(onProgress);
  onProgress(d.loaded, d.total);
  return d.promise.finally(() => d.listeners.delete(onProgress));
}

// ------------------------------------------------------------ engine choice

/** Adapter names of GPUs emulated on the CPU (as src/web/gpu_probe.rs). */
const SOFTWARE_RASTERISERS = ['swiftshader', 'llvmpipe', 'lavapipe', 'microsoft basic render'];
let probed = null;

/**
 * The page's Auto rule (src/web/app.rs: engine_choice), decided here because
 * only this thread sees the adapter's info: a software adapter runs the
 * kernels about 20x slower than the CPU engine. `engine="webgpu"` or "cpu"
 * overrides it. Returns the worker's EngineChoice (src/web/protocol.rs) and
 * whether the run goes to the GPU (an adapter exists and is chosen).
 */
async function engineChoice(pref) {
  const cpu = (why) => ({ engine: { cpu_because: why, gpu_trusted: false }, on_gpu: false });
  if (pref === 'cpu') return cpu('the widget asked for the CPU engine');
  probed ??= (async () => {
    try {
      const a = await navigator.gpu?.requestAdapter();
      if (!a) return null;
      const info = a.info ?? {};
      const name = [info.vendor, info.architecture, info.description].filter(Boolean).join(' ');
      const software = a.isFallbackAdapter || info.isFallbackAdapter || SOFTWARE_RASTERISERS.some((r) => name.toLowerCase().includes(r));
      return { name, software: Boolean(software) };
    } catch {
      return null;
    }
  })();
  const gpu = await probed;
  if (gpu?.software && pref !== 'webgpu') return cpu(`the WebGPU adapter here is software (${gpu.name}), about 20x slower than the CPU engine`);
  // without an adapter the worker's engine finds none either and says so itself
  return { engine: { cpu_because: null, gpu_trusted: Boolean(gpu && !gpu.software) }, on_gpu: Boolean(gpu) };
}

// -------------------------------------------------------------- workers

let nextRun = 1;
let nextSession = 1;

/**
 * A worker's script must come from the page's origin. From a CDN, a
 * same-origin blob: module imports it instead (the CDN must send CORS
 * headers, and a page's CSP must allow worker-src blob:).
 */
function startWorker() {
  const url = assetUrl('worker.js');
  if (new URL(url).origin === location.origin) return new Worker(url, { type: 'module' });
  const shim = new Blob([`import ${JSON.stringify(url)};`], { type: 'text/javascript' });
  return new Worker(URL.createObjectURL(shim), { type: 'module' });
}

/** One inference worker, hosting sessions (src/web/worker.rs): each its own model and sequence. */
class Host {
  constructor() {
    this.worker = startWorker();
    this.sessions = new Map();
    this.dead = null;
    const die = (why) => {
      this.dead = `the inference worker stopped: ${why}`;
      this.sessions.forEach((e) => e.listener?.({ type: 'Error', run: e.currentRun, message: this.dead }));
      return new Error(this.dead);
    };
    this.ready = new Promise((resolve, reject) => {
      this.worker.onmessage = (ev) => {
        const m = ev.data;
        if (m?.type === 'Ready') return resolve();
        // worker.js reports a wasm that would not start without a session
        if (m?.session === undefined && m?.type === 'Error') return reject(die(m.message));
        this.sessions.get(m?.session)?.listener?.(m);
      };
      this.worker.onerror = (ev) => reject(die(ev.message || 'it could not start (is www/pkg built?)'));
    });
    this.ready.catch(() => {}); // a dead worker is reported through the sessions' listeners
  }
}

/** A session on a host: one model, one sequence; held by one widget at a time. */
class Engine {
  constructor(host) {
    this.host = host;
    this.id = nextSession++;
    this.model = null;
    this.info = null;
    this.listener = null;
    host.sessions.set(this.id, this);
  }

  get dead() { return this.host.dead; }

  post(msg) { this.host.worker.postMessage({ ...msg, session: this.id }); }

  /** Loads `model` (its blob: URL `blob`) on `engine` unless this session has it so already. */
  async load(model, blob, engine) {
    await this.host.ready;
    const key = `${model} ${JSON.stringify(engine)}`;
    if (this.model === key) return this.info;
    this.model = null;
    this.currentRun = 0;
    const info = await new Promise((resolve, reject) => {
      this.listener = (m) => {
        if (m.type === 'Loaded') resolve(m);
        else if (m.type === 'Error' && m.run === 0) reject(new Error(m.message));
      };
      this.post({ type: 'Load', url: blob, engine });
    });
    this.listener = null;
    this.model = key;
    this.info = info;
    return info;
  }
}

/**
 * On the CPU, a pool of workers with one session each, so widgets write on
 * separate cores. On WebGPU, one worker hosting every widget's session: one
 * GPU device for the page, the runs interleaved character by character.
 */
const cpuPool = { engines: [], waiting: [] };
const gpuPool = { host: null, engines: [] };

function idleEngine(engines, model) {
  const idle = engines.filter((e) => !e.held && !e.dead);
  return idle.find((e) => e.model?.startsWith(`${model} `)) ?? idle[0];
}

/** A session for `model`: an idle one that has it, any idle one, a new one, or (CPU, all busy) the next released. */
function acquire(model, onGpu) {
  let e;
  if (onGpu) {
    if (!gpuPool.host || gpuPool.host.dead) gpuPool.host = new Host();
    gpuPool.engines = gpuPool.engines.filter((x) => !x.dead);
    e = idleEngine(gpuPool.engines, model);
    if (!e) {
      e = new Engine(gpuPool.host);
      gpuPool.engines.push(e);
    }
  } else {
    cpuPool.engines = cpuPool.engines.filter((x) => !x.dead);
    e = idleEngine(cpuPool.engines, model);
    if (!e && cpuPool.engines.length < POOL_SIZE) {
      e = new Engine(new Host());
      cpuPool.engines.push(e);
    }
    if (!e) return new Promise((resolve) => cpuPool.waiting.push({ model, resolve }));
  }
  e.held = true;
  return Promise.resolve(e);
}

function release(e) {
  e.held = false;
  e.listener = null;
  if (gpuPool.engines.includes(e)) return;
  const next = cpuPool.waiting.shift();
  if (next) acquire(next.model, false).then(next.resolve);
}

// ------------------------------------------------------------------ helpers

/** The `n` largest logits' characters, ties to the lower id (as `trainer sample --trace`). */
function topChars(logits, vocab, n) {
  const order = logits.map((_, i) => i);
  order.sort((a, b) => logits[b] - logits[a] || a - b);
  return order.slice(0, n).map((i) => vocab[i]).join('');
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function numberAttr(host, name, fallback, min, max) {
  const raw = host.getAttribute(name);
  if (raw === null || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < min || v > max) throw new Error(`${name}="${raw}" must be a number from ${min} to ${max}`);
  return v;
}

const kParams = (n) => (n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : `${Math.round(n / 1e3)}k`);

// ------------------------------------------------------------------ element

class NrgptWidget extends HTMLElement {
  constructor() {
    super();
    this.attachShadow({ mode: 'open' });
    this.chars = [];      // every character received this run: {c, e, top, cand, kept}
    this.shown = 0;       // how many of them are on screen
    this.animating = [];  // spans still settling
    this.runToken = null; // the run in flight, if any
    this.visible = false;
    this.paused = false;
    this.complete = false;
    this.live = false;
    this.selected = null;
  }

  // attributes, read when a run starts so a script may change them in between
  settings() {
    const prompt = this.readonly || !this.$prompt ? this.getAttribute('prompt') ?? 'ROMEO:' : this.$prompt.value;
    return {
      prompt,
      len: Math.round(numberAttr(this, 'length', 200, 1, 5000)),
      temperature: numberAttr(this, 'temperature', 0.8, 0, 100),
      top_k: Math.round(numberAttr(this, 'top-k', 0, 0, 1e6)),
      seed: Math.round(numberAttr(this, 'seed', 1, 0, Number.MAX_SAFE_INTEGER)),
      steps: this.hasAttribute('steps') ? Math.round(numberAttr(this, 'steps', 0, 1, 64)) : null,
      candidates: Math.round(numberAttr(this, 'candidates', 1, 1, 64)),
      langevin: numberAttr(this, 'langevin', 0, 0, 100),
    };
  }
  get readonly() { return this.hasAttribute('readonly'); }
  get layout() { return this.getAttribute('layout') === 'full' ? 'full' : 'compact'; }
  get loading() { return ['eager', 'interaction'].includes(this.getAttribute('loading')) ? this.getAttribute('loading') : 'lazy'; }
  get modelUrl() { return this.getAttribute('model') ? new URL(this.getAttribute('model'), document.baseURI).href : null; }
  /** The characters written so far (settled on screen). */
  get text() { return this.chars.slice(0, this.shown).map((c) => c.c).join(''); }

  buildDom() {
    const root = this.shadowRoot;
    const css = el('link');
    css.rel = 'stylesheet';
    css.href = assetUrl('nrgpt-widget.css');
    this.$box = el('div', 'box');
    this.$box.hidden = true; // until its stylesheet is in: no flash of unstyled text
    css.addEventListener('load', () => { this.$box.hidden = false; });
    css.addEventListener('error', () => { this.$box.hidden = false; });
    root.append(css, this.$box);

    const head = el('div', 'head');
    this.$status = el('span', 'status', 'Not loaded yet');
    this.$badge = el('span', 'badge');
    this.$progress = el('progress', 'progress');
    this.$progress.hidden = true;
    head.append(this.$badge, this.$status, this.$progress);

    this.$text = el('div', 'text');
    this.$text.setAttribute('role', 'log');
    this.$text.setAttribute('aria-live', 'polite');
    this.$text.addEventListener('click', (ev) => {
      const i = ev.target?.dataset?.i;
      if (i !== undefined) this.inspect(Number(i));
    });
    this.$facade = el('button', 'facade', 'Run it live');
    this.$facade.hidden = true;
    this.$facade.addEventListener('click', () => this.generate());
    const stage = el('div', 'stage');
    stage.append(this.$text, this.$facade);

    const controls = el('div', 'controls');
    if (!this.readonly) {
      this.$prompt = el('textarea', 'prompt');
      this.$prompt.rows = 1;
      this.$prompt.setAttribute('aria-label', 'Prompt');
      this.$prompt.value = this.getAttribute('prompt') ?? 'ROMEO:';
      controls.append(this.$prompt);
    }
    this.$run = el('button', 'run', 'Generate');
    this.$run.addEventListener('click', () => (this.runToken ? this.stop() : this.generate()));
    controls.append(this.$run);

    this.$inspector = el('div', 'inspector');
    this.$box.append(head, stage, controls, this.$inspector);
  }

  connectedCallback() {
    // built here, not in the constructor: a widget made by createElement gets its attributes afterwards
    if (!this.$box) this.buildDom();
    this.$box.className = `box ${this.layout}`;
    if (this.$prompt && this.hasAttribute('prompt')) this.$prompt.value = this.getAttribute('prompt');
    this.$inspector.hidden = this.layout !== 'full';
    this.setState('idle');
    // lazy widgets and pausing both follow the viewport
    this.observer = new IntersectionObserver((entries) => this.onVisibility(entries.at(-1).isIntersecting), { rootMargin: '200px 0px' });
    this.observer.observe(this);
    if (this.getAttribute('poster')) this.loadPoster();
    if (this.loading === 'eager') this.start();
    if (this.loading === 'interaction') this.$facade.hidden = false;
  }

  disconnectedCallback() {
    this.observer?.disconnect();
    this.stop();
  }

  setState(state) {
    this.setAttribute('state', state);
    this.$run.textContent = this.runToken ? 'Stop' : 'Generate';
    this.$run.disabled = state === 'loading';
  }

  fail(message) {
    this.$status.textContent = message;
    this.$status.classList.add('error');
    this.setState('error');
    this.dispatchEvent(new CustomEvent('error', { detail: { message } }));
  }

  onVisibility(visible) {
    this.visible = visible;
    if (visible) {
      if (this.loading === 'lazy' && !this.started) this.start();
      if (this.paused) this.resume();
      else this.tick();
    } else if (this.runToken || this.shown < this.chars.length) {
      this.pause();
    }
  }

  // ------------------------------------------------------------ the poster

  async loadPoster() {
    try {
      const resp = await fetch(new URL(this.getAttribute('poster'), document.baseURI));
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      const trace = await resp.json();
      if (trace.version !== TRACE_VERSION) throw new Error(`trace version ${trace.version}, expected ${TRACE_VERSION}`);
      const s = this.settings();
      if (trace.prompt !== s.prompt || trace.seed !== s.seed) throw new Error('it records another prompt or seed than this widget runs');
      if (this.live) return;
      this.setBadge('Recorded run');
      if (this.getAttribute('state') === 'idle') this.$status.textContent = `${trace.arch}: a recorded run of this prompt and seed`;
      this.begin(trace.prompt);
      this.dataset.poster = 'playing';
      this.chars = trace.chars;
      this.complete = true;
      this.tick();
    } catch (e) {
      console.warn(`nrgpt-widget: poster ${this.getAttribute('poster')} not shown: ${e.message}`);
    }
  }

  setBadge(text) {
    this.$badge.textContent = text;
    this.$badge.hidden = !text;
  }

  // ------------------------------------------------------------ loading

  /** Downloads the model (shared) and takes a worker; starts writing when asked to. */
  async start() {
    if (this.started) return;
    this.started = true;
    const model = this.modelUrl;
    if (!model) return this.fail('This widget has no model attribute.');
    this.setState('loading');
    this.$status.textContent = 'Downloading the model…';
    this.$progress.hidden = false;
    try {
      this.blob = await download(model, (loaded, total) => {
        if (total) this.$progress.max = total;
        this.$progress.value = loaded;
      });
    } catch (e) {
      this.$progress.hidden = true;
      return this.fail(e.message);
    }
    this.$progress.hidden = true;
    this.$status.textContent = 'Model downloaded';
    this.setState('ready');
    if (this.hasAttribute('autoplay') || this.wantsRun) this.generate();
  }

  /** Writes a new text with the current settings (the JS API). */
  generate() {
    this.$facade.hidden = true;
    if (!this.blob) {
      this.wantsRun = true;
      return this.start();
    }
    this.stop();
    let s;
    try {
      s = this.settings();
    } catch (e) {
      return this.fail(e.message);
    }
    this.live = true;
    delete this.dataset.poster;
    this.setBadge('');
    this.$status.classList.remove('error');
    this.begin(s.prompt);
    this.complete = false;
    this.request = s;
    return this.run(0);
  }

  /** Stops writing; what is written stays (the JS API). */
  stop() {
    this.paused = false;
    this.halt();
    this.complete = true;
    this.chars.length = this.shown;
    if (this.$run) this.setState(this.getAttribute('state') === 'error' ? 'error' : 'ready');
  }

  /** Ends the run in flight; its worker goes back to the pool once it says Done. */
  halt() {
    const t = this.runToken;
    if (!t) return;
    this.runToken = null;
    if (t.posted) t.engine.post({ type: 'Stop' });
  }

  pause() {
    if (this.paused) return;
    this.halt();
    this.paused = true;
    this.stateBeforePause = this.getAttribute('state');
    this.setState('paused');
  }

  resume() {
    this.paused = false;
    if (this.live && !this.complete) this.run(this.chars.length);
    else this.setState(this.stateBeforePause);
    this.tick();
  }

  /**
   * Runs the request on a pooled worker. `skip` characters are already here:
   * a resumed run repeats the same seed's draws and drops them, so a pause
   * never changes the text.
   */
  async run(skip) {
    const token = {};
    this.runToken = token;
    this.setState('running');
    let engine, choice;
    try {
      choice = await engineChoice(this.getAttribute('engine'));
      engine = await acquire(this.modelUrl, choice.on_gpu);
    } catch (e) {
      // a worker that cannot even be constructed (a cross-origin script the page may not run)
      if (this.runToken === token) this.runToken = null;
      return this.fail(`could not start the inference worker: ${e.message}`);
    }
    token.engine = engine;
    if (this.runToken !== token) return release(engine);
    try {
      const info = await engine.load(this.modelUrl, this.blob, choice.engine);
      if (this.runToken !== token) return release(engine);
      this.onLoaded(info);
    } catch (e) {
      release(engine);
      if (this.runToken === token) {
        this.runToken = null;
        this.fail(e.message);
      }
      return;
    }
    const run = nextRun++;
    const r = this.request;
    engine.listener = (m) => {
      if (m.run !== run) return; // another run's, or a message type this version does not know
      const mine = this.runToken === token;
      if (m.type === 'Token') {
        if (mine && m.index >= skip) this.receive(m);
      } else if (m.type === 'Done' || m.type === 'Error') {
        release(engine);
        if (!mine) return;
        this.runToken = null;
        if (m.type === 'Error') return this.fail(m.message);
        this.complete = true;
        this.tick();
      }
    };
    engine.currentRun = run;
    token.posted = true;
    engine.post({
      type: 'Generate', run, prompt: r.prompt, len: r.len, temperature: r.temperature, top_k: r.top_k,
      seed: r.seed, steps: r.steps, early_exit: null, candidates: r.candidates, langevin: r.langevin,
    });
  }

  onLoaded(info) {
    this.vocab = Array.from(info.vocab);
    if (this.loadedOnce) return;
    this.loadedOnce = true;
    this.info = info;
    this.$status.textContent = `${info.arch}, ${kParams(info.params)} parameters, ${info.backend}`;
    this.dispatchEvent(new CustomEvent('load', { detail: { ...info } }));
  }

  receive(m) {
    this.chars.push({
      c: m.ch,
      e: m.energies,
      top: m.step_logits.map((l) => topChars(l, this.vocab, TOP_PER_STEP)),
      cand: m.candidates,
      kept: m.candidates.length ? m.chosen : undefined,
    });
    this.tick();
  }

  // ------------------------------------------------------------ drawing

  /** Clears the text for a new run after `prompt`. */
  begin(prompt) {
    this.chars = [];
    this.shown = 0;
    this.animating = [];
    this.selected = null;
    this.$text.replaceChildren(el('span', 'prompt-text', prompt));
    this.$inspector.replaceChildren(el('p', 'hint', 'Each character settles over its steps; click one to see how.'));
    this.lastReveal = 0;
  }

  /** One animation frame: reveal the next character when due, advance the settling ones. */
  tick() {
    if (this.frame || !this.visible || this.paused) return;
    this.frame = requestAnimationFrame((now) => {
      this.frame = 0;
      if (this.shown < this.chars.length && now - this.lastReveal >= CHAR_MS) {
        this.lastReveal = now;
        this.reveal(this.shown, now);
      }
      this.animating = this.animating.filter((a) => this.settle(a, now));
      if (this.shown < this.chars.length || this.animating.length) this.tick();
      else if (this.complete) this.finished();
    });
  }

  reveal(i, now) {
    const c = this.chars[i];
    const span = el('span', 'ch settling');
    span.dataset.i = i;
    span.textContent = c.top[0]?.[0] ?? c.c;
    this.$text.append(span);
    this.shown = i + 1;
    this.animating.push({ span, c, t0: now });
    this.followTail();
    if (this.layout === 'full' && (this.selected === null)) this.drawInspector(i);
    this.dispatchEvent(new CustomEvent('token', { detail: { index: i, char: c.c } }));
  }

  /** Shows the step's leader, then the drawn character; false once settled. */
  settle(a, now) {
    const n = a.c.top.length;
    const step = Math.floor((now - a.t0) / STEP_MS);
    if (step >= n) {
      a.span.textContent = a.c.c;
      a.span.className = 'ch';
      a.span.style.removeProperty('--settle');
      return false;
    }
    a.span.textContent = a.c.top[step][0];
    // CSSOM, not a style attribute: allowed under style-src 'self'
    a.span.style.setProperty('--settle', String((step + 1) / (n + 1)));
    return true;
  }

  followTail() {
    const t = this.$text;
    if (t.scrollHeight - t.scrollTop - t.clientHeight < 40) t.scrollTop = t.scrollHeight;
  }

  finished() {
    if (this.runToken || this.getAttribute('state') === 'done' || this.getAttribute('state') === 'error') return;
    if (!this.live) {
      this.dataset.poster = 'shown';
      return;
    }
    this.setState('done');
    this.$status.textContent = `${this.info ? `${this.info.arch}, ${this.info.backend}: ` : ''}wrote ${this.shown} characters`;
    this.dispatchEvent(new CustomEvent('done', { detail: { text: this.text } }));
  }

  inspect(i) {
    this.selected = i;
    this.$text.querySelectorAll('.sel').forEach((s) => s.classList.remove('sel'));
    this.$text.querySelector(`[data-i="${i}"]`)?.classList.add('sel');
    if (this.layout === 'full') this.drawInspector(i);
  }

  /** Energy per step (every candidate's for an EBT, the kept one thick) and the leaders per step. */
  drawInspector(i) {
    const c = this.chars[i];
    const title = el('p', 'insp-title', `#${i} '${c.c === '\n' ? '↵' : c.c}'`);
    const curves = c.cand?.length ? c.cand : c.e?.length ? [c.e] : [];
    const parts = [title];
    if (curves.length) {
      const W = 220, H = 90, P = 6;
      const all = curves.flat();
      const lo = Math.min(...all), hi = Math.max(...all);
      const steps = Math.max(...curves.map((k) => k.length)) - 1 || 1;
      const plot = svg('svg', { class: 'energy', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'energy per step' });
      curves.forEach((k, j) => {
        const pts = k.map((e, s) => `${(P + (s / steps) * (W - 2 * P)).toFixed(1)},${(P + (hi === lo ? 0.5 : (hi - e) / (hi - lo)) * (H - 2 * P)).toFixed(1)}`);
        const kept = c.kept === undefined || c.kept === j;
        plot.append(svg('polyline', { class: kept ? 'curve kept' : 'curve', points: pts.join(' ') }));
      });
      parts.push(plot, el('p', 'caption', c.cand?.length ? `energy of ${curves.length} guesses per thinking step; the kept one is thick` : 'energy per descent step'));
    } else {
      parts.push(el('p', 'caption', 'A GPT has no energy: below, what each layer would write'));
    }
    const table = el('table', 'leaders');
    c.top.forEach((t, s) => {
      const row = el('tr');
      row.append(el('th', '', String(s)), ...Array.from(t, (ch) => el('td', '', ch === '\n' ? '↵' : ch === ' ' ? '␣' : ch)));
      table.append(row);
    });
    parts.push(table);
    this.$inspector.replaceChildren(...parts);
  }
}

if (!customElements.get('nrgpt-widget')) customElements.define('nrgpt-widget', NrgptWidget);
