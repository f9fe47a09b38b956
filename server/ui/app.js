/* app.js — the attnd playground: lists models (GET /v1/models), builds one query sequence
   (generated or pasted), runs POST /v1/models/{name}/attention with per-head weights and
   draws one heatmap per head plus their average, and the output vectors beside them; copies
   the request as a curl command or as Python (the attnd client); streams the same rows
   through a session one position per append, drawing each step's weights row as it comes.
   Plain browser JavaScript, no libraries.
   For tests: window.attndLast = {seq, request, status, response, weights, average, output};
   each heatmap canvas has data-head ("avg", "output" or 0..h-1), data-rows, data-cols,
   data-cell (CSS px; data-cell-w when cells are not square); #tooltip carries
   data-head/-row/-col/-value of the hovered cell; #error data-code/-field; #snippet
   data-kind ("curl"/"python") holds the last copied text; window.attndStream = {state
   ("running"/"done"/"error"), id, steps: [{length, cached, weights, output}], deleted}. */
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const KEY_STORE = 'attnd.apikey';

  const state = {
    models: [],       /* ModelInfo objects from GET /v1/models */
    model: null,      /* the selected ModelInfo */
    view: null,       /* what the heatmaps show: {heads, average, qLabels, kLabels, T, S} */
    zoomTouched: false,
    seq: 0,
  };

  /* ------------------------------------------------------------------ API */

  function authHeaders() {
    const key = $('apikey').value.trim();
    return key ? { Authorization: 'Bearer ' + key } : {};
  }

  /* One request. Resolves to {status, json, text, ms}; status 0 when the server could not be
     reached (text then says why). Never rejects. */
  async function api(method, path, body) {
    const init = { method, headers: authHeaders(), cache: 'no-store' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = body;
    }
    const t0 = performance.now();
    try {
      const res = await fetch(path, init);
      const text = await res.text();
      let json = null;
      try { json = JSON.parse(text); } catch (e) { /* not JSON: shown as text */ }
      return { status: res.status, json, text, ms: performance.now() - t0 };
    } catch (e) {
      return { status: 0, json: null, text: String(e.message || e), ms: performance.now() - t0 };
    }
  }

  /* {code, message, field} from an API error response, or a stand-in for odd ones. */
  function apiError(r) {
    const e = r.json && r.json.error;
    if (e && typeof e === 'object')
      return { code: e.code || '', message: e.message || '', field: e.field || '' };
    if (r.status === 0)
      return { code: 'unreachable', message: 'could not reach attnd: ' + r.text, field: '' };
    return { code: 'http_' + r.status, message: r.text.slice(0, 300), field: '' };
  }

  /* --------------------------------------------------------- error and status */

  function showError(source, status, err, boxId = 'error') {
    const box = $(boxId);
    box.replaceChildren();
    box.dataset.source = source;
    box.dataset.status = String(status);
    box.dataset.code = err.code;
    box.dataset.field = err.field;
    const head = el('span', 'code', (status ? status + ' ' : '') + err.code);
    box.append(head);
    if (err.field) box.append(' at ', el('span', 'field', err.field));
    if (source === 'browser') box.append(el('span', 'muted', '  (checked in the browser, not sent)'));
    box.append(el('span', 'msg', err.message));
    box.hidden = false;
    $('apikey-box').classList.toggle('wanted', status === 401);
    if (status === 401) $('apikey').focus();
  }

  function clearError() {
    $('error').hidden = true;
    $('apikey-box').classList.remove('wanted');
  }

  function setStatus(kind, text) {
    $('server-status').dataset.state = kind;
    $('server-status').textContent = text;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* --------------------------------------------------------------- models */

  async function loadModels() {
    const r = await api('GET', '/v1/models');
    if (r.status === 503) {
      setStatus('unknown', 'models loading…');
      setTimeout(loadModels, 1000);
      return false;
    }
    if (r.status !== 200 || !r.json || !Array.isArray(r.json.models)) {
      setStatus('error', r.status ? 'error ' + r.status : 'unreachable');
      showError('api', r.status, apiError(r));
      return false;
    }
    state.models = r.json.models;
    const keep = state.model && state.models.find((m) => m.name === state.model.name);
    state.model = keep || state.models[0] || null;
    setStatus('ready', `ready · ${state.models.length} model${state.models.length === 1 ? '' : 's'}`);
    renderModels();
    updateGenerator();
    return true;
  }

  function renderModels() {
    const body = $('models').tBodies[0];
    body.replaceChildren();
    if (!state.models.length) {
      const td = el('td', 'muted', 'no models loaded');
      td.colSpan = 11;
      body.append(el('tr')).append(td);
      return;
    }
    for (const m of state.models) {
      const tr = el('tr', 'model' + (m === state.model ? ' selected' : ''));
      tr.dataset.model = m.name;
      const radio = el('input');
      radio.type = 'radio';
      radio.name = 'model';
      radio.checked = m === state.model;
      radio.setAttribute('aria-label', m.name);
      const pick = el('td');
      pick.append(radio);
      tr.append(pick, el('td', 'name', m.name));
      const rope = (r) => (r ? `${r.style} θ=${r.theta}` + (r.scaling ? ` ${r.scaling.type}` : '') : '–');
      for (const k of ['family', 'num_heads', 'num_kv_heads', 'head_dim_k', 'head_dim_v', 'embed_q',
                       'embed_k', 'embed_v', 'embed_out', 'rope', 'dtype', 'param_count']) {
        const text = k === 'rope' ? rope(m.rope) : m[k] === undefined ? '–' : String(m[k]);
        const td = el('td', '', text);
        td.dataset.k = k;
        tr.append(td);
      }
      tr.addEventListener('click', () => {
        state.model = m;
        renderModels();
        updateGenerator();
      });
      body.append(tr);
    }
  }

  /* ------------------------------------------------------------ generator */

  /* Deterministic PRNG (mulberry32) and string hash (FNV-1a) so a token's vector depends
     only on (seed, token): equal tokens get equal vectors. */
  function mulberry32(a) {
    return () => {
      a = (a + 0x6d2b79f5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function fnv1a(s) {
    let h = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
    return h >>> 0;
  }

  /* dim numbers ~ N(0, 1), rounded to 3 decimals (short bodies, exact round trips). */
  function tokenVector(seed, token, dim) {
    const rnd = mulberry32(fnv1a(seed + '\u0000' + token));
    const v = new Array(dim);
    for (let i = 0; i < dim; i++) {
      const u = Math.max(rnd(), 1e-12), w = rnd();
      v[i] = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * w);
    }
    return v;
  }

  function letterName(id) {
    return id < 26 ? String.fromCharCode(65 + id) : 't' + id;
  }

  /* The generator's tokens and labels from the form: {tokens: string[], labels: string[]}. */
  function generatorTokens() {
    const kind = $('gen-kind').value;
    if (kind === 'text') {
      const words = $('gen-text').value.trim().split(/\s+/).filter(Boolean);
      return { tokens: words, labels: words };
    }
    const T = clampInt($('gen-length').value, 1, 256, 16);
    const period = clampInt($('gen-period').value, 1, 256, 4);
    const tokens = [], labels = [];
    for (let t = 0; t < T; t++) {
      const id = kind === 'pattern' ? t % period : t;
      tokens.push('#' + id);
      labels.push(kind === 'pattern' ? letterName(id) : String(t));
    }
    return { tokens, labels };
  }

  /* T×dim query rows for the tokens; optional sinusoidal positions added. */
  function generateQuery(tokens, dim) {
    const seed = String($('gen-seed').value);
    const positions = $('gen-positions').checked;
    const cache = new Map();
    return tokens.map((tok, t) => {
      if (!cache.has(tok)) cache.set(tok, tokenVector(seed, tok, dim));
      return cache.get(tok).map((x, i) => {
        if (positions) {
          const f = Math.pow(10000, -2 * Math.floor(i / 2) / dim);
          x += i % 2 ? Math.cos(t * f) : Math.sin(t * f);
        }
        return Math.round(x * 1000) / 1000;
      });
    });
  }

  function clampInt(s, lo, hi, dflt) {
    const n = Number.parseInt(s, 10);
    return Number.isFinite(n) ? Math.min(hi, Math.max(lo, n)) : dflt;
  }

  function updateGenerator() {
    const pane = $('pane-generate');
    pane.dataset.kind = $('gen-kind').value;
    const { tokens, labels } = generatorTokens();
    const dim = state.model ? state.model.embed_q : '?';
    const distinct = new Set(tokens).size;
    const shown = labels.slice(0, 24).join(' ') + (labels.length > 24 ? ' …' : '.');
    $('gen-summary').textContent =
      `T = ${tokens.length} tokens (${distinct} distinct) of ${dim} numbers: ${shown}` +
      (distinct < tokens.length
        ? ' Equal tokens get equal vectors, so their keys are identical and share a query\'s weight.'
        : '');
    $('opt-labels').placeholder = labels.slice(0, 12).join(' ') + (labels.length > 12 ? ' …' : '');
  }

  /* -------------------------------------------------------- request build */

  function activePane() {
    return $('pane-paste').hidden ? 'generate' : 'paste';
  }

  /* Parses one textarea. Returns {value} (undefined when empty) or {error}. */
  function parseField(id, name) {
    const text = $(id).value.trim();
    if (!text) return { value: undefined };
    try {
      return { value: JSON.parse(text) };
    } catch (e) {
      return { error: { code: 'invalid_json', field: name, message: `${name} is not JSON: ${e.message}` } };
    }
  }

  /* Reads the input form. Returns {request, qLabels, kLabels} or {error} (a browser-side
     problem the API would not see: unparsable JSON, no model, no rows). Values the API can
     judge (widths, window, ...) are sent as typed so its own error comes back. */
  function buildRequest() {
    if (!state.model) return { error: { code: 'no_model', field: '', message: 'no model is selected' } };
    let query, key, value, autoLabels = null;
    if (activePane() === 'generate') {
      const g = generatorTokens();
      if (!g.tokens.length) return { error: { code: 'empty', field: 'query', message: 'type at least one word' } };
      query = generateQuery(g.tokens, state.model.embed_q);
      autoLabels = g.labels;
    } else {
      const parsed = ['query', 'key', 'value'].map((f) => parseField('json-' + f, f));
      const bad = parsed.find((p) => p.error);
      if (bad) return { error: bad.error };
      [query, key, value] = parsed.map((p) => p.value);
      if (query && !Array.isArray(query) && typeof query === 'object') {
        ({ query, key, value } = query);  /* a whole request object was pasted */
      }
      if (query === undefined) return { error: { code: 'empty', field: 'query', message: 'paste a query: T rows of numbers' } };
      if (Array.isArray(query) && Array.isArray(query[0]) && Array.isArray(query[0][0]))
        return { error: { code: 'batch', field: 'query', message: 'the playground shows one sequence: paste T×E, not B×T×E' } };
    }
    const request = { query };
    if (key !== undefined) request.key = key;
    if (value !== undefined) request.value = value;
    request.need_weights = true;
    request.average_attn_weights = false;
    if ($('opt-causal').checked) request.is_causal = true;
    const win = $('opt-window').value.trim();
    if (win !== '' && Number(win) !== 0) request.window = Number(win);
    const T = Array.isArray(query) ? query.length : 0;
    const S = Array.isArray(key) ? key.length : T;
    const pad = clampInt($('opt-padding').value, 0, 1 << 30, 0);
    if (pad > 0) request.key_padding_mask = Array.from({ length: S }, (_, j) => j >= S - pad);
    const typed = $('opt-labels').value.trim().split(/\s+/).filter(Boolean);
    const qLabels = labelList(typed.length ? typed : autoLabels, T);
    const kLabels = key === undefined ? qLabels : labelList(null, S);
    return { request, qLabels, kLabels };
  }

  /* n labels: the given ones, positions where missing. */
  function labelList(given, n) {
    return Array.from({ length: n }, (_, i) => (given && given[i] !== undefined ? given[i] : String(i)));
  }

  /* ------------------------------------------------------------------ run */

  async function run() {
    const built = buildRequest();
    const seq = ++state.seq;
    if (built.error) {
      window.attndLast = { seq, request: null, status: 0, response: null, error: built.error };
      showError('browser', 0, built.error);
      return;
    }
    const button = $('run');
    button.disabled = true;
    $('run-hint').textContent = 'running…';
    const path = '/v1/models/' + encodeURIComponent(state.model.name) + '/attention';
    state.shown = { model: state.model.name, request: built.request };
    $('copy-row').hidden = false;
    const r = await api('POST', path, JSON.stringify(built.request));
    button.disabled = false;
    $('run-hint').textContent = '';
    const last = { seq, request: built.request, status: r.status, response: r.json, roundtrip_ms: r.ms };
    if (r.status !== 200 || !r.json) {
      window.attndLast = last;
      showError('api', r.status, apiError(r));
      clearMaps();
      return;
    }
    const heads = r.json.weights;
    const h = state.model.num_heads;
    if (!Array.isArray(heads) || heads.length !== h || !Array.isArray(heads[0])) {
      window.attndLast = last;
      showError('browser', r.status, { code: 'bad_response', field: 'weights',
        message: `expected ${h} per-head weight matrices in the response` });
      clearMaps();
      return;
    }
    clearError();
    last.weights = heads;
    last.average = averageHeads(heads);
    last.output = Array.isArray(r.json.output) ? r.json.output : null;
    window.attndLast = last;
    const T = heads[0].length, S = T ? heads[0][0].length : 0;
    state.view = { heads, average: last.average, output: last.output, qLabels: built.qLabels,
                   kLabels: built.kLabels, T, S };
    renderTiming(r.json.timing || {}, r.ms, h, T, S);
    renderMaps();
  }

  /* Mean over heads: (h, T, S) -> (T, S), as PyTorch's average_attn_weights=True. */
  function averageHeads(heads) {
    const h = heads.length;
    return heads[0].map((row, t) => row.map((_, s) => {
      let sum = 0;
      for (let k = 0; k < h; k++) sum += heads[k][t][s];
      return sum / h;
    }));
  }

  function renderTiming(timing, ms, h, T, S) {
    const box = $('timing');
    box.replaceChildren();
    const chip = (k, label, value) => {
      const c = el('span', 'chip');
      c.dataset.k = k;
      c.append(label + ' ', el('b', '', value));
      box.append(c);
    };
    chip('shape', 'weights', `${h} × ${T} × ${S}`);
    chip('queue_us', 'queue', fmtUs(timing.queue_us));
    chip('compute_us', 'compute', fmtUs(timing.compute_us));
    chip('batch_size', 'batch size', timing.batch_size === undefined ? '–' : String(timing.batch_size));
    chip('roundtrip', 'round trip', ms.toFixed(1) + ' ms');
    box.hidden = false;
  }

  function fmtUs(us) {
    if (typeof us !== 'number') return '–';
    return us >= 10000 ? (us / 1000).toFixed(1) + ' ms' : us + ' µs';
  }

  /* ------------------------------------------------------------- heatmaps */

  /* ColorBrewer "Blues"; exactly-zero weights (masked keys) get a neutral grey instead. */
  const STOPS = ['#f7fbff', '#deebf7', '#c6dbef', '#9ecae1', '#6baed6', '#4292c6', '#2171b5', '#08519c', '#08306b']
    .map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
  const ZERO = [226, 224, 220];

  function colour(w, vmax) {
    if (w === 0 || !(vmax > 0)) return ZERO;
    const x = Math.min(1, Math.max(0, w / vmax)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x)), f = x - i;
    return STOPS[i].map((c, k) => Math.round(c + (STOPS[i + 1][k] - c) * f));
  }

  const rgb = (c) => `rgb(${c[0]},${c[1]},${c[2]})`;

  function matrixMax(m) {
    let v = 0;
    for (const row of m) for (const w of row) if (w > v) v = w;
    return v;
  }

  function autoCell(T, S) {
    return Math.max(3, Math.min(22, Math.floor(200 / Math.max(T, S, 1))));
  }

  function clearMaps() {
    state.view = null;
    unhover();
    $('maps').replaceChildren();
    $('legend-row').hidden = true;
    $('howto').hidden = true;
    $('timing').hidden = true;
    $('empty-note').hidden = false;
  }

  function renderMaps() {
    const v = state.view;
    if (!v) return;
    const cell = state.zoomTouched ? Number($('zoom').value) : autoCell(v.T, v.S);
    if (!state.zoomTouched) $('zoom').value = String(cell);
    const mode = $('scale').value;
    /* Grouped-query attention: query heads that share a KV head sit together, each
     * group on its own line, titled with the KV head they read. */
    const h = v.heads.length;
    const g = (state.model && state.model.num_kv_heads) || h;
    const group = g < h && h % g === 0 ? h / g : 0;
    const all = [{ head: 'avg', title: `Average of ${h} heads`, m: v.average }]
      .concat(v.heads.map((m, i) => ({
        head: String(i),
        title: group ? `Head ${i} · KV ${Math.floor(i / group)}` : `Head ${i}`,
        m,
      })));
    const shared = Math.max(...all.map((x) => matrixMax(x.m)));
    const maps = $('maps');
    unhover();
    maps.replaceChildren();
    for (const x of all) {
      const vmax = mode === 'one' ? 1 : mode === 'each' ? matrixMax(x.m) : shared;
      const c = x.head === 'avg' ? Math.max(cell, Math.round(cell * 1.5)) : cell;
      maps.append(mapFigure(x, c, vmax, v));
      if (x.head === 'avg' && v.output) maps.append(outputFigure(v, c));
      if (x.head === 'avg') maps.append(el('div', 'break'));  /* heads start a new line */
      else if (group && (Number(x.head) + 1) % group === 0) maps.append(el('div', 'break'));
    }
    renderLegend(mode === 'one' ? 1 : mode === 'shared' ? shared : null);
    $('legend-row').hidden = false;
    $('howto').hidden = false;
    $('empty-note').hidden = true;
  }

  /* One heatmap: title, key labels on top, query labels left, cells, row sums right. */
  function mapFigure(x, cell, vmax, v) {
    const fig = el('figure', 'map' + (x.head === 'avg' ? ' average' : ''));
    fig.dataset.head = x.head;
    const title = el('h3', '', x.title);
    title.append(el('span', 'muted', 'max ' + matrixMax(x.m).toFixed(3)));
    fig.append(title);
    const grid = el('div', 'grid');
    const font = Math.max(8, Math.min(11, cell - 1));
    grid.append(el('div', 'corner', 'q╲k'), xAxis(v.kLabels, cell, font), el('div', 'sumhead', 'Σ row'));
    const wrap = el('div', 'cellwrap');
    const cells = cellsCanvas(x, cell, vmax);
    const overlay = sizedCanvas(cells.width / dpr(), cells.height / dpr());
    overlay.className = 'overlay';
    wrap.append(cells, overlay);
    grid.append(yAxis(v.qLabels, cell, font), wrap, rowSums(x.m, cell, font));
    fig.append(grid);
    if (cell < 9) fig.append(el('div', 'sumnote', sumSummary(x.m)));
    return fig;
  }

  const dpr = () => window.devicePixelRatio || 1;

  /* A canvas of w×h CSS px backed by w·dpr × h·dpr pixels; returns it with ctx scaled. */
  function sizedCanvas(w, h) {
    const c = document.createElement('canvas');
    c.width = Math.max(1, Math.round(w * dpr()));
    c.height = Math.max(1, Math.round(h * dpr()));
    c.style.width = w + 'px';
    c.style.height = h + 'px';
    c.getContext('2d').scale(dpr(), dpr());
    return c;
  }

  /* m: (T, S) weights -> T·cell × S·cell canvas, one flat square per weight. */
  function cellsCanvas(x, cell, vmax) {
    const T = x.m.length, S = T ? x.m[0].length : 0;
    const c = sizedCanvas(S * cell, T * cell);
    c.className = 'cells';
    Object.assign(c.dataset, { head: x.head, rows: T, cols: S, cell, vmax });
    c.setAttribute('role', 'img');
    c.setAttribute('aria-label', `${x.title}: ${T} queries by ${S} keys`);
    const ctx = c.getContext('2d');
    for (let t = 0; t < T; t++) {
      for (let s = 0; s < S; s++) {
        ctx.fillStyle = rgb(colour(x.m[t][s], vmax));
        ctx.fillRect(s * cell, t * cell, cell, cell);
      }
    }
    c.addEventListener('mousemove', (e) => hover(e, c, x));
    c.addEventListener('mouseleave', unhover);
    return c;
  }

  /* --------------------------------------------------------- output vectors */

  /* Diverging colours for output values: red below 0, white at 0, blue above. */
  const NEG = [178, 24, 43], POS = [33, 102, 172], MID = [247, 247, 247];

  function divergingColour(x, vmax) {
    const f = vmax > 0 ? Math.min(1, Math.abs(x) / vmax) : 0, end = x < 0 ? NEG : POS;
    return MID.map((c, k) => Math.round(c + (end[k] - c) * f));
  }

  /* The output rows (T × E_out) beside the heatmaps: one row per query, as tall as the
     heatmaps' rows so they line up; narrow columns, one per output dimension. */
  function outputFigure(v, cell) {
    const m = v.output, T = m.length, E = T ? m[0].length : 0;
    const cellW = Math.max(2, Math.min(cell, Math.floor(360 / Math.max(E, 1))));
    let vmax = 0;
    for (const row of m) for (const x of row) vmax = Math.max(vmax, Math.abs(x));
    const x = { head: 'output', title: 'Output', m };
    const fig = el('figure', 'map output');
    fig.dataset.head = 'output';
    const title = el('h3', '', x.title);
    title.append(el('span', 'muted', `${T} × ${E} · |x| ≤ ${vmax.toFixed(3)}`));
    fig.append(title);
    const c = sizedCanvas(E * cellW, T * cell);
    c.className = 'cells';
    Object.assign(c.dataset, { head: 'output', rows: T, cols: E, cell, cellW, vmax });
    c.setAttribute('role', 'img');
    c.setAttribute('aria-label', `output: ${T} queries by ${E} dimensions`);
    const ctx = c.getContext('2d');
    m.forEach((row, t) => row.forEach((val, s) => {
      ctx.fillStyle = rgb(divergingColour(val, vmax));
      ctx.fillRect(s * cellW, t * cell, cellW, cell);
    }));
    c.addEventListener('mousemove', (e) => hover(e, c, x));
    c.addEventListener('mouseleave', unhover);
    const overlay = sizedCanvas(E * cellW, T * cell);
    overlay.className = 'overlay';
    const wrap = el('div', 'cellwrap');
    wrap.append(c, overlay);
    const grid = el('div', 'grid');
    const font = Math.max(8, Math.min(11, cell - 1));
    grid.append(el('div', 'corner', 'q╲dim'), el('div', 'axisnote', `dimensions 0…${E - 1}`),
                el('div'), yAxis(v.qLabels, cell, font), wrap);
    fig.append(grid);
    return fig;
  }

  /* ---------------------------------------------------- copy as curl / Python */

  /* A value as a Python literal (numbers, booleans and nested lists only). */
  function pyLiteral(v) {
    return JSON.stringify(v).replace(/\btrue\b/g, 'True').replace(/\bfalse\b/g, 'False')
      .replace(/\bnull\b/g, 'None');
  }

  function curlSnippet(shown) {
    const url = `${location.origin}/v1/models/${encodeURIComponent(shown.model)}/attention`;
    const keyed = $('apikey').value.trim() !== '';
    return (keyed ? '# export ATTND_API_KEY=...   (the key typed in the page)\n' : '') +
      `curl -s ${url} -H 'Content-Type: application/json'` +
      (keyed ? ' \\\n     -H "Authorization: Bearer $ATTND_API_KEY"' : '') +
      ` \\\n     -d @- <<'JSON'\n${JSON.stringify(shown.request)}\nJSON\n`;
  }

  function pythonSnippet(shown) {
    const keyed = $('apikey').value.trim() !== '';
    const req = shown.request;
    const args = ['query', `model=${JSON.stringify(shown.model)}`];
    const lines = ['import attnd' + (keyed ? ', os' : ''),
                   `client = attnd.Client(${JSON.stringify(location.origin)}` +
                   (keyed ? ', api_key=os.environ["ATTND_API_KEY"])' : ')'),
                   `query = ${pyLiteral(req.query)}`];
    for (const name of ['key', 'value', 'key_padding_mask']) {
      if (req[name] === undefined) continue;
      lines.push(`${name} = ${pyLiteral(req[name])}`);
      args.push(`${name}=${name}`);
    }
    for (const name of ['is_causal', 'window', 'need_weights', 'average_attn_weights'])
      if (req[name] !== undefined) args.push(`${name}=${pyLiteral(req[name])}`);
    lines.push(`r = client.attention(${args.join(', ')})`,
               'print(r.output)    # T × E_out', 'print(r.weights)   # h × T × S, one matrix per head',
               'print(r.timing)');
    return lines.join('\n') + '\n';
  }

  /* Shows the snippet and puts it on the clipboard when the browser allows it. */
  async function copySnippet(kind) {
    if (!state.shown) return;
    const text = kind === 'curl' ? curlSnippet(state.shown) : pythonSnippet(state.shown);
    const pre = $('snippet');
    pre.textContent = text;
    pre.dataset.kind = kind;
    pre.hidden = false;
    let copied = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        copied = true;
      }
    } catch (e) { /* denied: the text is shown to select by hand */ }
    $('copy-note').textContent = copied ? `copied (${kind === 'curl' ? 'bash' : 'Python'})`
                                        : 'select the text below and copy it';
    $('copy-note').dataset.copied = String(copied);
  }

  /* ------------------------------------------------------- streaming session */

  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

  /* The session's steps as a T × T canvas filled one row per append; a windowed session's
     row covers only the positions it still holds. */
  function streamCanvas(T, cell) {
    const c = sizedCanvas(T * cell, T * cell);
    c.className = 'cells';
    Object.assign(c.dataset, { head: 'stream', rows: T, cols: T, cell, filled: 0 });
    const ctx = c.getContext('2d');
    ctx.fillStyle = rgb(ZERO);
    ctx.fillRect(0, 0, T * cell, T * cell);
    return c;
  }

  function drawStreamRow(c, step) {
    const cell = Number(c.dataset.cell), t = step.length - 1, first = step.length - step.cached;
    const ctx = c.getContext('2d');
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, t * cell, Number(c.dataset.cols) * cell, cell);
    const vmax = Math.max(...step.weights);
    step.weights.forEach((w, j) => {
      ctx.fillStyle = rgb(colour(w, vmax));
      ctx.fillRect((first + j) * cell, t * cell, cell, cell);
    });
    c.dataset.filled = String(t + 1);
  }

  async function stream() {
    const built = buildRequest();
    const box = 'stream-error';
    $(box).hidden = true;
    if (built.error) return showError('browser', 0, built.error, box);
    if (built.request.key !== undefined)
      return showError('browser', 0, { code: 'cross', field: 'key', message:
        'the streaming view shows self-attention: clear key and value' }, box);
    const rows = built.request.query, T = rows.length, model = state.model.name;
    const run = { state: 'running', id: null, model, steps: [], deleted: false };
    window.attndStream = run;
    $('stream-run').disabled = true;
    const body = built.request.window ? { window: built.request.window } : {};
    const made = await api('POST', `/v1/models/${encodeURIComponent(model)}/sessions`, JSON.stringify(body));
    if (made.status !== 201 || !made.json) {
      run.state = 'error';
      $('stream-run').disabled = false;
      return showError('api', made.status, apiError(made), box);
    }
    run.id = made.json.id;
    const cell = autoCell(T, T);
    const fig = el('figure', 'map');
    fig.append(el('h3', '', `Session ${run.id.slice(0, 8)}… · one row per append`));
    const canvas = streamCanvas(T, cell);
    fig.append(canvas);
    $('stream-view').replaceChildren(fig);
    const delay = Number($('stream-delay').value) || 0;
    for (let t = 0; t < T && run.state === 'running'; t++) {
      const r = await api('POST', `/v1/sessions/${run.id}/append`,
                          JSON.stringify({ query: [rows[t]], need_weights: true }));
      if (r.status !== 200 || !r.json || !Array.isArray(r.json.weights)) {
        run.state = 'error';
        showError('api', r.status, apiError(r), box);
        break;
      }
      const step = { length: r.json.session.length, cached: r.json.session.cached,
                     weights: r.json.weights[0], output: r.json.output[0],
                     compute_us: (r.json.timing || {}).compute_us };
      run.steps.push(step);
      drawStreamRow(canvas, step);
      $('stream-status').textContent = `step ${t + 1} of ${T} · length ${step.length} · ` +
        `cached ${step.cached} · compute ${fmtUs(step.compute_us)}`;
      if (delay) await sleep(delay);
    }
    const del = await api('DELETE', `/v1/sessions/${run.id}`);
    run.deleted = del.status === 204;
    if (run.state === 'running') run.state = 'done';
    $('stream-run').disabled = false;
  }

  /* Every step-th label so text never overlaps. */
  function labelStep(cell, font) {
    return Math.max(1, Math.ceil((font + 1) / cell));
  }

  function xAxis(labels, cell, font) {
    const probe = sizedCanvas(1, 1).getContext('2d');
    probe.font = `${font}px system-ui, sans-serif`;
    const widest = Math.max(0, ...labels.map((l) => probe.measureText(l).width));
    const flat = widest <= cell - 2;
    const h = flat ? font + 4 : Math.min(80, Math.ceil(widest) + 4);
    const c = sizedCanvas(labels.length * cell, h);
    c.className = 'xaxis';
    const ctx = c.getContext('2d');
    ctx.font = probe.font;
    ctx.fillStyle = '#6b7383';
    const step = flat ? 1 : labelStep(cell, font);
    labels.forEach((l, s) => {
      if (s % step) return;
      const cx = Math.max(s * cell + cell / 2, flat ? 0 : font / 2);  /* keep the first inside */
      if (flat) {
        ctx.textAlign = 'center';
        ctx.textBaseline = 'bottom';
        ctx.fillText(l, cx, h - 1);
      } else {
        ctx.save();
        ctx.translate(cx, h - 2);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = 'left';
        ctx.textBaseline = 'middle';
        ctx.fillText(fit(ctx, l, h - 4), 0, 0);
        ctx.restore();
      }
    });
    return c;
  }

  function yAxis(labels, cell, font) {
    const probe = sizedCanvas(1, 1).getContext('2d');
    probe.font = `${font}px system-ui, sans-serif`;
    const w = Math.min(90, Math.ceil(Math.max(0, ...labels.map((l) => probe.measureText(l).width))) + 6);
    const c = sizedCanvas(w, labels.length * cell);
    c.className = 'yaxis';
    const ctx = c.getContext('2d');
    ctx.font = probe.font;
    ctx.fillStyle = '#6b7383';
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    const step = labelStep(cell, font);
    labels.forEach((l, t) => {
      const y = Math.min(Math.max(t * cell + cell / 2, font / 2), labels.length * cell - font / 2);
      if (t % step === 0) ctx.fillText(fit(ctx, l, w - 6), w - 4, y);
    });
    return c;
  }

  /* Shortens text with an ellipsis to at most px wide. */
  function fit(ctx, text, px) {
    if (ctx.measureText(text).width <= px) return text;
    let s = text;
    while (s.length > 1 && ctx.measureText(s + '…').width > px) s = s.slice(0, -1);
    return s + '…';
  }

  function rowSums(m, cell, font) {
    const box = el('div', 'rowsums' + (cell < 9 ? ' compact' : ''));
    box.style.fontSize = font + 'px';
    m.forEach((row, t) => {
      const sum = row.reduce((a, b) => a + b, 0);
      const span = el('span', sum === 0 ? 'zero' : '', sum.toFixed(3));
      span.dataset.row = String(t);
      span.style.height = span.style.lineHeight = cell + 'px';
      span.title = sum === 0 ? 'every key is masked for this query: weights are all 0'
                             : 'sum of this row = ' + sum;
      box.append(span);
    });
    return box;
  }

  function sumSummary(m) {
    const sums = m.map((row) => row.reduce((a, b) => a + b, 0));
    return `row sums ${Math.min(...sums).toFixed(3)} … ${Math.max(...sums).toFixed(3)}`;
  }

  function renderLegend(vmax) {
    const box = $('legend');
    box.replaceChildren();
    const bar = sizedCanvas(140, 10);
    const ctx = bar.getContext('2d');
    for (let i = 0; i < 140; i++) {
      ctx.fillStyle = rgb(colour((i + 0.5) / 140, 1));
      ctx.fillRect(i, 0, 1, 10);
    }
    const zero = el('span', 'swatch');
    zero.style.background = rgb(ZERO);
    box.append('0', bar, vmax === null ? 'max of each map' : vmax.toFixed(3), zero, 'exactly 0 (masked)');
  }

  /* ---------------------------------------------------------------- hover */

  function hover(e, canvas, x) {
    const cell = Number(canvas.dataset.cell), cellW = Number(canvas.dataset.cellW || cell);
    const s = Math.floor(e.offsetX / cellW), t = Math.floor(e.offsetY / cell);
    const T = x.m.length, S = T ? x.m[0].length : 0;
    if (t < 0 || s < 0 || t >= T || s >= S) return unhover();
    const w = x.m[t][s], v = state.view;
    const tip = $('tooltip');
    Object.assign(tip.dataset, { head: x.head, row: String(t), col: String(s), value: String(w) });
    const what = x.head === 'output'
      ? `output · query ${t} “${v.qLabels[t]}” · dimension ${s}`
      : `${x.head === 'avg' ? 'average' : 'head ' + x.head} · query ${t} “${v.qLabels[t]}” → key ${s} “${v.kLabels[s]}”`;
    tip.replaceChildren(el('div', 'k', what), el('div', 'v', w.toFixed(6)));
    tip.hidden = false;
    const pad = 14, r = tip.getBoundingClientRect();
    const left = e.clientX + pad + r.width > window.innerWidth ? e.clientX - pad - r.width : e.clientX + pad;
    tip.style.left = Math.max(0, left) + 'px';
    tip.style.top = Math.max(0, e.clientY + pad) + 'px';
    markCell(t, s, x.head === 'output');
  }

  function unhover() {
    $('tooltip').hidden = true;
    markCell(-1, -1);
  }

  /* Outlines query t in every map and column s (a key, or an output dimension when
     fromOutput) in the maps of that kind, and bolds row t's sum. */
  function markCell(t, s, fromOutput) {
    for (const fig of document.querySelectorAll('#maps .map')) {
      const cells = fig.querySelector('canvas.cells'), ov = fig.querySelector('canvas.overlay');
      const cell = Number(cells.dataset.cell), cellW = Number(cells.dataset.cellW || cell);
      const col = (fig.dataset.head === 'output') === Boolean(fromOutput) ? s : -1;
      const ctx = ov.getContext('2d');
      ctx.clearRect(0, 0, ov.width, ov.height);
      fig.querySelectorAll('.rowsums span.hot').forEach((sp) => sp.classList.remove('hot'));
      if (t < 0) continue;
      ctx.fillStyle = 'rgba(29, 35, 48, 0.07)';
      ctx.fillRect(0, t * cell, ov.width, cell);
      if (col < 0) continue;
      ctx.fillRect(col * cellW, 0, cellW, ov.height);
      ctx.strokeStyle = '#e8590c';
      ctx.lineWidth = 2;
      ctx.strokeRect(col * cellW + 1, t * cell + 1, cellW - 2, cell - 2);
      const sp = fig.querySelector(`.rowsums span[data-row="${t}"]`);
      if (sp) sp.classList.add('hot');
    }
  }

  /* ---------------------------------------------------------------- wiring */

  function selectTab(paneId) {
    for (const tab of document.querySelectorAll('.tab')) {
      const on = tab.dataset.pane === paneId;
      tab.setAttribute('aria-selected', String(on));
      $(tab.dataset.pane).hidden = !on;
    }
  }

  /* Copies the generated query into the JSON pane for editing. */
  function generatedToJson() {
    if (!state.model) return;
    const g = generatorTokens();
    const rows = generateQuery(g.tokens, state.model.embed_q).map((r) => '  ' + JSON.stringify(r));
    $('json-query').value = '[\n' + rows.join(',\n') + '\n]';
    if (!$('opt-labels').value.trim() && $('gen-kind').value !== 'random')
      $('opt-labels').value = g.labels.join(' ');
    selectTab('pane-paste');
  }

  function wire() {
    $('apikey').value = sessionStorage.getItem(KEY_STORE) || '';
    $('apikey').addEventListener('change', () => {
      sessionStorage.setItem(KEY_STORE, $('apikey').value.trim());
      clearError();
      loadModels();
    });
    for (const tab of document.querySelectorAll('.tab'))
      tab.addEventListener('click', () => selectTab(tab.dataset.pane));
    for (const id of ['gen-kind', 'gen-length', 'gen-period', 'gen-text', 'gen-seed', 'gen-positions'])
      $(id).addEventListener('input', updateGenerator);
    $('gen-to-json').addEventListener('click', generatedToJson);
    $('run').addEventListener('click', run);
    $('copy-curl').addEventListener('click', () => copySnippet('curl'));
    $('copy-python').addEventListener('click', () => copySnippet('python'));
    $('stream-run').addEventListener('click', stream);
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) run();
    });
    $('scale').addEventListener('change', renderMaps);
    $('zoom').addEventListener('input', () => { state.zoomTouched = true; renderMaps(); });
  }

  async function start() {
    wire();
    updateGenerator();
    if (await loadModels()) await run();  /* a first picture, before anyone clicks */
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
