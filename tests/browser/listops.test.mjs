// Browser test of the page's ListOps tab, run by `cargo xtask test-browser`
// (or `cargo xtask test-listops`), which serves the page and passes the
// native reference (`trainer listops-answer` on the shipped model) in the environment.
import { describe, before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set: run this through \`cargo xtask test-listops\``);
  return v;
};
const URL = env('PAGE_URL');
const EXPR = env('LISTOPS_EXPR');
// { expression, continuation, answer, truth }
const NATIVE = JSON.parse(env('LISTOPS_EXPECTED'));
const OUT = env('OUT_DIR');
fs.mkdirSync(OUT, { recursive: true });

const ARGS = ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-gpu'];

describe('the ListOps tab', () => {
  let browser, page;
  const consoleErrors = [];

  before(async () => {
    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
    page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
    page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
    page.on('pageerror', (e) => consoleErrors.push(String(e)));
    await page.goto(URL);
  });

  after(async () => {
    if (consoleErrors.length) console.log(`console errors:\n  ${consoleErrors.join('\n  ')}`);
    await browser?.close();
  });

  test('opens on its tab, hides the text tab, and loads the shipped model', async () => {
    await page.click('#tab-listops');
    assert.equal(await page.isVisible('#listops'), true);
    assert.equal(await page.isVisible('.layout'), false, 'the text tab is hidden');
    await page.waitForFunction(() => /ready$/.test(document.querySelector('#listops-status')?.textContent ?? ''), null, { timeout: 60_000 });
    assert.match(await page.textContent('#listops-status'), /^nrgpt-[a-z0-9]+ with \d+ parameters, T = \d+ steps: ready$/);
  });

  test(`answers ${EXPR} as \`trainer listops-answer\` does, with the answer's energy curve and candidates`, async () => {
    await page.fill('#listops-expr', EXPR);
    await page.click('#listops-go');
    await page.waitForSelector('#listops-answer', { timeout: 60_000 });
    const chain = (await page.textContent('#listops-chain')).trim();
    // the prompt, then what the model wrote, without the end-of-example newline
    assert.equal(chain, `${NATIVE.expression}=${NATIVE.continuation.replace(/\n$/, '')}`);
    assert.equal(await page.textContent('#listops-answer'), String(NATIVE.answer));
    assert.match(await page.textContent('#listops-truth'), new RegExp(`true value ${NATIVE.truth} ${NATIVE.answer === NATIVE.truth ? '✓' : '✗'}`));
    // the answer digit is the one inspected: one point per descent step, and a candidate row per step
    const points = await page.$$eval('#listops svg.energy .e-point', (es) => es.length);
    const rows = await page.$$eval('#listops table.cands tbody tr', (es) => es.length);
    assert.ok(points >= 2, `${points} energy points`);
    assert.equal(rows, points, 'one candidate row per step');
    const top = await page.$$eval('#listops table.cands tbody tr:last-child td.cand .cand-char', (es) => es[0].textContent);
    assert.equal(top, String(NATIVE.answer), 'the last step ranks the answer first');
    // the replay walks the steps to the last one
    await page.waitForFunction((n) => document.querySelector(`#listops .e-point[data-step="${n - 1}"]`)?.classList.contains('current'), points, { timeout: 10_000 });
    await page.screenshot({ path: path.join(OUT, 'listops-tab.png'), fullPage: true });
  });

  test('names what is wrong with a bad expression and will not answer it', async () => {
    await page.fill('#listops-expr', 'S(3 4');
    assert.match(await page.textContent('#listops-problem'), /'\(' at position 1 is never closed/);
    assert.equal(await page.isDisabled('#listops-go'), true);
    await page.fill('#listops-expr', 'S(3 a)');
    assert.match(await page.textContent('#listops-problem'), /character 'a' at position 4 is not a digit/);
    await page.fill('#listops-expr', 'N(3 4)');
    assert.equal(await page.isVisible('#listops-problem'), false);
    assert.match(await page.textContent('#listops-note'), /Outside what the model learned/);
  });

  test('"Generate one" draws a well-formed expression the tab then answers', async () => {
    await page.click('#listops-draw');
    const drawn = await page.inputValue('#listops-expr');
    assert.match(drawn, /^[SXM]\(/);
    assert.equal(await page.isVisible('#listops-problem'), false, `drawn ${drawn}`);
    await page.click('#listops-go');
    await page.waitForSelector('#listops-answer', { timeout: 60_000 });
    assert.match(await page.textContent('#listops-answer'), /^(\d$|none )/);
    assert.deepEqual(consoleErrors, []);
  });
});
