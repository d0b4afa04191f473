// The dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core (tests/node_modules).
// Reads what the page shows from the page itself (window.tandem.chartData: the uPlot charts' own data; the panels'
// DOM) and compares it with the run's files, read here independently (JSON.parse of trainer_log.jsonl).
//   node dashboard_browser.mjs live URL OUT_DIR SHOT.png HOST [--evals] [--straggler RANK]
//       opened before the run starts (the address is retried until its server answers) and kept open through it:
//       the curves grow while the run reads as running, without a reload; once the page says the run finished, its
//       loss, eval loss (--evals) and lr curves hold exactly trainer_log.jsonl's points; the per-rank panel lists
//       ranks 0 and 1 on HOST; with --straggler the page names that rank and HOST as the straggler, else none
//   node dashboard_browser.mjs files URL SHOT.png DIR...   finished runs: every run's curves exactly its file's
//   node dashboard_browser.mjs nocharts URL SHOT.png       without uPlot: the page says how to get it, panels drawn
// Exit 0 when every check holds; each failed check is one line "FAIL: ...".
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [mode, url, ...rest] = process.argv.slice(2);
const LIMIT_MS = Number(process.env.DASH_TEST_TIMEOUT_S || 1200) * 1000; /* a run on a busy machine takes its time */
let fails = 0, checks = 0;
function check(ok, what) { checks++; if (!ok) { fails++; console.log('FAIL: ' + what); } }
const sleep = ms => new Promise(r => setTimeout(r, ms));

/* trainer_log.jsonl as [step, value] pairs of one key, from the lines that have it */
function fileSeries(dir, key) {
  const text = fs.readFileSync(path.join(dir, 'trainer_log.jsonl'), 'utf8');
  return text.split('\n').filter(l => l.trim()).map(l => JSON.parse(l))
    .filter(o => typeof o[key] === 'number').map(o => [o.current_steps, o[key]]);
}
function same(a, b) { return JSON.stringify(a) === JSON.stringify(b); }
function seriesOf(data, label) { const s = (data || []).find(x => x.label === label); return s ? s.points : null; }

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'tandem-chromium-'));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, userDataDir: profile,
  /* with headless and userDataDir puppeteer adds --headless and --user-data-dir=PROFILE (a fresh one) */
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
const errors = [];
try {
  const page = await browser.newPage();
  page.on('pageerror', e => errors.push(e.message));
  await page.setViewport({width: 1400, height: 1900});
  for (const t0 = Date.now();;) { /* the run's server may not be up yet */
    try {
      await page.goto(url, {waitUntil: 'load'});
      break;
    } catch (e) {
      if (Date.now() - t0 > LIMIT_MS) throw e;
      await sleep(200);
    }
  }
  await page.evaluate(() => { window.openedOnce = true; }); /* gone if the page reloads */
  const until = async (fn, arg, what) => { /* polls fn in the page until it returns a truthy value */
    const t0 = Date.now();
    for (;;) {
      const v = await page.evaluate(fn, arg).catch(() => null);
      if (v) return v;
      if (Date.now() - t0 > LIMIT_MS) { check(false, 'timed out waiting for ' + what); return null; }
      await sleep(250);
    }
  };
  await until(() => window.tandem && window.tandem.ready, null, 'the page to draw');

  if (mode === 'live') {
    const [dir, shot, host, ...flags] = rest;
    const evals = flags.includes('--evals'), si = flags.indexOf('--straggler'), slow = si >= 0 ? Number(flags[si + 1]) : -1;
    const name = path.basename(dir);
    let live = 0; /* polls that saw curves while the run read as running */
    const t0 = Date.now();
    for (;;) {
      const s = await page.evaluate(n => {
        const r = window.tandem.state.runs[0] || {}, d = window.tandem.chartData('loss'), tr = d && d.find(x => x.label === n + ' train');
        return {status: r.info && r.info.status, points: tr ? tr.points.length : 0};
      }, name);
      if (s.status === 'running' && s.points > 0) live++;
      if (s.status === 'finished' || s.status === 'failed') break;
      if (Date.now() - t0 > LIMIT_MS) { check(false, 'timed out waiting for the run to finish: ' + JSON.stringify(s)); break; }
      await sleep(250);
    }
    check(live > 0, 'the page showed curves while the run was running (' + live + ' polls)');
    check(await page.evaluate(() => window.openedOnce === true), 'the page was never reloaded');
    const loss = await page.evaluate(() => window.tandem.chartData('loss')), lr = await page.evaluate(() => window.tandem.chartData('lr'));
    for (const [key, label, data] of [['loss', name + ' train', loss], ['eval_loss', name + ' eval', loss], ['lr', name, lr]]) {
      if (key === 'eval_loss' && !evals) continue;
      const shown = seriesOf(data, label) || [], file = fileSeries(dir, key);
      check(file.length >= 3 && same(shown, file), `${label} (${key}): the chart holds exactly trainer_log.jsonl's ` +
            `${file.length} points: ${JSON.stringify(shown).slice(0, 160)} vs ${JSON.stringify(file).slice(0, 160)}`);
    }
    const ranks = await page.evaluate(() => [...document.querySelectorAll('#ranks tr[data-rank]')]
      .map(r => [r.dataset.rank, r.cells[1].textContent, r.cells[5].textContent !== '–']));
    check(same(ranks, [['0', host, true], ['1', host, true]]), 'the per-rank panel lists ranks 0 and 1 on ' + host +
          ' with their step times: ' + JSON.stringify(ranks));
    const named = await page.evaluate(() => { const s = document.getElementById('straggler'); return [s.dataset.rank ?? null, s.textContent]; });
    if (slow >= 0)
      check(named[0] === String(slow) && named[1].includes(`rank ${slow} on host ${host}`), 'the straggler is named with its host: ' + named[1]);
    else
      check(named[0] === null && named[1].startsWith('No straggler'), 'no straggler is named in an even run: ' + named[1]);
    await page.screenshot({path: shot, fullPage: true});
  } else if (mode === 'files') {
    const [shot, ...dirs] = rest;
    const expect = [];
    for (const dir of dirs) {
      const n = path.basename(dir);
      expect.push([n + ' train', fileSeries(dir, 'loss')], [n + ' eval', fileSeries(dir, 'eval_loss')]);
    }
    const data = await until(e => {
      const d = window.tandem.chartData('loss');
      return d && e.every(([l, pts]) => { const s = d.find(x => x.label === l); return pts.length === 0 || (s && s.points.length === pts.length); }) ? d : null;
    }, expect, 'every run\'s points');
    for (const [label, pts] of expect) {
      if (!pts.length) continue;
      check(same(seriesOf(data, label), pts), `${label}: the chart holds exactly trainer_log.jsonl's ${pts.length} points`);
    }
    const options = await page.evaluate(() => [...document.querySelectorAll('#run option')].map(o => o.textContent));
    check(same(options, dirs.map(d => path.basename(d))), 'the run picker lists the runs: ' + JSON.stringify(options));
    const status = await page.evaluate(() => window.tandem.state.runs.map(r => r.info && r.info.status));
    check(status.every(s => s === 'finished'), 'every run reads as finished: ' + JSON.stringify(status));
    await page.screenshot({path: shot, fullPage: true});
  } else if (mode === 'nocharts') {
    const [shot] = rest;
    const notice = await page.evaluate(() => { const n = document.getElementById('notice'); return n.hidden ? '' : n.textContent; });
    check(notice.includes('uPlot') && notice.includes('scripts/install-deps.sh'), 'the page says how to get uPlot: ' + notice);
    const drawn = await until(() => document.querySelectorAll('#ranks tr[data-rank]').length >= 1 &&
                                    document.querySelectorAll('.nochart').length === 4, null, 'the panels without charts');
    check(drawn, 'the ranks panel and the four chart boxes are drawn without uPlot');
    await page.screenshot({path: shot, fullPage: true});
  } else {
    check(false, 'unknown mode ' + mode);
  }
} finally {
  await browser.close();
  fs.rmSync(profile, {recursive: true, force: true});
}
check(errors.length === 0, 'no script error on the page: ' + errors.join('; '));
console.log(`dashboard_browser ${mode}: ${checks} checks, ${fails} failed`);
process.exit(fails ? 1 : 0);
