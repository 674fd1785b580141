// Drives a real JupyterLab in Debian's Chromium (playwright-core): shows a tensor's placement view and a
// traced ring matmul's player, steps it and reads what is drawn; then opens the standalone HTML the
// notebook saved from file:// with every network request refused, and plays it to the end.
// Called by tests/browser/test_placement_player.py with one JSON argument
// {url, token, notebook, html, artifacts, chromium, profile}; prints one JSON line per step.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell as runCellIn,
  reportError,
  stepForward,
  lastAndBack,
  offlinePage,
  playToEnd,
  shutdownKernel
} from './chromium.mjs';

const T = 120000;
const { page, consoleErrors, newPage, close } = await openBrowser({
  viewport: { width: 1400, height: 1000 },
  extraArgs: ['--allow-file-access-from-files']
});

const runCell = (i, wait = true) => runCellIn(page, i, wait);
const cellOut = i =>
  page.evaluate(
    k =>
      window.jupyterapp.shell.currentWidget.content.widgets[k].node.innerText,
    i
  );

// what a placement widget inside `root` draws now
const drawn = sel =>
  page.evaluate(s => {
    const p = document.querySelector(s);
    if (!p) {
      return null;
    }
    const svg = p.querySelector('svg.mgpu-placement-svg');
    return {
      counter: p.querySelector('.mgpu-player-counter')?.textContent,
      owners: Array.from(p.querySelectorAll('.mgpu-tile')).map(t =>
        t.getAttribute('data-owners')
      ),
      mem: Array.from(p.querySelectorAll('.mgpu-rank')).map(r =>
        Number(r.getAttribute('data-mem'))
      ),
      arrows: p.querySelectorAll('.mgpu-arrow').length,
      computes: p.querySelectorAll('.mgpu-compute').length,
      caption: svg?.querySelector('text')?.textContent,
      tip: p.querySelector('.mgpu-tile title')?.textContent,
      svgLength: svg ? svg.outerHTML.length : 0,
      svgHash: svg
        ? Array.from(svg.outerHTML).reduce(
            (h, c) => (h * 31 + c.charCodeAt(0)) | 0,
            0
          )
        : 0
    };
  }, sel);

try {
  await openNotebook(page, T);
  await runCell(0);
  await page.waitForFunction(
    () =>
      /Session/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[0].node.innerText
      ),
    null,
    { timeout: T, polling: 200 }
  );
  // the placement view of a Block2D tensor
  await runCell(1);
  await page.waitForFunction(
    () => document.querySelectorAll('.mgpu-placement svg').length >= 1,
    null,
    { timeout: T }
  );
  await page.evaluate(() => {
    document.querySelectorAll('.mgpu-placement')[0].id = 'mgpu-view';
  });
  const view = await drawn('#mgpu-view');
  report('view', view);
  // the traced ring matmul's player
  await runCell(2);
  await page.waitForFunction(
    () => document.querySelectorAll('.mgpu-placement svg').length >= 2,
    null,
    { timeout: T }
  );
  await page.evaluate(() => {
    document.querySelectorAll('.mgpu-placement')[1].id = 'mgpu-trace';
  });
  const sel = '#mgpu-trace';
  await page.screenshot({
    path: path.join(cfg.artifacts, 'trace_0.png'),
    fullPage: true
  });
  const seen = await stepForward(page, sel, 6, () => drawn(sel));
  await page.screenshot({
    path: path.join(cfg.artifacts, 'trace_6.png'),
    fullPage: true
  });
  const { end, back } = await lastAndBack(page, sel, () => drawn(sel));
  report('stepped', { seen, end, back });
  await runCell(3);
  await page.waitForFunction(
    () =>
      /saved/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[3].node.innerText
      ),
    null,
    { timeout: T, polling: 200 }
  );
  report('saved', { output: await cellOut(3) });
  await runCell(4);
  await page.waitForFunction(
    () =>
      window.jupyterapp.shell.currentWidget.sessionContext.session.kernel
        .status === 'idle',
    null,
    { timeout: T, polling: 200 }
  );

  // the standalone page: no kernel, no network
  const { page: off, requests } = await offlinePage(newPage);
  await off.goto('file://' + cfg.html, { timeout: T });
  await off.waitForSelector('.mgpu-placement svg', { timeout: 20000 });
  const s0 = await off.evaluate(
    () => document.querySelector('.mgpu-player-counter').textContent
  );
  const tiles0 = await off.evaluate(
    () => document.querySelector('.mgpu-placement-stage').innerHTML.length
  );
  await playToEnd(off, 60000);
  const s1 = await off.evaluate(() => ({
    counter: document.querySelector('.mgpu-player-counter').textContent,
    play: document.querySelector('.mgpu-player-play, .mgpu-player-pause')
      .textContent,
    owners: Array.from(document.querySelectorAll('.mgpu-tile')).map(t =>
      t.getAttribute('data-owners')
    )
  }));
  await off.screenshot({
    path: path.join(cfg.artifacts, 'standalone_end.png'),
    fullPage: true
  });
  report('standalone', { start: s0, tiles0, end: s1, requests });

  // a 2,400-event trace: time stepping through 300 frames and one jump from first to last
  const big = await newPage();
  await big.goto('file://' + cfg.big, { timeout: T });
  await big.waitForSelector('.mgpu-placement svg', { timeout: 20000 });
  const timing = await big.evaluate(() => {
    const m = window.mgpuModel,
      n = m.get('data').frames.length;
    let t0 = performance.now();
    for (let i = 1; i < n; i++) {
      m.set('index', i);
    }
    const perStepMs = (performance.now() - t0) / (n - 1);
    m.set('index', 0);
    t0 = performance.now();
    m.set('index', n - 1);
    const scrubMs = performance.now() - t0;
    return {
      frames: n,
      perStepMs,
      scrubMs,
      counter: document.querySelector('.mgpu-player-counter').textContent
    };
  });
  report('big', timing);
  report('done', { consoleErrors });
} catch (err) {
  await reportError(err, page, 'error.png', consoleErrors);
} finally {
  await shutdownKernel(page);
  await close();
}
