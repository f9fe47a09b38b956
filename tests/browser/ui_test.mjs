// ui_test.mjs — drives the attnd playground in headless Chromium (playwright-core) against a
// real attnd and checks what a person would see against what the API itself answers.
// Run by tests/scripts/test_ui_browser.sh, which starts two attnd and sets:
//   ATTND_URL        base URL of an attnd without API keys (e.g. http://127.0.0.1:PORT)
//   ATTND_KEYED_URL  base URL of an attnd started with --api-keys $ATTND_TEST_KEY
//   PW_MODULES       directory holding node_modules/playwright-core
//   USER_DATA_DIR    a fresh Chromium profile directory
//   SCREENSHOT       where to write the screenshot (PNG)
//   UI_FROM_SOURCE=1 serve server/ui/ through a local proxy instead of the page compiled
//                    into attnd (to try page edits without regenerating and rebuilding)
// Also checked: the output vectors beside the heatmaps equal the API's output; "copy as
// curl" and "copy as Python" produce text that, run as is (bash; Debian's python3 with
// clients/python on PYTHONPATH), answers what the page showed; the streaming view's rows,
// one per append, equal the one-shot causal request's rows and its session is deleted.
// Exits 0 only when every check passed; prints one line per check.
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.env.PW_MODULES, 'package.json'));
const { chromium } = require('playwright-core');

const ATTND = process.env.ATTND_URL;
const KEYED = process.env.ATTND_KEYED_URL;
const KEY = process.env.ATTND_TEST_KEY;
const GQA = process.env.ATTND_GQA_URL;
const ZERO = [226, 224, 220];   // app.js paints exactly-zero weights this colour
const TOL = 1e-6;
// A policy attnd may send with the UI; the proxy sends it so violations would show up.
const CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";
let failed = 0, passed = 0;

function check(ok, what, detail = '') {
  if (ok) passed++; else failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${!ok && detail ? ': ' + detail : ''}`);
  return ok;
}

async function post(body) {
  const res = await fetch(`${ATTND}/v1/models/demo/attention`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

// The page's origin: attnd itself, which serves the page at / (checked here), or with
// UI_FROM_SOURCE=1 a local server that serves server/ui/ and forwards the rest to attnd.
async function pageOrigin(base) {
  if (process.env.UI_FROM_SOURCE !== '1') {
    const res = await fetch(`${base}/`);
    const type = res.headers.get('content-type') || '';
    const html = await res.text();
    check(res.status === 200 && type.startsWith('text/html') && html.includes('/ui/app.js'),
          `attnd serves the playground at ${base}/`, `${res.status} ${type}`);
    return { url: `${base}/`, close() {} };
  }
  const files = { '/': 'index.html', '/ui/': 'index.html', '/ui/index.html': 'index.html',
                  '/ui/app.js': 'app.js', '/ui/style.css': 'style.css' };
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
  const server = http.createServer((req, res) => {
    const file = files[req.url.split('?')[0]];
    if (file) {
      res.writeHead(200, { 'Content-Type': types[path.extname(file)] + '; charset=utf-8',
                           'Content-Security-Policy': CSP });
      res.end(fs.readFileSync(path.join('server/ui', file)));
      return;
    }
    const up = http.request(`${base}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
    req.pipe(up);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  console.log(`NOTE: UI_FROM_SOURCE=1: serving server/ui/ from 127.0.0.1:${server.address().port}`);
  return { url: `http://127.0.0.1:${server.address().port}/`, close: () => server.close() };
}

function maxDiff(a, b) {
  const fa = [a].flat(Infinity), fb = [b].flat(Infinity);
  if (fa.length !== fb.length) return Infinity;
  return fa.reduce((m, x, i) => Math.max(m, Math.abs(x - fb[i])), 0);
}

// Clicks a copy button; returns the snippet shown, its kind and what the clipboard holds.
async function copyAs(page, kind) {
  await page.click(`#copy-${kind}`);
  await page.waitForFunction((k) => document.getElementById('snippet').dataset.kind === k &&
                             document.getElementById('copy-note').textContent !== '', kind);
  return page.evaluate(async () => ({
    text: document.getElementById('snippet').textContent,
    copied: document.getElementById('copy-note').dataset.copied,
    clipboard: await navigator.clipboard.readText().catch((e) => 'unreadable: ' + e.message),
  }));
}

// 9. The streaming view: T appends of one row; each step's weights row is row t of the
//    one-shot causal request's head-averaged weights, each output row its output row; the
//    canvas fills one row per step (seen part-way); the session is deleted at the end.
async function streaming(page, req, T) {
  const oneShot = await post({ ...req, average_attn_weights: true });
  await page.selectOption('#stream-delay', '150');
  await page.click('#stream-run');
  const mid = await page.waitForFunction(() => {
    const s = window.attndStream, c = document.querySelector('#stream-view canvas.cells');
    return s && s.state === 'running' && s.steps.length >= 2 && c &&
      { steps: s.steps.length, filled: Number(c.dataset.filled), rows: Number(c.dataset.rows) };
  }, null, { timeout: 10000 }).then((h) => h.jsonValue());
  check(mid.filled === mid.steps && mid.steps < T && mid.rows === T,
        'streaming view grows one row per append (seen part-way)', JSON.stringify(mid));
  await page.waitForFunction(() => window.attndStream && window.attndStream.state !== 'running',
                             null, { timeout: 20000 });
  const run = await page.evaluate(() => window.attndStream);
  check(run.state === 'done' && run.steps.length === T, `streaming session: ${T} steps done`,
        `${run.state}, ${run.steps.length} steps`);
  let worst = 0, shapes = true;
  run.steps.forEach((st, t) => {
    shapes = shapes && st.length === t + 1 && st.cached === t + 1 && st.weights.length === t + 1;
    worst = Math.max(worst, maxDiff(st.weights, oneShot.json.weights[t].slice(0, t + 1)),
                     maxDiff(st.output, oneShot.json.output[t]));
  });
  check(shapes, 'step t holds t+1 keys and answers t+1 weights');
  check(worst <= 1e-5, 'each step = row t of the one-shot causal request (weights, output)',
        `max difference ${worst}`);
  const status = await page.textContent('#stream-status');
  check(status.startsWith(`step ${T} of ${T}`), 'stream status names the last step', status);
  const gone = await fetch(`${ATTND}/v1/sessions/${run.id}`);
  check(run.deleted && gone.status === 404, 'the streaming session is deleted afterwards',
        `deleted ${run.deleted}, GET ${gone.status}`);
}

async function runAndWait(page) {
  const before = await page.evaluate(() => (window.attndLast ? window.attndLast.seq : 0));
  await page.click('#run');
  await page.waitForFunction((n) => window.attndLast && window.attndLast.seq > n, before,
                             { timeout: 10000 });
  return page.evaluate(() => window.attndLast);
}

// Moves the mouse to the centre of cell (row, col) of map `head`; returns the tooltip.
async function hoverCell(page, head, row, col) {
  const canvas = page.locator(`#maps canvas.cells[data-head="${head}"]`);
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const cell = Number(await canvas.getAttribute('data-cell'));
  const cellW = Number(await canvas.getAttribute('data-cell-w') || cell);   // output: narrow
  await page.mouse.move(box.x + (col + 0.5) * cellW, box.y + (row + 0.5) * cell);
  await page.waitForFunction(([h, r, c]) => {
    const t = document.getElementById('tooltip');
    return !t.hidden && t.dataset.head === h && t.dataset.row === r && t.dataset.col === c;
  }, [String(head), String(row), String(col)], { timeout: 3000 }).catch(async (e) => {
    const t = await page.evaluate(() => ({ ...document.getElementById('tooltip').dataset }));
    throw new Error(`no tooltip for ${head} (${row},${col}); tooltip ${JSON.stringify(t)}; ${e.message}`);
  });
  return page.evaluate(() => {
    const t = document.getElementById('tooltip');
    return { value: Number(t.dataset.value), text: t.querySelector('.v').textContent };
  });
}

// 7. A server with API keys: the page itself loads, the API's 401 shows and points at the
//    key field, and a key typed there is sent as a bearer token and lets a run through.
async function keyedServer(context) {
  const origin = await pageOrigin(KEYED);
  const page = await context.newPage();
  try {
    await page.goto(origin.url);
    await page.waitForSelector('#error:not([hidden])', { timeout: 10000 });
    const box = await page.evaluate(() => { const e = document.getElementById('error');
      return { status: e.dataset.status, code: e.dataset.code, text: e.textContent,
               wanted: document.getElementById('apikey-box').classList.contains('wanted') }; });
    check(box.status === '401' && box.code === 'unauthorized' && box.wanted,
          'keyed server: 401 shown and the API key field asked for', JSON.stringify(box));
    const modelsReq = page.waitForRequest((r) => r.url().endsWith('/v1/models'), { timeout: 5000 });
    await page.fill('#apikey', KEY);
    await page.press('#apikey', 'Tab');   // commits the field: 'change'
    const r = await modelsReq;
    check(r.headers().authorization === `Bearer ${KEY}`, 'API key sent as Authorization: Bearer',
          String(r.headers().authorization));
    await page.waitForSelector('#models tr.model[data-model="demo"]', { timeout: 10000 });
    check(await page.locator('#error').isHidden(), 'keyed server: error cleared once the key is in');
    const last = await runAndWait(page);
    check(last.status === 200 && Array.isArray(last.weights) && last.weights.length === 8,
          'keyed server: a run with the key answers 200 with 8 heads', `status ${last.status}`);
  } finally {
    await page.close();
    origin.close();
  }
}

// 8. A grouped-query checkpoint (tests/fixtures/ckpt/llama_gqa: 4 heads, 2 KV heads, RoPE):
//    the model table shows family, kv heads and RoPE; the heatmaps sit in one line per KV
//    head, each titled with the KV head it reads.
async function gqaServer(context) {
  const origin = await pageOrigin(GQA);
  const page = await context.newPage();
  try {
    await page.goto(origin.url);
    await page.waitForSelector('#models tr.model[data-model="llama"]', { timeout: 10000 });
    const dims = await page.$$eval('#models tr.model[data-model="llama"] td[data-k]',
      (tds) => Object.fromEntries(tds.map((td) => [td.dataset.k, td.textContent])));
    check(dims.family === 'llama' && dims.num_heads === '4' && dims.num_kv_heads === '2' &&
          dims.rope.startsWith('half'), 'GQA model row: llama, 4 heads, 2 kv, RoPE half',
          JSON.stringify(dims));
    await page.click('#models tr.model[data-model="llama"] input[type=radio]');
    const last = await runAndWait(page);
    check(last.status === 200 && Array.isArray(last.weights) && last.weights.length === 4,
          'GQA model: a run answers 4 heads', `status ${last.status}`);
    const layout = await page.evaluate(() => {
      const kids = [...document.getElementById('maps').children];
      return kids.map((k) => (k.tagName === 'FIGURE' ? k.querySelector('h3').firstChild.textContent
                                                     : '|'));
    });
    check(JSON.stringify(layout) === JSON.stringify(
            ['Average of 4 heads', 'Output', '|', 'Head 0 · KV 0', 'Head 1 · KV 0', '|',
             'Head 2 · KV 1', 'Head 3 · KV 1', '|']),
          'GQA heads grouped by the KV head they share, one line per group', JSON.stringify(layout));
  } finally {
    await page.close();
    origin.close();
  }
}

async function main() {
  const origin = await pageOrigin(ATTND);
  const context = await chromium.launchPersistentContext(process.env.USER_DATA_DIR, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 1000 },
    permissions: ['clipboard-read', 'clipboard-write'],
  });
  const pageErrors = [];
  try {
    const page = context.pages()[0] || await context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('console', (m) => {   // 4xx answers are expected below; Chromium logs each one
      if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(m.text());
    });
    const offsite = [];
    page.on('request', (r) => { if (!r.url().startsWith(origin.url.replace(/\/$/, '')) &&
                                    !r.url().startsWith('data:')) offsite.push(r.url()); });

    // 1. The model list shows demo with its dimensions.
    await page.goto(origin.url);
    await page.waitForSelector('#models tr.model[data-model="demo"]', { timeout: 10000 });
    const dims = await page.$$eval('#models tr.model[data-model="demo"] td[data-k]',
      (tds) => Object.fromEntries(tds.map((td) => [td.dataset.k, td.textContent])));
    check(dims.embed_q === '64' && dims.embed_k === '64' && dims.embed_out === '64',
          'model list shows demo with E = 64', JSON.stringify(dims));
    check(dims.num_heads === '8' && dims.head_dim_k === '8', 'model list shows 8 heads of 8',
          JSON.stringify(dims));
    await page.waitForFunction(() => window.attndLast && window.attndLast.seq >= 1, null,
                               { timeout: 10000 });   // the first automatic run

    // 2. A structured causal sequence: pattern of period 4, T = 12.
    const T = 12;
    await page.selectOption('#gen-kind', 'pattern');
    await page.fill('#gen-length', String(T));
    await page.fill('#gen-period', '4');
    await page.fill('#opt-window', '0');
    await page.fill('#opt-padding', '0');
    await page.check('#opt-causal');
    const last = await runAndWait(page);
    check(last.status === 200, 'causal run answers 200', `status ${last.status}`);
    const req = last.request;
    check(req.is_causal === true && req.need_weights === true && req.average_attn_weights === false
          && req.query.length === T && req.query[0].length === 64,
          'request: causal, per-head weights, T×64 query');
    const rows = req.query.map((r) => JSON.stringify(r));
    check(rows[0] === rows[4] && rows[1] === rows[9] && rows[0] !== rows[1],
          'structured sequence: equal tokens have equal vectors');

    // The same request, sent by the test itself.
    const mine = await post(req);
    check(mine.status === 200 && mine.json.weights.length === 8, 'test\'s own request answers 8 heads');
    const W = mine.json.weights;   // (8, T, T)

    // 3. Every head: nothing above the diagonal, in the API and in the canvas pixels.
    let above = 0;
    W.forEach((m) => m.forEach((row, i) => row.forEach((w, j) => { if (j > i && w !== 0) above++; })));
    check(above === 0, 'API weights are 0 above the diagonal', `${above} non-zero`);
    const pix = await page.evaluate(([W, ZERO]) => {
      const out = [];
      for (const head of ['avg', ...W.map((_, h) => String(h))]) {
        const c = document.querySelector(`#maps canvas.cells[data-head="${head}"]`);
        if (!c) { out.push({ head, missing: true }); continue; }
        const cell = Number(c.dataset.cell) * (c.width / c.clientWidth);
        const img = c.getContext('2d').getImageData(0, 0, c.width, c.height);
        let aboveLit = 0, belowZero = 0, cells = 0;
        const T = Number(c.dataset.rows);
        for (let i = 0; i < T; i++) {
          for (let j = 0; j < Number(c.dataset.cols); j++) {
            const x = Math.floor((j + 0.5) * cell), y = Math.floor((i + 0.5) * cell);
            const p = (y * img.width + x) * 4;
            const isZero = img.data[p] === ZERO[0] && img.data[p + 1] === ZERO[1] && img.data[p + 2] === ZERO[2];
            const w = head === 'avg' ? W.reduce((a, m) => a + m[i][j], 0) : W[Number(head)][i][j];
            if (j > i && !isZero) aboveLit++;
            if (w > 0 && isZero) belowZero++;
            cells++;
          }
        }
        out.push({ head, rows: T, cols: Number(c.dataset.cols), aboveLit, belowZero, cells });
      }
      return out;
    }, [W, ZERO]);
    for (const p of pix) {
      check(!p.missing && p.rows === T && p.cols === T && p.aboveLit === 0 && p.belowZero === 0,
            `heatmap ${p.head}: ${T}×${T}, blank above the diagonal, coloured where weight > 0`,
            JSON.stringify(p));
    }

    // 4. Hover shows the API's weight for (head, row, col).
    for (const [h, r, c] of [[0, T - 1, 0], [3, 5, 1], [7, T - 1, T - 1], [5, 2, 2], [2, 0, 0]]) {
      const tip = await hoverCell(page, h, r, c);
      const want = W[h][r][c];
      check(Math.abs(tip.value - want) <= TOL && Math.abs(Number(tip.text) - want) <= 5e-7 + TOL,
            `tooltip head ${h} (${r},${c}) = API weight ${want}`, `shown ${tip.text} / ${tip.value}`);
    }
    const avgWant = W.reduce((a, m) => a + m[T - 1][2], 0) / 8;
    const avgTip = await hoverCell(page, 'avg', T - 1, 2);
    check(Math.abs(avgTip.value - avgWant) <= TOL, `average map (${T - 1},2) = mean over heads`,
          `shown ${avgTip.value}, want ${avgWant}`);

    // 5. Row sums read 1.000 on every map, and the timing is shown.
    const sums = await page.$$eval('#maps .rowsums span', (s) => s.map((x) => x.textContent));
    check(sums.length === 9 * T && sums.every((s) => s === '1.000'), 'every row sum shows 1.000',
          `${sums.length} sums: ${[...new Set(sums)].join(' ')}`);
    const timing = await page.$$eval('#timing .chip', (cs) =>
      Object.fromEntries(cs.map((c) => [c.dataset.k, c.querySelector('b').textContent])));
    check(/^\d+(\.\d+)? (µs|ms)$/.test(timing.queue_us || '') &&
          /^\d+(\.\d+)? (µs|ms)$/.test(timing.compute_us || '') && Number(timing.batch_size) >= 1,
          'timing shows queue_us, compute_us, batch_size', JSON.stringify(timing));

    // 5b. The output vectors beside the heatmaps: T × 64, hover = the API's output value.
    const outDims = await page.evaluate(() => {
      const c = document.querySelector('#maps canvas.cells[data-head="output"]');
      return c && { rows: Number(c.dataset.rows), cols: Number(c.dataset.cols) };
    });
    check(outDims && outDims.rows === T && outDims.cols === 64, `output map: ${T}×64`,
          JSON.stringify(outDims));
    for (const [r, c] of [[3, 10], [T - 1, 63], [0, 0]]) {
      const tip = await hoverCell(page, 'output', r, c);
      const want = mine.json.output[r][c];
      check(Math.abs(tip.value - want) <= TOL, `output (${r},${c}) = API output ${want}`,
            `shown ${tip.value}`);
    }

    // 5c. Copy as curl / as Python: the text runs as is and answers what the page shows.
    const curl = await copyAs(page, 'curl');
    check(curl.copied === 'true' && curl.clipboard === curl.text, 'copy as curl: on the clipboard',
          `copied ${curl.copied}; clipboard ${curl.clipboard.slice(0, 80)}`);
    let got = null;
    try {
      got = JSON.parse(execFileSync('bash', ['-c', curl.text], { encoding: 'utf8', timeout: 20000 }));
    } catch (e) { got = { error: String(e.message || e) }; }
    check(got && maxDiff(got.weights, W) === 0 && maxDiff(got.output, mine.json.output) === 0,
          'copy as curl: runs in bash and answers the same weights and output',
          JSON.stringify(got).slice(0, 300));
    const py = await copyAs(page, 'python');
    check(py.text.includes('import attnd') && py.text.includes('is_causal=True') &&
          py.clipboard === py.text, 'copy as Python: uses the attnd client, on the clipboard',
          py.text.slice(0, 200));
    try {
      const extra = '\nimport json; print("@@" + json.dumps({"output": r.output, "weights": r.weights}))\n';
      const out = execFileSync(process.env.PYTHON || '/usr/bin/python3', ['-c', py.text + extra], {
        encoding: 'utf8', timeout: 30000, maxBuffer: 1 << 26,
        env: { ...process.env, PYTHONPATH: path.resolve('clients/python') },
      });
      got = JSON.parse(out.slice(out.lastIndexOf('@@') + 2));
    } catch (e) { got = { error: String(e.message || e) }; }
    check(got && maxDiff(got.weights, W) <= 1e-7 && maxDiff(got.output, mine.json.output) <= 1e-7,
          'copy as Python: runs and answers the same weights and output',
          JSON.stringify(got).slice(0, 300));

    await streaming(page, req, T);

    await hoverCell(page, 3, 7, 3);   // a tooltip in the picture
    await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });

    // 6. Errors: the API's own error for a wrong-width query and a negative window; a
    //    browser-side message for JSON that does not parse.
    await page.click('#tab-paste');
    await page.fill('#json-query', '[[0.5, 1, 2], [1, 2, 3]]');
    let bad = await runAndWait(page);
    let theirs = await post(bad.request);
    let box = await page.evaluate(() => { const e = document.getElementById('error');
      return { hidden: e.hidden, code: e.dataset.code, field: e.dataset.field, text: e.textContent }; });
    check(!box.hidden && theirs.status === 400 && box.code === theirs.json.error.code &&
          box.field === theirs.json.error.field && box.text.includes(theirs.json.error.message) &&
          box.text.includes('400'),
          `wrong-width query shows the API's error (${theirs.json.error.code} at ${theirs.json.error.field})`,
          JSON.stringify(box));
    check((await page.$$('#maps canvas')).length === 0, 'no stale heatmaps after an error');

    await page.fill('#json-query', '[[0.5, 1, 2');
    await runAndWait(page);
    box = await page.evaluate(() => { const e = document.getElementById('error');
      return { hidden: e.hidden, source: e.dataset.source, code: e.dataset.code, text: e.textContent }; });
    check(!box.hidden && box.source === 'browser' && box.code === 'invalid_json' &&
          box.text.includes('not JSON'), 'malformed JSON shows a parse error', JSON.stringify(box));

    await page.click('#tab-generate');
    await page.fill('#opt-window', '-1');
    bad = await runAndWait(page);
    theirs = await post(bad.request);
    box = await page.evaluate(() => { const e = document.getElementById('error');
      return { hidden: e.hidden, code: e.dataset.code, field: e.dataset.field, text: e.textContent }; });
    check(!box.hidden && theirs.status === 400 && box.code === theirs.json.error.code &&
          box.field === 'window' && box.text.includes(theirs.json.error.message),
          'negative window shows the API\'s error', JSON.stringify(box));

    check(offsite.length === 0, 'no request leaves the page\'s origin', offsite.join(' '));
    check(pageErrors.length === 0, 'no script errors in the page', pageErrors.join(' | '));
    await keyedServer(context);
    await gqaServer(context);
  } finally {
    await context.close();
    origin.close();
  }
  console.log(`${passed} checks, ${failed} failed`);
  return failed === 0 && passed > 0 ? 0 : 1;
}

main().then((rc) => process.exit(rc), (e) => { console.error('ERROR', e); process.exit(1); });
