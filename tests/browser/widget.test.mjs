// Browser test of <nrgpt-widget>, run by `cargo xtask test-browser` (which
// builds dist/ and passes every widget's native reference text, keyed
// `page.html#id`). dist/ is served by a plain static server started here
// (not the project's dev server), with and without the strict CSP header;
// the test's own pages come from tests/browser/fixtures at /fixtures/.
// DIST_NEXT_DIR is the next release's dist/ (a re-trained default model),
// for the check that an update is never served stale.
import { describe, before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { chromium } from 'playwright-core';

const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set: run this through \`cargo xtask test-browser\``);
  return v;
};
const DIST = env('DIST_DIR');
const DIST_NEXT = env('DIST_NEXT_DIR');
const FIXTURES = env('FIXTURES_DIR');
const EXPECTED = JSON.parse(env('WIDGET_EXPECTED'));
const OUT = env('OUT_DIR');
fs.mkdirSync(OUT, { recursive: true });

const CSP = "script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; style-src 'self'";
const MODEL = '/www/models/default.safetensors';
const RUN_TIMEOUT = 240_000;

const MIME = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.json': 'application/json', '.wasm': 'application/wasm', '.svg': 'image/svg+xml', '.png': 'image/png',
};

/**
 * Counts GPU devices asked for in the realm it runs in (`self.__devices`):
 * an init script on the page, the head of worker.js in a worker (an init
 * script does not reach workers).
 */
const COUNT_DEVICES = `if (self.GPUAdapter) {
  self.__devices = 0;
  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = function (...a) { self.__devices++; return requestDevice.apply(this, a); };
}
`;

/**
 * A static file server on 127.0.0.1 that logs every request; `csp` adds the
 * header to every response; `dist()` is the folder it serves (a test may
 * switch it, as a host publishing a new release); `countDevices` puts
 * COUNT_DEVICES at the head of worker.js.
 */
function staticServer({ csp, cors = false, dist = () => DIST, countDevices = false }) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    requests.push({ method: req.method, path: url.pathname, search: url.search });
    const rel = decodeURIComponent(url.pathname === '/' ? '/index.html' : url.pathname);
    const [base, sub] = rel.startsWith('/fixtures/') ? [FIXTURES, rel.slice('/fixtures/'.length)] : [dist(), rel.slice(1)];
    const file = path.resolve(base, sub);
    if (!file.startsWith(path.resolve(base) + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end('not found');
    }
    let body = fs.readFileSync(file);
    if (countDevices && rel === '/www/worker.js') body = Buffer.concat([Buffer.from(COUNT_DEVICES), body]);
    const headers = { 'Content-Type': MIME[path.extname(file)] ?? 'application/octet-stream', 'Cache-Control': 'no-cache', 'Content-Length': body.length };
    if (csp) headers['Content-Security-Policy'] = CSP;
    if (cors) headers['Access-Control-Allow-Origin'] = '*';
    res.writeHead(200, headers);
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    modelGets: () => requests.filter((r) => r.method === 'GET' && r.path === MODEL).length,
    gets: (p) => requests.filter((r) => r.method === 'GET' && r.path === p).length,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  })));
}

// Flags seen to work with Debian's chromium here (shared/notes/toolchain.md).
const BASE_ARGS = ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];
const MODES = {
  webgpu: [...BASE_ARGS, '--enable-unsafe-webgpu'],
  // no WebGPU anywhere, workers included (an init script would not reach them)
  'cpu-fallback': [...BASE_ARGS, '--disable-gpu'],
};

/** Counts CSP violations and logs the widgets' events (captured at the document: they do not bubble). */
function watchPage() {
  window.__csp = [];
  window.__events = [];
  document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  for (const type of ['load', 'token', 'done', 'error']) {
    document.addEventListener(type, (e) => {
      if (e.target?.localName === 'nrgpt-widget') window.__events.push({ type, id: e.target.id, t: performance.now(), detail: e.detail });
    }, true);
  }
}

const widgetState = (page, id) => page.$eval(`#${id}`, (w) => w.getAttribute('state'));
/** The characters a reader sees in the widget (its shadow tree), and the element's own account. */
const shownText = (page, id) => page.$eval(`#${id}`, (w) => ({
  chars: [...w.shadowRoot.querySelectorAll('.text .ch')].map((c) => c.textContent).join(''),
  settling: w.shadowRoot.querySelectorAll('.text .ch.settling').length,
  text: w.text,
}));

async function waitDone(page, id, timeout = RUN_TIMEOUT) {
  await page.waitForFunction((id) => ['done', 'error'].includes(document.getElementById(id)?.getAttribute('state')), id, { timeout });
  const state = await widgetState(page, id);
  if (state === 'error') assert.fail(`widget ${id}: ${await page.$eval(`#${id}`, (w) => w.shadowRoot.querySelector('.status').textContent)}`);
}

async function assertText(page, key, id = key.split('#')[1]) {
  const expected = EXPECTED[key];
  assert.ok(expected, `no native reference for ${key}`);
  const seen = await shownText(page, id);
  assert.equal(seen.settling, 0, `${key}: every character has settled`);
  assert.equal(seen.chars, expected, `${key}: the widget's text equals \`trainer sample\`'s for its seed`);
  assert.equal(seen.text, expected, `${key}: the element's text property`);
}

for (const [mode, args] of Object.entries(MODES)) {
  describe(`widget (${mode})`, () => {
    let browser, server, cspServer;
    const errors = [];

    before(async () => {
      browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args });
      server = await staticServer({ csp: false });
      cspServer = await staticServer({ csp: true });
    });
    after(async () => {
      if (errors.length) console.log(`[${mode}] console errors:\n  ${errors.join('\n  ')}`);
      await browser?.close();
      await server?.close();
      await cspServer?.close();
    });

    async function open(srv, url, viewport = { width: 1000, height: 800 }, init = []) {
      const context = await browser.newContext({ viewport });
      await context.addInitScript(watchPage);
      for (const content of init) await context.addInitScript({ content });
      const page = await context.newPage();
      page.on('console', (m) => { if (m.type() === 'error' || /Content Security Policy/.test(m.text())) errors.push(`${url}: ${m.text()}`); });
      page.on('pageerror', (e) => errors.push(`${url}: ${e}`));
      await page.goto(srv.url + url);
      return { context, page };
    }

    test('the blog demo from dist/ under a strict CSP: every widget writes the native text, no violation', async () => {
      const before = errors.length;
      const { context, page } = await open(cspServer, '/www/blog-demo.html');
      const ids = await page.$$eval('nrgpt-widget', (ws) => ws.map((w) => w.id));
      assert.deepEqual(ids, ['nrgpt', 'ebt', 'nrgpt-side', 'gpt']);
      for (const id of ids) {
        await page.$eval(`#${id}`, (w) => w.scrollIntoView({ block: 'center' }));
        const t0 = Date.now();
        if (id === 'nrgpt') {
          // docs/page.md's blog-demo picture: the widget's head in view, characters still settling
          await page.$eval(`#${id}`, (w) => window.scrollBy(0, w.getBoundingClientRect().top - 140));
          await page.waitForFunction(() => document.getElementById('nrgpt').text.length >= 150, null, { timeout: RUN_TIMEOUT });
          await page.screenshot({ path: path.join(OUT, `widget-blog-demo-${mode}.png`) });
        }
        await waitDone(page, id);
        const status = await page.$eval(`#${id}`, (w) => w.shadowRoot.querySelector('.status').textContent);
        console.log(`[${mode}] ${id}: ${status} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
        await assertText(page, `blog-demo.html#${id}`);
      }
      // the full layout's inspector: one energy curve per guess, the kept one drawn thicker
      const ebt = await page.$eval('#ebt', (w) => [...w.shadowRoot.querySelectorAll('svg.energy polyline')].map((p) => ({
        kept: p.classList.contains('kept'), width: parseFloat(getComputedStyle(p).strokeWidth), shown: p.getBoundingClientRect().width > 0,
      })));
      assert.equal(ebt.length, 4, 'four candidates drawn for the EBT');
      assert.equal(ebt.filter((c) => c.kept).length, 1);
      assert.ok(ebt.every((c) => c.shown && (c.kept || c.width < ebt.find((k) => k.kept).width)));
      // the GPT baseline beside an NRGPT on the same prompt and seed
      const side = await page.$$eval('#nrgpt-side, #gpt', (ws) => ws.map((w) => {
        const r = w.getBoundingClientRect();
        return { id: w.id, top: r.top, left: r.left, right: r.right, prompt: w.getAttribute('prompt'), seed: w.getAttribute('seed') };
      }));
      assert.equal(side[0].prompt, side[1].prompt);
      assert.equal(side[0].seed, side[1].seed);
      assert.ok(Math.abs(side[0].top - side[1].top) < 1 && side[1].left >= side[0].right, `side by side: ${JSON.stringify(side)}`);
      await page.screenshot({ path: path.join(OUT, `widget-blog-demo-${mode}-full.png`), fullPage: true });
      const violations = await page.evaluate(() => window.__csp);
      assert.deepEqual(violations, [], 'no securitypolicyviolation event');
      assert.deepEqual(errors.slice(before).filter((e) => /Content Security Policy/.test(e)), [], 'no CSP report in the console');
      assert.equal(cspServer.requests.find((r) => r.path.endsWith('.wasm')) !== undefined, true, 'the wasm came from the CSP server');
      await context.close();
    });

    test('two widgets writing at once: the texts of each alone, one download of the model', async () => {
      const n0 = server.modelGets();
      const { context, page } = await open(server, '/fixtures/pair.html');
      await waitDone(page, 'a');
      await waitDone(page, 'b');
      await assertText(page, 'pair.html#a');
      await assertText(page, 'pair.html#b');
      assert.equal(server.modelGets() - n0, 1, 'the model file is fetched once for both widgets');
      const ev = await page.evaluate(() => window.__events);
      const span = (id) => {
        const ts = ev.filter((e) => e.id === id && e.type === 'token').map((e) => e.t);
        return [Math.min(...ts), Math.max(...ts)];
      };
      const [a, b] = [span('a'), span('b')];
      assert.ok(a[0] < b[1] && b[0] < a[1], `they wrote at the same time (a ${a.map(Math.round)}, b ${b.map(Math.round)} ms)`);
      assert.equal(ev.filter((e) => e.type === 'load').length, 2, 'a load event per widget');
      assert.deepEqual(ev.filter((e) => e.type === 'done').map((e) => e.detail.text).sort(), [EXPECTED['pair.html#a'], EXPECTED['pair.html#b']].sort());
      await context.close();
    });

    test(mode === 'webgpu'
      ? 'two widgets on WebGPU at once: the texts of each alone, one worker, one GPU device'
      : 'two widgets asking for WebGPU without it: the texts of each alone on the CPU pool, no GPU device', async () => {
      const counting = await staticServer({ csp: false, countDevices: true });
      try {
        const { context, page } = await open(counting, '/fixtures/gpu-pair.html', undefined, [COUNT_DEVICES]);
        await waitDone(page, 'a');
        await waitDone(page, 'b');
        await assertText(page, 'gpu-pair.html#a');
        await assertText(page, 'gpu-pair.html#b');
        const ev = await page.evaluate(() => window.__events);
        const backends = ev.filter((e) => e.type === 'load').map((e) => e.detail.backend);
        assert.deepEqual(backends, mode === 'webgpu' ? ['WebGPU engine', 'WebGPU engine'] : ['CPU engine (wasm)', 'CPU engine (wasm)']);
        const span = (id) => {
          const ts = ev.filter((e) => e.id === id && e.type === 'token').map((e) => e.t);
          return [Math.min(...ts), Math.max(...ts)];
        };
        const [a, b] = [span('a'), span('b')];
        assert.ok(a[0] < b[1] && b[0] < a[1], `they wrote at the same time (a ${a.map(Math.round)}, b ${b.map(Math.round)} ms)`);
        const workers = counting.gets('/www/worker.js');
        const inWorkers = await Promise.all(page.workers().map((w) => w.evaluate(() => self.__devices ?? 0)));
        const devices = inWorkers.reduce((x, y) => x + y, 0) + await page.evaluate(() => self.__devices ?? 0);
        console.log(`[${mode}] gpu pair: ${workers} worker(s), ${devices} GPU device(s) requested`);
        if (mode === 'webgpu') {
          assert.equal(workers, 1, 'one worker hosts both widgets');
          assert.equal(devices, 1, 'one GPU device for the page');
        } else {
          assert.equal(workers, 2, 'the CPU pool: a worker per widget');
          assert.equal(devices, 0);
        }
        await context.close();
      } finally {
        await counting.close();
      }
    });

    test('a lazy widget below the fold loads nothing until scrolled to, and pauses out of view', async () => {
      const n0 = server.modelGets();
      const { context, page } = await open(server, '/fixtures/lazy.html');
      await page.waitForTimeout(3000);
      assert.equal(server.modelGets() - n0, 0, 'no model request before it is in view');
      assert.equal(await widgetState(page, 'lazy'), 'idle');
      await page.$eval('#lazy', (w) => w.scrollIntoView({ block: 'center' }));
      await waitDone(page, 'lazy');
      assert.equal(server.modelGets() - n0, 1, 'one model request once in view');
      await assertText(page, 'lazy.html#lazy');

      // the JS API writes again; scrolled away it pauses, and back in view it ends with the same text
      await page.$eval('#lazy', (w) => w.generate());
      await page.waitForFunction(() => document.getElementById('lazy').text.length >= 10);
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.waitForFunction(() => document.getElementById('lazy').getAttribute('state') === 'paused');
      const n1 = (await shownText(page, 'lazy')).chars.length;
      await page.waitForTimeout(1500);
      const n2 = (await shownText(page, 'lazy')).chars.length;
      assert.equal(n2, n1, 'no characters appear while it is out of view');
      assert.ok(n1 < EXPECTED['lazy.html#lazy'].length, `paused before the end (${n1} characters)`);
      await page.$eval('#lazy', (w) => w.scrollIntoView({ block: 'center' }));
      await waitDone(page, 'lazy');
      await assertText(page, 'lazy.html#lazy');
      await context.close();
    });

    test(mode === 'webgpu' ? 'engine="webgpu" runs the WebGPU engine and writes the native text' : 'engine="webgpu" without WebGPU falls back to the CPU engine and says so', async () => {
      const { context, page } = await open(server, '/fixtures/gpu.html');
      if (mode === 'webgpu') {
        // SwiftShader writes about 9 characters a second: slow enough to pause a run in flight
        await page.waitForFunction(() => document.getElementById('gpu').text.length >= 8, null, { timeout: RUN_TIMEOUT });
        await page.$eval('#gpu', (w) => { w.hidden = true; });
        await page.waitForFunction(() => document.getElementById('gpu').getAttribute('state') === 'paused');
        await page.waitForTimeout(500); // the character in flight when it paused
        // what the worker has sent (received, shown or not): nothing more while paused
        const received = () => page.$eval('#gpu', (w) => w.chars.length);
        const r1 = await received();
        await page.waitForTimeout(2000);
        assert.equal(await received(), r1, 'the worker stopped writing while the widget is out of view');
        assert.ok(r1 < 40, `paused mid-run (${r1} characters received)`);
        await page.$eval('#gpu', (w) => { w.hidden = false; });
      }
      await waitDone(page, 'gpu');
      await assertText(page, 'gpu.html#gpu');
      const backend = (await page.evaluate(() => window.__events.find((e) => e.type === 'load'))).detail.backend;
      assert.equal(backend, mode === 'webgpu' ? 'WebGPU engine' : 'CPU engine (wasm)');
      await context.close();
    });

    test('a model that cannot be fetched: an error event, and the reason inside the widget', async () => {
      const { context, page } = await open(server, '/fixtures/lazy.html');
      const message = await page.evaluate(() => new Promise((resolve) => {
        const w = document.createElement('nrgpt-widget');
        w.id = 'missing';
        w.setAttribute('model', '/www/models/missing.safetensors');
        w.setAttribute('loading', 'eager');
        w.addEventListener('error', (e) => resolve(e.detail.message));
        document.body.prepend(w);
      }));
      assert.match(message, /could not fetch .*missing\.safetensors: HTTP 404/);
      assert.equal(await widgetState(page, 'missing'), 'error');
      // the error may come before the widget's stylesheet (the box shows once it is in)
      await page.waitForFunction(() => document.getElementById('missing').shadowRoot.querySelector('.status').getBoundingClientRect().height > 0, null, { timeout: 10_000 });
      const shown = await page.$eval('#missing', (w) => {
        const s = w.shadowRoot.querySelector('.status');
        return { text: s.textContent, color: getComputedStyle(s).color, visible: s.getBoundingClientRect().height > 0 };
      });
      assert.equal(shown.text, message);
      assert.ok(shown.visible, 'the message is on screen');
      assert.equal(shown.color, 'rgb(179, 38, 30)', 'in the error colour');
      await context.close();
    });

    test('from another origin (a CDN with CORS): the script tag alone works', async () => {
      const cdn = await staticServer({ csp: false, cors: true });
      try {
        const own = server.requests.length;
        const { context, page } = await open(server, '/fixtures/blank.html');
        await page.evaluate((cdn) => {
          const w = document.createElement('nrgpt-widget');
          Object.entries({ id: 'cdn', model: `${cdn}/www/models/default.safetensors`, prompt: 'ROMEO:', length: '120', 'top-k': '20', seed: '1', loading: 'eager', autoplay: '' })
            .forEach(([k, v]) => w.setAttribute(k, v));
          document.body.append(w);
          const script = document.createElement('script');
          script.type = 'module';
          script.src = `${cdn}/www/nrgpt-widget.js`;
          document.head.append(script);
        }, cdn.url);
        await waitDone(page, 'cdn');
        await assertText(page, 'pair.html#a', 'cdn');
        assert.ok(cdn.requests.some((r) => r.path === '/www/worker.js'), 'the worker came from the CDN');
        assert.deepEqual(server.requests.slice(own).map((r) => r.path), ['/fixtures/blank.html'], 'nothing but the page from its own server');
        await context.close();
      } finally {
        await cdn.close();
      }
    });

    test('the <iframe> embed writes the same text, and embed-host.js fits each frame to its content', async () => {
      const { context, page } = await open(server, '/fixtures/iframe.html', { width: 1000, height: 1400 });
      const frames = {};
      for (const id of ['compact', 'full']) {
        frames[id] = await (await page.waitForSelector(`#${id}`)).contentFrame();
        await frames[id].waitForFunction(() => document.querySelector('nrgpt-widget')?.getAttribute('state') === 'done', null, { timeout: RUN_TIMEOUT });
        const text = await frames[id].$eval('nrgpt-widget', (w) => [...w.shadowRoot.querySelectorAll('.text .ch')].map((c) => c.textContent).join(''));
        assert.equal(text, EXPECTED['pair.html#a'], `${id}: the embed reads its settings from the URL (those of pair.html#a)`);
      }
      const fit = async (id) => {
        const content = await frames[id].evaluate(() => document.documentElement.getBoundingClientRect().height);
        await page.waitForFunction(([id, h]) => Math.abs(document.getElementById(id).getBoundingClientRect().height - h) <= 2, [id, content], { timeout: 5000 })
          .catch(() => {});
        const box = await page.$eval(`#${id}`, (f) => f.getBoundingClientRect().height);
        assert.ok(Math.abs(box - content) <= 2, `${id}: the frame (${box} px) is its content's height (${content} px)`);
        return box;
      };
      const [compact, full] = [await fit('compact'), await fit('full')];
      console.log(`[${mode}] iframe heights: compact ${compact} px, full ${full} px`);
      assert.ok(full > compact + 50, `the inspector makes the full layout taller (${full} vs ${compact} px)`);
      assert.notEqual(compact, 240, 'not the snippet\'s fixed height');
      // the content grows: the frame follows
      await frames.compact.evaluate(() => {
        const more = document.createElement('div');
        more.className = 'grown';
        more.textContent = 'more';
        more.style.height = '100px';
        document.body.append(more);
      });
      const grown = await fit('compact');
      assert.ok(Math.abs(grown - compact - 100) <= 2, `the frame grew with its content (${compact} -> ${grown} px)`);
      await context.close();
    });
  });
}

describe('widget (host page styles, themes, no scripts)', () => {
  let browser, server;
  before(async () => {
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: MODES['cpu-fallback'] });
    server = await staticServer({ csp: false });
  });
  after(async () => { await browser?.close(); await server?.close(); });

  /** The poster, fully played, and the computed style of every element in the widget; `css`: a host stylesheet added. */
  async function look(url, css) {
    const context = await browser.newContext({ viewport: { width: 800, height: 900 } });
    const page = await context.newPage();
    await page.goto(server.url + url);
    if (css) await page.addStyleTag({ url: css });
    await page.waitForFunction(() => document.getElementById('w')?.dataset.poster === 'shown', null, { timeout: 60_000 });
    const styles = await page.$eval('#w', (w) => [...w.shadowRoot.querySelectorAll('.box, .box *')].map((e) => {
      const s = getComputedStyle(e);
      return `${e.localName}.${e.getAttribute('class') ?? ''}: ${s.color} ${s.fontSize} ${s.fontFamily} ${s.fontWeight} ${s.lineHeight} ${s.display} ${s.width}`;
    }));
    const text = await page.$eval('#w', (w) => [...w.shadowRoot.querySelectorAll('.text .ch')].map((c) => c.textContent).join(''));
    const shot = await page.locator('#w').screenshot({ path: path.join(OUT, `widget-host-${css ? 'hostile' : 'plain'}.png`) });
    const hostColor = await page.$eval('body', (b) => getComputedStyle(b).color);
    await context.close();
    return { styles, text, shot, hostColor };
  }

  test('a host stylesheet `* { color: red !important; font: 3px serif !important }` changes nothing inside', async () => {
    const plain = await look('/fixtures/styled.html');
    const hostile = await look('/fixtures/styled.html', '/fixtures/hostile.css');
    assert.equal(hostile.hostColor, 'rgb(255, 0, 0)', 'the hostile stylesheet applies to the page itself');
    assert.equal(plain.text, EXPECTED['styled.html#w'], 'the poster is the recorded run of the same prompt and seed');
    assert.ok(plain.styles.length > 20, 'the widget has its elements');
    assert.equal(hostile.styles.length, plain.styles.length);
    const differ = hostile.styles.map((s, i) => [s, plain.styles[i]]).filter(([h, p]) => h !== p);
    assert.deepEqual(differ, [], 'every element inside computes the same style');
    assert.ok(hostile.shot.equals(plain.shot), 'the widget looks the same pixel for pixel');
    assert.ok(!plain.styles.some((s) => s.includes('rgb(255, 0, 0)')));
  });

  test('theme: light, dark, and auto following the reader\'s colour scheme', async () => {
    const context = await browser.newContext({ colorScheme: 'dark' });
    const page = await context.newPage();
    await page.goto(server.url + '/fixtures/styled.html');
    await page.waitForFunction(() => document.getElementById('w')?.dataset.poster);
    const look = (theme) => page.$eval('#w', (w, theme) => {
      if (theme) w.setAttribute('theme', theme); else w.removeAttribute('theme');
      const s = getComputedStyle(w.shadowRoot.querySelector('.box'));
      return `${s.backgroundColor} ${s.color}`;
    }, theme);
    const [light, dark, auto] = [await look('light'), await look('dark'), await look(null)];
    assert.equal(light, 'rgb(255, 253, 248) rgb(31, 29, 26)');
    assert.equal(dark, 'rgb(29, 27, 32) rgb(236, 230, 240)');
    assert.equal(auto, dark, 'auto follows prefers-color-scheme: dark');
    await context.close();
  });

  test('the blog demo on a phone: the GPT and the NRGPT beside it are stacked, each the column\'s width', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 800 }, isMobile: true });
    const page = await context.newPage();
    await page.goto(server.url + '/www/blog-demo.html');
    const [nrgpt, gpt, column] = await page.evaluate(() => ['#nrgpt-side', '#gpt', 'article > p'].map((sel) => {
      const r = document.querySelector(sel).getBoundingClientRect();
      return { top: r.top, bottom: r.bottom, left: r.left, width: r.width };
    }));
    assert.ok(gpt.top >= nrgpt.bottom, `stacked: the GPT (top ${gpt.top}) below the NRGPT (bottom ${nrgpt.bottom})`);
    for (const w of [nrgpt, gpt]) assert.ok(Math.abs(w.width - column.width) < 2 && Math.abs(w.left - column.left) < 2, `as wide as the text: ${JSON.stringify([w, column])}`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.equal(overflow, 0, 'nothing wider than the phone');
    await context.close();
  });

  test('the blog demo reads without scripts: the article, and each widget\'s recorded text in its place', async () => {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    await page.goto(server.url + '/www/blog-demo.html');
    assert.equal(await page.textContent('h1'), 'Language models that settle');
    const fallbacks = await page.$$eval('nrgpt-widget', (ws) => ws.map((w) => {
      const p = w.querySelector('.fallback');
      return { id: w.id, prompt: w.getAttribute('prompt'), text: p.textContent, shown: p.getBoundingClientRect().height > 0 };
    }));
    assert.equal(fallbacks.length, 4);
    for (const f of fallbacks) {
      assert.ok(f.shown, `${f.id}: the fallback is shown`);
      assert.equal(f.text, f.prompt + EXPECTED[`blog-demo.html#${f.id}`], `${f.id}: the fallback is the recorded run, the native text`);
    }
    assert.ok((await page.$$eval('article p', (ps) => ps.length)) >= 8, 'the article\'s paragraphs are there');
    await page.screenshot({ path: path.join(OUT, 'widget-blog-demo-no-js.png') });
    await context.close();
  });
});

describe('dist/ (the page under the strict CSP; a new release is never served stale)', () => {
  let browser;
  before(async () => {
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: MODES['cpu-fallback'] });
  });
  after(async () => { await browser?.close(); });

  const ready = async (page) => {
    await page.waitForSelector('#app[data-state="ready"]', { timeout: 90_000 });
    return page.textContent('#status');
  };

  test('the page from dist/ under the strict CSP: loads, writes, no violation', async () => {
    const csp = await staticServer({ csp: true });
    const context = await browser.newContext();
    await context.addInitScript(watchPage);
    const page = await context.newPage();
    const reports = [];
    page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) reports.push(m.text()); });
    try {
      await page.goto(csp.url + '/');
      assert.match(await ready(page), /^Loaded default/);
      await page.click('#generate');
      await page.waitForFunction(() => document.querySelectorAll('#output .ch').length >= 20, null, { timeout: 60_000 });
      await ready(page);
      // the characters' energy colours are custom properties, set through the CSSOM (a style attribute would be refused)
      const e = await page.$eval('#output .ch', (c) => c.style.getPropertyValue('--e'));
      assert.match(e, /^-?\d/, `a character carries its energy (--e: ${e})`);
      assert.deepEqual(await page.evaluate(() => window.__csp), [], 'no securitypolicyviolation event');
      assert.deepEqual(reports, [], 'no CSP report in the console');
      assert.ok(csp.gets('/www/boot.js') === 1, 'the page started from www/boot.js');
      // the GPT baseline is on the model list and writes
      const gpt = await page.$$eval('#model option', (os) => os.find((o) => o.textContent.startsWith('gpt '))?.value);
      assert.ok(gpt !== undefined, 'the model list offers the GPT baseline');
      await page.selectOption('#model', gpt);
      await page.waitForFunction(() => /^Loaded gpt/.test(document.querySelector('#status')?.textContent ?? ''), null, { timeout: 90_000 });
      assert.match(await ready(page), /^Loaded gpt \(gpt, 420k parameters/, 'the manifest\'s size is the checkpoint\'s');
      await page.click('#generate');
      await page.waitForFunction(() => document.querySelectorAll('#output .ch').length >= 20, null, { timeout: 60_000 });
      await ready(page);
      assert.equal(await page.$('#error'), null, 'no error with the GPT');
      assert.deepEqual(await page.evaluate(() => window.__csp), [], 'no securitypolicyviolation event with the GPT either');
    } finally {
      await context.close();
      await csp.close();
    }
  });

  test('a new release (a re-trained model): the reload uses it and the new code, not the cached old ones', async () => {
    let root = DIST;
    const host = await staticServer({ csp: false, dist: () => root });
    const context = await browser.newContext();
    const page = await context.newPage();
    const build = (dir) => fs.readFileSync(path.join(dir, 'www/nrgpt-widget.js'), 'utf8').match(/const BUILD = '([0-9a-f]+)';/)[1];
    try {
      await page.goto(host.url + '/');
      assert.match(await ready(page), /^Loaded default \(nrgpt-ff2w, 723k parameters, T = 4\)\.$/);
      await page.reload();
      assert.match(await ready(page), /723k parameters.*, from the browser cache\.$/, 'the model is in the Cache API');
      // a cache an older release left (another key scheme): the new one deletes it
      await page.evaluate(async () => (await caches.open('nrgpt-models-v1')).put('/www/models/default.safetensors?v=old', new Response('old')));
      // the host publishes the next dist/: the same URLs, another model behind default.safetensors
      root = DIST_NEXT;
      const seen = host.requests.length;
      await page.reload();
      const after = await ready(page);
      assert.match(after, /^Loaded default \(nrgpt-ff2w, 190k parameters, T = 4\)\.$/, 'the new model, downloaded');
      const wasm = host.requests.slice(seen).filter((r) => r.path === '/www/pkg/nrgpt_web_bg.wasm').map((r) => r.search);
      assert.ok(wasm.length > 0 && wasm.every((q) => q === `?v=${build(DIST_NEXT)}`), `the new build's wasm (${wasm})`);
      assert.notEqual(build(DIST), build(DIST_NEXT));
      await page.reload();
      assert.match(await ready(page), /190k parameters.*, from the browser cache\.$/);
      const cache = await page.evaluate(async () => {
        const names = await caches.keys();
        const keys = await Promise.all(names.map(async (n) => (await (await caches.open(n)).keys()).map((r) => new URL(r.url).pathname + new URL(r.url).search)));
        return { names, keys: keys.flat() };
      });
      const next = JSON.parse(fs.readFileSync(path.join(DIST_NEXT, 'www/models/manifest.json'), 'utf8')).models.find((m) => m.name === 'default').file;
      assert.deepEqual(cache, { names: ['nrgpt-models-v2'], keys: [`/www/models/${next}`] }, 'one cache, holding only the new version; the older release\'s cache is gone');
    } finally {
      await context.close();
      await host.close();
    }
  });
});
