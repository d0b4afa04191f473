/* tandem dashboard page: loads /api/state, follows /api/events (server-sent events) and draws the runs'
 * curves with uPlot and their panels with plain DOM. window.tandem holds the state and the charts (the tests
 * read the curves from there: tandem.chartData(name)). */
'use strict';

const T = window.tandem = {state: null, charts: {}, xmode: 'step', selected: 0, ready: false, streamEnded: false,
                           renders: 0};
const CAPS = {steps: 300, lines: 200};            /* the server keeps these lists this short (dash_view.h) */
const COLORS = ['#2f6fdf', '#e8873a', '#3aa876', '#a64ac9', '#c0392b', '#13a3b5', '#8c6d1f', '#e84393'];
const HAS_UPLOT = typeof window.uPlot === 'function';

/* ---- small helpers */

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'style') e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
function fill(id, ...kids) { const b = document.querySelector('#' + id + ' .body'); b.replaceChildren(...kids.flat()); }
function bytes(n) {
  if (n === null || n === undefined || n < 0) return '–';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : n.toFixed(0)) + ' ' + u[i];
}
function ms(s) { return s === null || s === undefined ? '–' : (1000 * s).toFixed(s < 0.01 ? 2 : 1) + ' ms'; }
function dur(s) {
  if (!(s >= 0)) return '–';
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), x = s % 60;
  return (h ? h + 'h ' : '') + (h || m ? m + 'm ' : '') + x + 's';
}
/* the exchange's codec after the strategy's name, when it is not plain fp32 */
function codec(job) { return job.compression && job.compression !== 'fp32' ? ' ' + job.compression : ''; }
function fmt(x, d) { return x === null || x === undefined ? '–' : Number(x).toPrecision(d || 4); }
function table(head, rows) {
  return el('table', {}, el('tr', {}, head.map(h => el('th', {}, h))), rows);
}
function run() { return (T.state && T.state.runs[T.selected]) || {}; }

/* ---- state and events */

async function load() {
  const r = await fetch('/api/state', {credentials: 'same-origin', cache: 'no-store'});
  if (!r.ok) throw new Error('/api/state: HTTP ' + r.status);
  T.state = await r.json();
  render();
  listen(T.state.seq);
}

function listen(seq) {
  const es = new EventSource('/api/events?since=' + seq);
  T.source = es;
  es.onopen = () => conn('live', 'live');
  es.onmessage = e => apply(JSON.parse(e.data));
  es.addEventListener('resync', () => { es.close(); load().catch(down); });
  es.onerror = () => {
    const live = T.state && T.state.mode === 'live';
    if (live && run().info && run().info.status !== 'running') { /* the run ended and took its server with it */
      es.close();
      T.streamEnded = true;
      conn('ended', '');
      schedule();
    } else {
      conn('reconnecting…', 'down');
    }
  };
}

function apply(ev) { /* one event: the changes of one commit, in order */
  const runs = T.state.runs;
  for (const op of ev.ops) {
    while (runs.length <= op.run) runs.push({});
    const r = runs[op.run];
    if (op.op === 'reset') runs[op.run] = {};
    else if (op.op === 'set') r[op.part] = op.data;
    else if (op.op === 'append') {
      const list = r[op.part] || (r[op.part] = []);
      for (const x of op.data) list.push(x);
      const cap = CAPS[op.part];
      if (cap && list.length > cap) list.splice(0, list.length - cap);
    }
  }
  T.state.seq = ev.seq;
  schedule();
}

let pending = null, last = 0;
function schedule() { /* at most four redraws a second, however fast the events come */
  if (pending) return;
  const wait = Math.max(0, 250 - (Date.now() - last));
  pending = setTimeout(() => { pending = null; last = Date.now(); render(); }, wait);
}

function conn(text, cls) { const c = document.getElementById('conn'); c.textContent = text; c.className = 'conn ' + cls; }
function down(err) { conn('disconnected', 'down'); console.error(err); }

/* ---- charts */

/* step -> seconds since training started, from the run's own log (tandem_ranks.jsonl) */
function clock(r) {
  const m = new Map();
  for (const p of r.points || []) if (p.elapsed >= 0) m.set(p.step, p.elapsed);
  for (const e of r.extras || []) m.set(e.step, e.time);
  for (const s of r.steps || []) m.set(s.step, s.time);
  return m;
}

/* The series of one chart: [{label, dash, color, xy: [[x, y], ...]}] over every run. */
function seriesOf(name) {
  const out = [];
  (T.state.runs || []).forEach((r, i) => {
    const label = (r.info && r.info.name) || 'run ' + (i + 1), color = COLORS[i % COLORS.length], t = clock(r);
    const x = (step, elapsed) => T.xmode === 'time' ? (t.has(step) ? t.get(step) : elapsed) : step;
    const pick = (list, key) => (list || []).filter(p => p[key] !== null && p[key] !== undefined)
      .map(p => [x(p.step, p.elapsed), p[key]]).filter(([a]) => a !== undefined && a !== null && a >= 0);
    if (name === 'loss') {
      out.push({label: label + ' train', color, xy: pick(r.points, 'loss')});
      if ((r.evals || []).length) out.push({label: label + ' eval', color, dash: true, xy: pick(r.evals, 'eval_loss')});
    } else if (name === 'lr') {
      out.push({label, color, xy: pick(r.points, 'lr')});
    } else {
      out.push({label, color, xy: pick(r.extras, name)});
    }
  });
  return out;
}

/* uPlot's aligned table: the union of the x values, each series null where it has no point */
function align(series) {
  const xs = [...new Set(series.flatMap(s => s.xy.map(p => p[0])))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const cols = series.map(s => {
    const c = new Array(xs.length).fill(null);
    for (const [x, y] of s.xy) c[at.get(x)] = y;
    return c;
  });
  return [xs, ...cols];
}

function axisTime(u, vals) { return vals.map(v => v === null ? '' : dur(v)); }
/* y ticks: exponent form for the small numbers a learning rate is */
function axisValue(u, vals) {
  return vals.map(v => v === null ? '' : v !== 0 && Math.abs(v) < 1e-3 ? v.toExponential(1) : Number(v.toPrecision(6)).toString());
}

function drawChart(name) {
  const box = document.querySelector('#chart-' + name + ' .plot');
  const series = seriesOf(name);
  if (!HAS_UPLOT) { /* the latest values at least, never a blank box */
    const rows = series.filter(s => s.xy.length).map(s => {
      const p = s.xy[s.xy.length - 1];
      return el('tr', {}, el('td', {}, s.label), el('td', {class: 'num'}, (T.xmode === 'time' ? dur(p[0]) : 'step ' + p[0])),
                el('td', {class: 'num'}, fmt(p[1])));
    });
    box.replaceChildren(el('div', {class: 'nochart'}, 'no chart without uPlot; newest values:'),
                        rows.length ? table(['series', 'at', 'value'], rows) : el('p', {class: 'muted'}, 'none yet'));
    return;
  }
  const data = align(series), key = series.map(s => s.label + (s.dash ? '~' : '')).join('|') + '|' + T.xmode;
  let c = T.charts[name];
  const width = Math.max(300, box.clientWidth || 400);
  if (!c || c.key !== key) {
    if (c) c.u.destroy();
    const opts = {
      width, height: 220, legend: {live: true},
      scales: {x: {time: false}, y: {auto: true}},
      axes: [{values: T.xmode === 'time' ? axisTime : undefined}, {size: 64, values: axisValue}],
      cursor: {drag: {x: true, y: false}},
      series: [{label: T.xmode === 'time' ? 'time' : 'step', value: (u, v) => v === null ? '–' : T.xmode === 'time' ? dur(v) : v}]
        .concat(series.map(s => ({label: s.label, stroke: s.color, width: 1.5, dash: s.dash ? [6, 4] : undefined,
                                  spanGaps: true, points: {show: s.xy.length < 60}}))),
      hooks: {setSelect: [u => { if (u.select.width > 0) T.charts[name].zoomed = true; }]},
    };
    box.replaceChildren();
    c = T.charts[name] = {u: new uPlot(opts, data, box), key, zoomed: false, name};
    box.ondblclick = () => { c.zoomed = false; c.u.setData(c.u.data, true); };
  } else {
    c.u.setData(data, !c.zoomed);
    if (Math.abs(c.u.width - width) > 4) c.u.setSize({width, height: 220});
  }
}

/* For the tests: each series of a chart as the chart holds it, [[x, y], ...] without the gaps. */
T.chartData = name => {
  const c = T.charts[name];
  if (!c) return null;
  return c.u.series.slice(1).map((s, i) => ({label: s.label,
    points: c.u.data[0].map((x, k) => [x, c.u.data[i + 1][k]]).filter(p => p[1] !== null && p[1] !== undefined)}));
};

/* ---- panels */

function progress(r) {
  const e = r.eta, info = r.info || {}, box = document.getElementById('progress');
  const parts = [el('b', {}, info.status || 'waiting for the run\'s logs')];
  if (e) {
    parts.push(` · step ${e.step} of ${e.total || '?'}`, ` · ${dur(e.time)} since training started`);
    if (info.status === 'running') {
      const finish = new Date(Date.now() + 1000 * e.remaining_s);
      parts.push(` · ${ms(e.step_s)} a step · ETA ${dur(e.remaining_s)} (about ${finish.toLocaleTimeString()})`);
    }
  }
  if (T.state.mode === 'live' && T.streamEnded)
    parts.push(el('div', {class: 'muted'}, 'The run has ended and its dashboard stopped with it; ',
                  el('code', {}, 'tandem dashboard ' + (info.dir || 'OUTPUT_DIR')), ' shows it again.'));
  box.replaceChildren(...parts);
}

function straggler(r) {
  const s = r.straggler, box = document.getElementById('straggler');
  box.className = 'bar-line';
  box.removeAttribute('data-rank');
  if (!s) { box.replaceChildren('Straggler: not enough steps measured yet.'); return; }
  if (s.rank >= 0) {
    box.className = 'bar-line named';
    box.setAttribute('data-rank', s.rank);
    box.replaceChildren(`Straggler: rank ${s.rank} on host ${s.host || '?'} is the slowest, ${fmt(s.ratio, 3)}x the median ` +
      `compute time per sample, in every window of ${s.window} steps since step ${s.since}; the others wait for it at each exchange.`);
  } else {
    box.replaceChildren(`No straggler: no rank has been ${'\u2265'} 1.15x the median compute time per sample for 3 windows ` +
      `in a row (last window: ${fmt(s.ratio, 3)}x).`);
  }
}

function ranks(r) {
  const job = r.job || {}, st = r.ranks, info = job.ranks || [];
  const n = Math.max(info.length, st ? st.ranks.length : 0);
  if (!n) { fill('ranks', el('p', {class: 'muted'}, 'No per-rank timings yet (tandem_ranks.jsonl).')); return; }
  const slow = r.straggler && r.straggler.rank;
  const total = q => q ? q.data + q.compute + q.wait + q.optimizer : 0;
  const most = Math.max(...(st ? st.ranks.map(total) : [0]), 1e-9);
  const rows = [];
  for (let k = 0; k < n; k++) {
    const q = st && st.ranks[k], s = info[k] || {};
    const seg = (cls, v) => el('span', {class: cls, style: `width:${(100 * v / most).toFixed(2)}%`, title: ms(v)});
    rows.push(el('tr', {'data-rank': k, class: k === slow ? 'slow' : ''},
      el('td', {}, k), el('td', {}, s.host || '?'), el('td', {}, s.threads ? s.threads + ' thr' : ''),
      el('td', {class: 'muted'}, s.device || ''),
      el('td', {class: 'num'}, q ? fmt(q.samples, 3) : '–'), el('td', {class: 'num'}, q ? ms(total(q)) : '–'),
      el('td', {}, q ? el('div', {class: 'stack'}, seg('seg-data', q.data), seg('seg-compute', q.compute),
                             seg('seg-wait', q.wait), seg('seg-opt', q.optimizer)) : ''),
      el('td', {class: 'num'}, q ? ms(q.data) : '–'), el('td', {class: 'num'}, q ? ms(q.compute) : '–'),
      el('td', {class: 'num'}, q ? ms(q.wait) : '–'), el('td', {class: 'num'}, q ? ms(q.optimizer) : '–'),
      el('td', {class: 'num'}, q ? ms(q.per_sample) : '–')));
  }
  const legend = el('div', {class: 'legend'}, [['seg-data', 'data'], ['seg-compute', 'compute (forward + backward)'],
    ['seg-wait', 'waiting for the exchange'], ['seg-opt', 'optimizer']].map(([c, t]) => el('span', {}, el('i', {class: c}), t)));
  fill('ranks', legend,
       table(['rank', 'host', 'cores', 'device', 'samples', 'step', 'split', 'data', 'compute', 'wait', 'optimizer',
              'compute/sample'], rows),
       el('p', {class: 'muted'}, st ? `Means over steps ${st.from}–${st.to}.` : 'Waiting for complete steps.'));
}

function links(r) {
  const job = r.job;
  if (!job) { fill('links', el('p', {class: 'muted'}, 'Waiting for the job line (tandem_ranks.jsonl).')); return; }
  const out = [];
  const eta = r.eta, per = job.bytes_per_step || 0;
  const cap = job.capacity ? job.capacity.machine_Bps : null;
  if (job.machines < 2) {
    out.push(el('p', {}, job.capacity_note || 'one machine'));
  } else {
    const l = r.links, hosts = [];
    for (const q of job.ranks || []) if (q.local_rank === 0) hosts[q.node] = q.host;
    const meter = v => cap ? el('div', {class: 'meter' + (v > cap ? ' over' : '')},
                                el('span', {style: `width:${Math.min(100, 100 * v / cap).toFixed(1)}%`})) : '';
    const rows = (l ? l.machines : []).map((m, i) => el('tr', {},
      el('td', {}, i), el('td', {}, hosts[i] || '?'), el('td', {class: 'num'}, m ? bytes(m[0]) + '/s' : '–'), el('td', {}, m ? meter(m[0]) : ''),
      el('td', {class: 'num'}, m ? bytes(m[1]) + '/s' : '–'), el('td', {}, m ? meter(m[1]) : '')));
    out.push(table(['machine', 'host', 'in', '', 'out', ''], rows));
    out.push(el('p', {}, cap ? `Capacity: ${bytes(cap)}/s each way per machine — ${job.capacity_note}.`
                             : el('span', {}, 'Capacity: ', el('b', {}, job.capacity_note))));
    out.push(el('p', {class: 'muted'}, 'In and out count every byte of the machine\'s network interfaces but the loopback (/proc/net/dev).'));
  }
  out.push(el('p', {}, `The strategy (${job.sync}${codec(job)}${job.zero_stage ? ', ZeRO stage ' + job.zero_stage : ''}) sends ` +
    `${bytes(per)} per step from each machine` + (per && eta && eta.step_s ? `: ${bytes(per / eta.step_s)}/s at the current step time.` : '.')));
  fill('links', out);
}

function memory(r) {
  const job = r.job, m = r.memory;
  if (!job || !m) { fill('memory', el('p', {class: 'muted'}, 'No memory sample yet (every 2 s per rank).')); return; }
  const f = job.memory_formula || {};
  const rows = m.ranks.map((x, k) => {
    const model = x ? x[0] + x[1] + x[2] : null;
    return el('tr', {}, el('td', {}, k), el('td', {class: 'num'}, x ? bytes(x[0]) : '–'), el('td', {class: 'num'}, x ? bytes(x[1]) : '–'),
      el('td', {class: 'num'}, x ? bytes(x[2]) : '–'), el('td', {class: 'num'}, x ? bytes(model) : '–'),
      el('td', {class: 'num'}, bytes(f.bytes)), el('td', {class: 'num'}, x && f.bytes ? fmt(model / f.bytes, 3) : '–'),
      el('td', {class: 'num'}, x ? bytes(x[3]) : '–'));
  });
  fill('memory', table(['rank', 'params', 'grads', 'AdamW', 'state', 'formula', 'ratio', 'resident'], rows),
       el('p', {class: 'muted'}, `Model state: the trainable parameters, gradients and AdamW moments this rank holds (page ` +
          `residency), against ZeRO stage ${job.zero_stage}'s ${f.text} with P = ${job.trainable} trainable parameters ` +
          `and N = ${job.world} ranks (4 + 4 + 8 bytes a parameter). Resident: the whole process. Step ${m.step}.`));
}

function jobPanel(r) {
  const j = r.job;
  if (!j) { fill('job', el('p', {class: 'muted'}, 'Waiting for the job line (tandem_ranks.jsonl).')); return; }
  const byHost = new Map();
  for (const q of j.ranks || []) {
    if (!byHost.has(q.host)) byHost.set(q.host, []);
    byHost.get(q.host).push(q);
  }
  const rows = [...byHost].map(([h, qs]) => el('tr', {}, el('td', {}, h), el('td', {}, qs.map(q => q.rank).join(', ')),
    el('td', {}, [...new Set(qs.map(q => q.threads + ' threads'))].join(', ')),
    el('td', {class: 'muted'}, [...new Set(qs.map(q => q.device))].join('; '))));
  const out = [el('p', {}, `${j.machines} machine(s), ${j.world} rank(s); ${j.model} model, ${j.trainable} trainable and ` +
      `${j.frozen} frozen parameters; ${j.sync}${codec(j)}${j.balance_ranks ? ' with balance_ranks' : ''}, ZeRO stage ${j.zero_stage}, ` +
      `global batch ${j.global_batch}, ${j.total_steps} steps.`),
    table(['host', 'ranks', 'cores per rank', 'device'], rows)];
  if (j.topology) for (const t of j.topology) out.push(el('div', {}, el('b', {}, 'tandem topo on ' + t.host)), el('pre', {}, t.text));
  else out.push(el('p', {class: 'muted'}, 'Topology: not recorded for this run (tandem topo on each machine shows it).'));
  fill('job', out);
}

function plan(r) {
  const p = r.plan;
  if (!p) {
    fill('plan', el('p', {}, el('b', {}, 'no plan yet'), ' — a run of several ranks writes tandem_plan.json after its ' +
      'first steps: tandem plan\'s prediction for its strategy, shown here next to the measurement (one rank: nothing to plan).'));
    return;
  }
  if (p.error) { fill('plan', el('p', {}, p.error)); return; }
  const model = r.memory && r.memory.ranks[0] ? r.memory.ranks[0].slice(0, 3).reduce((a, b) => a + b, 0) : null;
  const measured = {step_s: r.eta ? r.eta.step_s : null, bytes_per_step: r.job ? r.job.bytes_per_step : null, memory_per_rank: model};
  const show = (k, v) => v === null || v === undefined ? '–' : k === 'step_s' ? ms(v) : typeof v === 'number' && k !== 'step_s' ? bytes(v) : String(v);
  fill('plan', table(['', 'planned', 'measured'], Object.keys(p).map(k =>
    el('tr', {}, el('td', {}, k), el('td', {class: 'num'}, show(k, p[k])), el('td', {class: 'num'}, show(k, measured[k]))))));
}

function checkpoints(r) {
  const c = r.checkpoints || [];
  fill('checkpoints', c.length ? table(['step', 'folder', 'at'], c.slice().reverse().map(x =>
    el('tr', {}, el('td', {class: 'num'}, x.step), el('td', {}, x.dir), el('td', {}, dur(x.time)))))
    : el('p', {class: 'muted'}, 'None written yet.'));
}

function lines(r) {
  const ls = r.lines || [];
  if (T.state.mode !== 'live') {
    fill('lines', el('p', {class: 'muted'}, 'Output lines are shown while a run serves its own dashboard (dashboard: true).'));
    return;
  }
  const body = document.querySelector('#lines .body'), atEnd = body.scrollTop + body.clientHeight >= body.scrollHeight - 4;
  fill('lines', ls.map(l => el('div', {class: 'ln ' + l.level}, l.text)));
  if (atEnd) body.scrollTop = body.scrollHeight;
}

/* ---- the whole page */

function render() {
  const runs = T.state.runs || [];
  document.getElementById('title').textContent = T.state.mode === 'live'
    ? `live: ${(runs[0] && runs[0].info && runs[0].info.dir) || ''}` : `${runs.length} run(s)`;
  const pick = document.getElementById('run');
  if (runs.length > 1 && pick.options.length !== runs.length) {
    document.getElementById('runpick').hidden = false;
    pick.replaceChildren(...runs.map((r, i) => el('option', {value: i}, (r.info && r.info.name) || 'run ' + (i + 1))));
    pick.value = T.selected;
  }
  for (const name of ['loss', 'lr', 'grad_norm', 'tokens_per_s']) drawChart(name);
  const r = run();
  progress(r); straggler(r); ranks(r); links(r); memory(r); jobPanel(r); plan(r); checkpoints(r); lines(r);
  T.renders++;
  T.ready = true;
}

function start() {
  if (!HAS_UPLOT) {
    const n = document.getElementById('notice');
    n.hidden = false;
    n.replaceChildren('The charts need uPlot, which this tandem could not find. Run ', el('code', {}, 'scripts/install-deps.sh'),
      ' (it installs the npm package uplot into deps/node_modules, outside git) and restart the dashboard, or point ',
      el('code', {}, 'TANDEM_UPLOT_DIR'), ' at uPlot\'s dist folder. Everything else on this page works without it.');
  }
  document.getElementById('xmode').onchange = e => { T.xmode = e.target.value; render(); };
  document.getElementById('run').onchange = e => { T.selected = Number(e.target.value); render(); };
  window.addEventListener('resize', schedule);
  load().catch(down);
}

start();
