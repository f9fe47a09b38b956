#!/usr/bin/env node
// ort_peer.js DIR BENCH_PEER — ONNX Runtime (onnxruntime-node, CPU EP) against
// attnd's library on the same rows, measured side by side (scripts/bench_peers.sh).
//
// DIR: what `bench_peer export DIR` and build_graphs.py wrote (manifest.txt, the
// weights and inputs as raw float32, the graphs). BENCH_PEER: build/bench/bench_peer,
// started here as a server ("serve") for the whole run.
// Rounds (PEER_ROUNDS, default 3): in each, row by row, attnd's measurement and ORT's
// (every variant of the row) back to back, attnd first in odd rounds and ORT first in
// even ones, so both sides of a pair see the same machine. Each round prints the load
// average at its start and end and how many cores the other processes used meanwhile
// (/proc/stat busy time minus this process's and bench_peer's own).
// Numerics: on every row and round, ORT's output of every variant against attnd's
// output of the same weights and inputs (bench_peer writes it): the max abs diff;
// a row whose diff exceeds 1e-4 has failed (its ratio is not a comparison).
// ORT session options: CPU EP, graphOptimizationLevel 'all', intraOpNumThreads 2
// (the caller + 1 pool thread, as attnd's 2-thread workspace), interOpNumThreads 1,
// sequential, memory arena and pattern on, spinning at ORT's default; outputs bound
// (fetches). A fresh session per measurement (creation and warm-up not timed).
// ORT's figure: the engine's model_run span from ORT's profiler (what a C/C++ caller
// would see: for the shared-buffer decode the Node binding's hand-back of the bound
// present tensors costs more than the step); a graph under 50 ms is also timed without
// the profiler (Node wall time) and the smaller median is taken. Both over-estimate.
// Timing on both sides: one warm-up, then runs until the budget is spent and at least 3
// ran (2 when the warm-up took over a second); decode: budget/4, at least 2; the median.
// Budget: BENCH_SECONDS (default 1.0) per layer measurement.
// Ratio = ORT time / attnd time (> 1: attnd faster); a row's figure is the median over
// rounds of the round's own ratio (ORT's best variant of that round over attnd's).
// Targets (issue 28) go to stdout as "TARGET  what | measured | verdict" and to
// $BENCH_TARGETS (tab-separated), as tests/common/benchutil.c's bench_target writes them.
// PEER_ORT_COPY=1: also the decode graph with ORT allocating and copying present (info).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const readline = require('readline');
const { spawn } = require('child_process');
const ort = require('onnxruntime-node');

const TOL = 1e-4;
const THREADS = 2;
const ROUNDS = Number(process.env.PEER_ROUNDS) >= 1 ? Math.floor(Number(process.env.PEER_ROUNDS)) : 3;
const BUDGET = Number(process.env.BENCH_SECONDS) > 0 ? Number(process.env.BENCH_SECONDS) : 1.0;
const DE = 2048, DG = 8, DD = 64, MAX_SESS = 16;

const OP_NAME = { mha: 'MultiHeadAttention', attention: 'Attention', gqa: 'GroupQueryAttention',
  shared: 'GroupQueryAttention, shared past/present', copy: 'GroupQueryAttention, copying present' };
const now = () => Number(process.hrtime.bigint()) / 1e9;
const fmtMs = (s) => (s * 1e3).toFixed(4);

function median(a) {
  const s = [...a].sort((x, y) => x - y);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

function readF32(p) {
  const b = fs.readFileSync(p);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
}

function maxAbsDiff(a, b) {
  if (a.length !== b.length) return Infinity;
  let d = 0;
  for (let i = 0; i < a.length; i++) {
    const x = Math.abs(a[i] - b[i]);
    if (!(x <= d)) d = x; // NaN counts as a failure
  }
  return d;
}

function target(what, measured, verdict) {
  console.log(`TARGET  ${what} | ${measured} | ${verdict}`);
  if (process.env.BENCH_TARGETS) fs.appendFileSync(process.env.BENCH_TARGETS, `${what}\t${measured}\t${verdict}\n`);
}

// ------------------------------------------------------------ attnd's side

// bench_peer serve: one command a line, answered by lines and "DONE".
class Attnd {
  constructor(bin) {
    this.p = spawn(bin, ['serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.lines = [];
    this.wait = null;
    this.closed = false;
    const rl = readline.createInterface({ input: this.p.stdout });
    rl.on('line', (l) => { this.lines.push(l); this.wake(); });
    rl.on('close', () => { this.closed = true; this.wake(); });
  }

  wake() {
    const w = this.wait;
    this.wait = null;
    if (w) w();
  }

  async ask(cmd) {
    this.p.stdin.write(cmd + '\n');
    const got = [];
    for (;;) {
      while (this.lines.length) {
        const l = this.lines.shift();
        if (l === 'DONE') return got;
        got.push(l);
      }
      if (this.closed) throw new Error(`bench_peer exited during: ${cmd}`);
      await new Promise((r) => { this.wait = r; });
    }
  }

  // {med, min} in seconds, or {error}
  async measure(cmd) {
    const lines = await this.ask(cmd);
    const r = lines.find((l) => l.startsWith('RESULT\t'));
    const e = lines.find((l) => l.startsWith('ERROR\t'));
    if (!r) return { error: e ? e.slice(6) : `no answer to ${cmd}` };
    const f = r.split('\t');
    return { med: Number(f[3]) / 1e3, min: Number((/min_ms=([\d.]+)/.exec(f[4] || '') || [])[1]) / 1e3 };
  }

  quit() {
    this.p.stdin.end('quit\n');
  }
}

// --------------------------------------------------------------- ORT's side

function sessionOptions(extra = {}) {
  return {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: THREADS,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    enableCpuMemArena: true,
    enableMemPattern: true,
    ...extra,
  };
}

function readProfile(file, prefix) {
  const dir = path.dirname(prefix);
  const pf = file && fs.existsSync(file) ? file
    : path.join(dir, fs.readdirSync(dir).find((f) => f.startsWith(path.basename(prefix)) && f.endsWith('.json')));
  const ev = JSON.parse(fs.readFileSync(pf));
  fs.unlinkSync(pf);
  return ev;
}

// A fresh session on `file`, one warm-up, then timed runs (see the header). Returns
// {eng, wall, reps, ops} in seconds (eng: the median model_run span; NaN unprofiled),
// ops: the kernels that ran ("op@provider", from the profile).
async function measure(file, feeds, fetches, budget, minRuns, profile) {
  const prefix = path.join(os.tmpdir(), `attnd_ort_peer_${process.pid}_${path.basename(file, '.onnx')}`);
  const sess = await ort.InferenceSession.create(file,
    sessionOptions(profile ? { enableProfiling: true, profileFilePrefix: prefix } : {}));
  try {
    const w0 = now();
    await sess.run(feeds, fetches);
    const min = minRuns !== undefined ? minRuns : now() - w0 > 1.0 ? 2 : 3;
    const t = [];
    const start = now();
    while (t.length < 2000 && (t.length < min || now() - start < budget)) {
      const t0 = now();
      await sess.run(feeds, fetches);
      t.push(now() - t0);
    }
    if (!profile) return { eng: NaN, wall: median(t), reps: t.length, ops: '' };
    const ev = readProfile(sess.endProfiling(), prefix);
    const spans = ev.filter((e) => e.name === 'model_run').map((e) => e.dur / 1e6).slice(1);
    const ops = new Set();
    for (const e of ev)
      if (e.cat === 'Node' && e.args && e.args.op_name) ops.add(`${e.args.op_name}@${(e.args.provider || '').replace('ExecutionProvider', '')}`);
    return { eng: median(spans), wall: median(t), reps: t.length, ops: [...ops].filter((o) => /Attention/.test(o)).join(',') };
  } finally {
    await sess.release();
  }
}

// The ORT figure of a graph: profiled engine time, or the unprofiled wall time when
// that is smaller (graphs under 50 ms). Returns {sec, how, ops, y} or {error}.
async function ortFigure(file, feeds, fetches, y, budget, minRuns) {
  try {
    const m = await measure(file, feeds, fetches, budget, minRuns, true);
    const out = Float32Array.from(y.data); // the output of these runs, before any other graph runs
    let sec = m.eng, how = 'engine';
    if (m.wall < 0.05) {
      const u = await measure(file, feeds, fetches, budget, minRuns, false);
      if (u.wall < sec) sec = u.wall, how = 'wall';
    }
    return { sec, how, ops: m.ops, y: out };
  } catch (e) {
    return { error: String((e && e.message) || e).split('\n')[0] };
  }
}

function layerVariants(r) {
  return r.causal ? ['mha', 'attention', 'gqa'] : ['mha', 'attention'];
}

async function ortLayer(dir, r, op, x) {
  const { B, T, E, h } = r;
  const file = path.join(dir, `${op}_${r.causal ? 'causal_' : ''}${B}_${T}_${E}_${h}.onnx`);
  const xT = new ort.Tensor('float32', x, [B, T, E]);
  const yT = new ort.Tensor('float32', new Float32Array(B * T * E), [B, T, E]);
  return ortFigure(file, { x: xT }, { y: yT }, yT, BUDGET);
}

// The decode feeds of (P, n): every sequence's past_key/past_value (n, 8, cap, 64)
// from bench_peer's K/V rows (row i: 8 heads x 64), as attnd's pool holds them.
// shared: cap = P + 1 (the new row at P, written in place); copy: cap = P.
function decodeFeeds(kv, xs, P, n, shared) {
  const cap = shared ? P + 1 : P, rowf = DG * DD, half = kv.length / 2;
  const k = new Float32Array(n * DG * cap * DD), v = new Float32Array(n * DG * cap * DD);
  for (let j = 0; j < DG; j++)
    for (let i = 0; i < P; i++) {
      const src = i * rowf + j * DD, dst = (j * cap + i) * DD;
      k.set(kv.subarray(src, src + DD), dst);
      v.set(kv.subarray(half + src, half + src + DD), dst);
    }
  const one = DG * cap * DD;
  for (let s = 1; s < n; s++) {
    k.copyWithin(s * one, 0, one);
    v.copyWithin(s * one, 0, one);
  }
  return {
    x: new ort.Tensor('float32', xs.subarray(0, n * DE), [n, 1, DE]),
    past_key: new ort.Tensor('float32', k, [n, DG, cap, DD]),
    past_value: new ort.Tensor('float32', v, [n, DG, cap, DD]),
    seqlens_k: new ort.Tensor('int32', new Int32Array(n).fill(P), [n]), // total length - 1
    total_sequence_length: new ort.Tensor('int32', new Int32Array([P + 1]), []),
  };
}

async function ortDecode(dir, kv, xs, P, n, shared) {
  const feeds = decodeFeeds(kv, xs, P, n, shared);
  const yT = new ort.Tensor('float32', new Float32Array(n * DE), [n, 1, DE]);
  const fetches = shared ? { y: yT, present_key: feeds.past_key, present_value: feeds.past_value } : { y: yT };
  return ortFigure(path.join(dir, 'decode_gqa.onnx'), feeds, fetches, yT, 0.25 * BUDGET, 2);
}

// ------------------------------------------------------------------ rounds

function busyTicks() {
  const v = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  return v.reduce((a, b) => a + b, 0) - v[3] - v[4]; // minus idle and iowait
}

function procTicks(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(')').pop().trim().split(/\s+/);
    return Number(s[11]) + Number(s[12]); // utime stime
  } catch (e) {
    return 0;
  }
}

const TICK = 100; // USER_HZ on Linux
const loadavg = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const stamp = () => new Date().toISOString().slice(11, 19);

async function main() {
  const [dir, bin] = process.argv.slice(2);
  if (!dir || !bin) throw new Error('usage: ort_peer.js DIR BENCH_PEER');
  const manifest = fs.readFileSync(path.join(dir, 'manifest.txt'), 'utf8').trim().split('\n').map((l) => l.split(' '));
  const layers = manifest.filter((m) => m[0] === 'layer').map((m) => {
    const [B, T, E, h, c] = m.slice(1).map(Number);
    return { B, T, E, h, causal: c === 1, key: `(${B},${T},${E},${h})${c ? ' causal' : ''}` };
  });
  const decodes = manifest.filter((m) => m[0] === 'decode').map((m) => ({ P: Number(m[1]), n: Number(m[2]) }));
  const modes = process.env.PEER_ORT_COPY === '1' ? ['shared', 'copy'] : ['shared'];
  const kv = readF32(path.join(dir, 'decode_kv.f32')), xs = readF32(path.join(dir, 'decode_x.f32'));
  const attnd = new Attnd(bin);
  const yPath = path.join(dir, 'attnd_y.f32');
  // per row: rounds' attnd seconds, ORT seconds per variant, paired ratios, worst diff, errors
  const rows = new Map();
  const rowOf = (key) => rows.get(key) || rows.set(key, { attnd: [], ort: {}, ratio: [], diff: 0, ops: {}, errors: [] }).get(key);

  console.log(`onnxruntime-node ${require('onnxruntime-node/package.json').version} (CPU EP, MLAS), node ${process.version}; ` +
    `${ROUNDS} rounds, ${BUDGET} s per layer measurement, ${THREADS} threads each`);
  // one pair: attnd's measurement and ORT's variants, in the round's order, then the check
  // (only the variants in `counted` make the ratio: for decode, the shared-buffer graph)
  async function pair(round, key, attndCmd, ortRuns, counted) {
    const row = rowOf(key);
    let a, o = [];
    const runOrt = async () => { for (const [name, run] of ortRuns) o.push([name, await run()]); };
    if (round % 2) { a = await attnd.measure(attndCmd); await runOrt(); } else { await runOrt(); a = await attnd.measure(attndCmd); }
    if (a.error) return row.errors.push(`attnd: ${a.error}`);
    row.attnd.push(a.med);
    const y = readF32(yPath);
    let best = Infinity;
    for (const [name, m] of o) {
      if (m.error) { row.errors.push(`ORT ${name}: ${m.error}`); continue; }
      (row.ort[name] = row.ort[name] || []).push(m.sec);
      row.ops[name] = m.ops;
      row.diff = Math.max(row.diff, maxAbsDiff(m.y, y));
      if (counted.includes(name)) best = Math.min(best, m.sec);
    }
    if (best < Infinity) row.ratio.push(best / a.med);
    console.log(`  ${key.padEnd(22)} attnd ${(a.med * 1e3).toPrecision(4)} ms | ORT ` +
      `${o.map(([name, m]) => `${name} ${m.error ? 'error' : (m.sec * 1e3).toPrecision(4)}`).join(', ')} ms` +
      `${best < Infinity ? ` | ${(best / a.med).toFixed(2)}x` : ''}`);
  }

  // The compute roof: OpenBLAS sgemm on 2 threads, best of one probe per round. A layer
  // row's useful FLOPs (projections 8·B·T·E², attention 4·B·T²·E, half when causal) over
  // it is the fastest the row could run at sgemm's rate.
  // The FMA peak (the widest vector FMAs on registers, same threads) is the roof no GEMM
  // library passes: a share of it near 100 % is out of reach of any design.
  let sgemm = 0, peak = 0, peakKind = '';
  const probeSgemm = async () => {
    const r = (await attnd.ask('sgemm')).find((l) => l.startsWith('RESULT\t'));
    if (r) sgemm = Math.max(sgemm, Number(r.split('\t')[3]));
    const p = (await attnd.ask('peak')).find((l) => l.startsWith('RESULT\t'));
    if (p && Number(p.split('\t')[3]) > peak) {
      peak = Number(p.split('\t')[3]);
      peakKind = (p.split('\t')[4] || '').replace(/^GFLOP\/s \((.*?) on registers.*$/, '$1');
    }
  };
  const cpus = os.cpus().length;
  for (let r = 1; r <= ROUNDS; r++) {
    await probeSgemm();
    const t0 = now(), b0 = busyTicks(), m0 = procTicks(process.pid) + procTicks(attnd.p.pid);
    console.log(`round ${r}/${ROUNDS} start ${stamp()}, load average ${loadavg()}`);
    for (const L of layers) {
      const x = readF32(path.join(dir, `x_${L.B}_${L.T}_${L.E}_${L.h}.f32`));
      await pair(r, L.key, `layer ${L.B} ${L.T} ${L.E} ${L.h} ${L.causal ? 1 : 0} ${BUDGET} ${yPath}`,
        layerVariants(L).map((op) => [op, () => ortLayer(dir, L, op, x)]), layerVariants(L));
    }
    for (const { P, n } of decodes)
      await pair(r, `decode P=${P} n=${n}`, `decode ${P} ${n} ${BUDGET} ${yPath}`,
        modes.map((m) => [m, () => ortDecode(dir, kv, xs, P, n, m === 'shared')]), ['shared']);
    const dt = now() - t0;
    const others = ((busyTicks() - b0) - (procTicks(process.pid) + procTicks(attnd.p.pid) - m0)) / TICK / dt;
    console.log(`round ${r}/${ROUNDS} end ${stamp()}, load average ${loadavg()}; ${dt.toFixed(0)} s; ` +
      `other processes used ${Math.max(0, others).toFixed(2)} of ${cpus} cores`);
  }
  attnd.quit();

  const ms = (a) => (a.length ? (median(a) * 1e3).toPrecision(4) : '-');
  console.log('\nLayer forward, fp32, 2 threads each (ms: median over rounds; ratio: median of each round\'s ' +
    'ORT best / attnd; diff: max |ORT - attnd| over every variant and round):');
  console.log(`${'row'.padEnd(24)} ${'attnd'.padStart(9)} ${'ORT MHA'.padStart(9)} ${'ORT Attn'.padStart(9)} ` +
    `${'ORT GQA'.padStart(9)}  ${'ratio'.padStart(5)}  ${'max|diff|'.padStart(9)}  kernels`);
  const report = (key, cols, counted, goal, what) => {
    const row = rows.get(key);
    const ratio = median(row.ratio), diff = row.diff;
    const kernels = [...new Set(Object.values(row.ops).filter(Boolean).join(',').split(','))].join(',');
    console.log(`${key.padEnd(24)} ${ms(row.attnd).padStart(9)} ${cols.map((c) => ms(row.ort[c] || []).padStart(9)).join(' ')}  ` +
      `${Number.isFinite(ratio) ? ratio.toFixed(2).padStart(5) : '    -'}  ${diff.toExponential(1).padStart(9)}  ${kernels}` +
      `${row.errors.length ? `  errors: ${[...new Set(row.errors)].join('; ')}` : ''}`);
    const bestOp = Object.keys(row.ort).filter((o) => counted.includes(o)).sort((p, q) => median(row.ort[p]) - median(row.ort[q]))[0];
    let measured, verdict;
    if (!Number.isFinite(ratio)) {
      measured = `no figure (${[...new Set(row.errors)].join('; ') || 'no measurement'})`;
      verdict = 'not measured';
    } else if (!(diff <= TOL)) {
      measured = `${ratio.toFixed(2)}x, but numerics FAILED: max|ORT - attnd| ${diff.toExponential(2)} > ${TOL}`;
      verdict = 'NOT met';
    } else {
      measured = `${ratio.toFixed(2)}x (attnd ${ms(row.attnd)} ms, ORT ${ms(row.ort[bestOp])} ms ${OP_NAME[bestOp]}; ` +
        `max|diff| ${diff.toExponential(1)})`;
      verdict = ratio >= goal ? 'met' : 'NOT met';
    }
    return [what, measured, verdict];
  };
  const flops = (L) => 8 * L.B * L.T * L.E * L.E + (L.causal ? 2 : 4) * L.B * L.T * L.T * L.E;
  if (sgemm > 0) {
    console.log(`\nCompute roof: sgemm on ${THREADS} threads ${sgemm.toFixed(1)} GFLOP/s (best of ${ROUNDS}). Each ` +
      'row\'s useful FLOPs at that rate, and the share of it each side ran at (medians above); ' +
      '"1.1x ORT needs" is the share attnd would have to run at:');
    for (const L of layers) {
      const row = rows.get(L.key), roof = flops(L) / (sgemm * 1e9);
      const ort = Math.min(...Object.values(row.ort).filter((a) => a.length).map(median));
      const goal = L.causal ? 1.5 : 1.1;
      console.log(`  ${L.key.padEnd(22)} ${(flops(L) / 1e9).toFixed(3)} GFLOP, roof ${(roof * 1e3).toPrecision(4)} ms: ` +
        `attnd ${(100 * roof / median(row.attnd)).toFixed(0)}%, ORT ${(100 * roof / ort).toFixed(0)}%; ` +
        `${goal}x ORT needs ${(100 * goal * roof / ort).toFixed(0)}%`);
    }
  }
  if (peak > 0) {
    console.log(`\nFMA peak: ${peak.toFixed(1)} GFLOP/s on ${THREADS} threads (${peakKind}, registers only, best of ` +
      `${ROUNDS}): the roof of any kernel on this CPU. The same rows against it:`);
    for (const L of layers) {
      const row = rows.get(L.key), roof = flops(L) / (peak * 1e9);
      const ort = Math.min(...Object.values(row.ort).filter((a) => a.length).map(median));
      const goal = L.causal ? 1.5 : 1.1, need = 100 * goal * roof / ort;
      console.log(`  ${L.key.padEnd(22)} attnd ${(100 * roof / median(row.attnd)).toFixed(0)}%, ORT ` +
        `${(100 * roof / ort).toFixed(0)}% of the peak; ${goal}x ORT needs ${need.toFixed(0)}%`);
    }
  }
  const lines = [];
  for (const L of layers)
    lines.push(report(L.key, ['mha', 'attention', 'gqa'], layerVariants(L), L.causal ? 1.5 : 1.1,
      `layer ${L.key} >= ${L.causal ? '1.5' : '1.1'}x ORT`));
  console.log('\nDecode step, Llama-3.2-1B attention (32 query / 8 KV heads, d 64, RoPE, W_O), F32 K/V, one ' +
    'attn_forward for n sequences vs ORT GroupQueryAttention, past/present buffer shared' +
    `${modes.length > 1 ? ' (and copying: info)' : ''}:`);
  console.log(`${'row'.padEnd(24)} ${'attnd'.padStart(9)} ${'ORT GQA'.padStart(9)} ${'ORT copy'.padStart(9)}  ` +
    `${'ratio'.padStart(5)}  ${'max|diff|'.padStart(9)}  kernels`);
  for (const { P, n } of decodes) {
    lines.push(report(`decode P=${P} n=${n}`, ['shared', 'copy'], ['shared'], 1.5, `decode (P ${P}, n ${n}) >= 1.5x ORT GQA`));
  }
  // the issue's two targets over their rows: met when every row is, NOT met when any is not
  const overall = (what, part, ratios) => {
    const v = part.map((l) => l[2]);
    const met = v.filter((x) => x === 'met').length;
    const low = ratios.reduce((m, r) => (Number.isFinite(r[1]) && (!m || r[1] < m[1]) ? r : m), null);
    return [what, `${met} of ${v.length} rows met${low ? `; lowest ${low[1].toFixed(2)}x at ${low[0]}` : ''}`,
      v.includes('NOT met') ? 'NOT met' : v.length && v.every((x) => x === 'met') ? 'met' : 'not measured'];
  };
  const ratioOf = (key) => [key, median(rows.get(key).ratio)];
  lines.push(overall('layer forward >= 1.1x ORT on every bench_core shape, >= 1.5x causal', lines.slice(0, layers.length),
    layers.map((L) => ratioOf(L.key))));
  lines.push(overall('decode >= 1.5x ORT GQA on every (P, n) row', lines.slice(layers.length, layers.length + decodes.length),
    decodes.map(({ P, n }) => ratioOf(`decode P=${P} n=${n}`))));
  console.log(`\nIssue 28 targets vs ONNX Runtime (load average now ${loadavg()}):`);
  for (const l of lines) target(...l);
}

main().catch((e) => {
  console.error(`ort_peer.js: ${(e && e.stack) || e}`);
  process.exit(1);
});
