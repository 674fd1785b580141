// A profile's timeline of 16 ranks in a real JupyterLab (Debian's Chromium, playwright-core): the plotly
// figure shows a row per rank, a hover on a collective's bar names the call and who it waited for, a
// drag zooms the time axis, nothing goes past the cell's edge. Called by
// tests/browser/test_profile_timeline_in_lab.py with {url, token, notebook, artifacts, chromium, profile,
// cells: {name: index}}; prints one JSON line per step.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell,
  reportError,
  notebookLayout,
  shotCell,
  shutdownKernel
} from './chromium.mjs';

const STEP_TIMEOUT = 120000;
const C = cfg.cells;
const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 1000 }
});
const shot = (index, name) =>
  shotCell(page, index, path.join(cfg.artifacts, `${name}.png`));
const outputText = index =>
  page.evaluate(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[
        i
      ].node.querySelector('.jp-Cell-outputArea')?.innerText ?? '',
    index
  );

// The plot of cell `index`: its rows, ranges, traces, and where (in page pixels) a trace's first bar is.
const plot = (index, trace) =>
  page.evaluate(
    ([i, name]) => {
      const gd =
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.querySelector('.js-plotly-plot');
      if (!gd || !gd._fullLayout) {
        return null;
      }
      const L = gd._fullLayout,
        box = gd.getBoundingClientRect();
      const t = gd.data.find(d => d.name === name);
      let target = null;
      if (t && t.x && t.x.length) {
        const k = t.x.reduce((best, v, j) => (v > t.x[best] ? j : best), 0); // the widest bar
        // off the row's middle by 0.31 of a row: inside this bar (0.7 of a row high) but past the
        // narrower bars of the same row (operations: 0.55), which plotly may pick where both lie
        const row = L._size.h / Math.max(1, (L.yaxis._categories ?? []).length);
        target = {
          x: box.left + L._size.l + L.xaxis.d2p(t.base[k] + t.x[k] / 2),
          y: box.top + L._size.t + L.yaxis.d2p(t.y[k]) + 0.31 * row,
          row: t.y[k]
        };
      }
      const cell =
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.getBoundingClientRect();
      return {
        ticks: L.yaxis._categories ?? [],
        xrange: [...L.xaxis.range],
        traces: gd.data.map(d => d.name),
        width: box.width,
        height: box.height,
        cellRight: cell.right,
        plotRight: box.right,
        target,
        plotArea: {
          left: box.left + L._size.l,
          top: box.top + L._size.t,
          width: L._size.w,
          height: L._size.h
        }
      };
    },
    [index, trace]
  );

try {
  await openNotebook(page, STEP_TIMEOUT);
  await page.waitForSelector('.jp-mgpu-status', { timeout: STEP_TIMEOUT });
  await page.click('.jp-mgpu-status'); // the sidebar, where the last profile shows too
  await page.waitForSelector('#jupyter-mgpu-panel:not(.lm-mod-hidden)', {
    timeout: 10000
  });
  await runCell(page, C.init);
  await runCell(page, C.profiled);
  // what the two cells printed: a failure further on (no plot, no sidebar) then says why
  report('cells', {
    init: await outputText(C.init),
    profiled: await outputText(C.profiled)
  });
  let sidebar = null;
  try {
    await page.waitForSelector(
      '#jupyter-mgpu-panel .jp-mgpu-profile:not([hidden]) svg',
      { timeout: 30000 }
    );
    sidebar = await page.evaluate(() => {
      const p = document.querySelector(
        '#jupyter-mgpu-panel .jp-mgpu-profile:not([hidden])'
      );
      const count = k => p.querySelectorAll(`rect.jp-mgpu-profile-${k}`).length;
      const box = p.getBoundingClientRect(),
        panel = document
          .querySelector('#jupyter-mgpu-panel')
          .getBoundingClientRect();
      return {
        ranks: Number(p.dataset.ranks),
        calls: count('calls'),
        collective: count('collective'),
        wait: count('wait'),
        caption: p.querySelector('.jp-mgpu-profile-caption')?.textContent ?? '',
        right: box.right,
        panelRight: panel.right,
        cards: [
          ...document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-cluster')
        ].map(c => c.dataset.clusterId)
      };
    });
  } catch {
    /* the assertions say what is missing */
  }
  const section = await page.$(
    '#jupyter-mgpu-panel .jp-mgpu-profile:not([hidden])'
  );
  if (section) {
    await section.scrollIntoViewIfNeeded();
    await section.screenshot({
      path: path.join(cfg.artifacts, '00_sidebar_profile.png')
    });
  }
  await runCell(page, C.timeline);
  await page.waitForFunction(
    i =>
      !!window.jupyterapp.shell.currentWidget.content.widgets[
        i
      ].node.querySelector('.js-plotly-plot .bars'),
    C.timeline,
    { timeout: 30000, polling: 200 }
  );
  await runCell(page, C.summary);
  await shot(C.timeline, '01_timeline');
  const layout = await notebookLayout(page); // before the zoom: a zoomed plot's bars run past it, clipped

  // hover over the widest waiting bar: plotly's label names the wait and the rank waited for
  await page.evaluate(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[i].node
        .querySelector('.js-plotly-plot')
        .scrollIntoView({ block: 'center' }),
    C.timeline
  );
  await page.waitForTimeout(300);
  const before = await plot(C.timeline, 'waiting for the last rank');
  await page.mouse.move(before.target.x - 5, before.target.y);
  await page.mouse.move(before.target.x, before.target.y, { steps: 4 });
  let hover = null;
  try {
    await page.waitForSelector('.js-plotly-plot .hoverlayer .hovertext', {
      timeout: 5000
    });
    hover = await page.textContent('.js-plotly-plot .hoverlayer .hovertext');
  } catch {
    /* the assertions say what is missing */
  }
  await shot(C.timeline, '02_hover');

  // drag across the middle third of the plot: plotly zooms the time axis to it
  const a = before.plotArea;
  await page.mouse.move(a.left + a.width / 3, a.top + a.height / 2);
  await page.mouse.down();
  await page.mouse.move(a.left + (2 * a.width) / 3, a.top + a.height / 2, {
    steps: 8
  });
  await page.mouse.up();
  await page.waitForTimeout(800);
  const after = await plot(C.timeline, 'waiting for the last rank');
  await shot(C.timeline, '03_zoomed');
  report('timeline', {
    before,
    hover,
    after,
    layout,
    summary: await outputText(C.summary),
    sidebar
  });

  await runCell(page, C.shutdown);
  const shutdown = await outputText(C.shutdown);
  await page.evaluate(() =>
    window.jupyterapp.shell.currentWidget.sessionContext.shutdown()
  );
  report('done', { shutdown, consoleErrors });
} catch (err) {
  await reportError(err, page, '99_failure.png', consoleErrors);
  await shutdownKernel(page);
} finally {
  await close();
}
