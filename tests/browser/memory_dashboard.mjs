// Drives a real JupyterLab in Debian's Chromium (playwright-core): %mgpu_init 2 shows the memory
// dashboard, a second view of it is displayed, then a %%mgpu cell allocates 256 MiB on rank 1 and
// sleeps; while that cell is still running the script reads rank 1's row in both views, pauses from
// the second view and checks the first froze too; after %mgpu_shutdown every badge must read "shut down".
// Last, a 64-rank dashboard fed with synthetic samples (no cluster) must fit its cell: hosts folded,
// nothing wider than the output, a bounded list that scrolls. Called by tests/browser/test_memory_dashboard.py
// with one JSON argument {url, token, notebook, artifacts, chromium, profile}; prints one JSON line per step.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell as runCellIn,
  reportError,
  shutdownKernel
} from './chromium.mjs';

const T = 90000;
const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 900 }
});

const runCell = (i, wait = true) => runCellIn(page, i, wait);

const cellOutput = i =>
  page.evaluate(
    k =>
      window.jupyterapp.shell.currentWidget.content.widgets[k].node.innerText,
    i
  );
const cellRunning = i =>
  page.evaluate(
    k =>
      window.jupyterapp.shell.currentWidget.content.widgets[k].model
        .executionState === 'running',
    i
  );

// rank 1's row in every dashboard view: the text next to its bar, its badge, its bar width, pause label
const views = () =>
  page.evaluate(() =>
    Array.from(document.querySelectorAll('.mgpu-mem')).map(v => {
      const row = v.querySelector('.mgpu-mem-row[data-rank="1"]');
      return {
        rows: v.querySelectorAll('.mgpu-mem-row').length,
        text: row?.querySelector('.mgpu-mem-text')?.textContent ?? null,
        badge: row?.querySelector('.mgpu-mem-badge')?.textContent ?? null,
        width: row?.querySelector('.mgpu-mem-used')?.style.width ?? null,
        line:
          row
            ?.querySelector('.mgpu-mem-timeline-line')
            ?.getAttribute('points') ?? null,
        pause: v.querySelector('.mgpu-mem-pause')?.textContent ?? null,
        status: v.querySelector('.mgpu-mem-status')?.textContent ?? null,
        badges: Array.from(v.querySelectorAll('.mgpu-mem-badge')).map(
          b => b.textContent
        ),
        marks: Array.from(
          row?.querySelectorAll('.mgpu-mem-timeline-restart title') ?? []
        ).map(t => t.textContent)
      };
    })
  );

// The 64-rank dashboard (the last view) laid out: its groups, rows, and whether anything is wider than
// the cell's output or the list taller than its bound.
const bigLayout = () =>
  page.evaluate(() => {
    const views = document.querySelectorAll('.mgpu-mem');
    const v = views[views.length - 1];
    const out = v.closest('.jp-OutputArea-output') ?? v.parentElement;
    const rows = v.querySelector('.mgpu-mem-rows');
    const right = out.getBoundingClientRect().right + 1;
    const wide = Array.from(
      v.querySelectorAll('.mgpu-mem-row, .mgpu-mem-host, .mgpu-mem-header')
    ).filter(e => {
      const r = e.getBoundingClientRect();
      return r.width > 0 && r.right > right;
    }).length;
    return {
      groups: Array.from(v.querySelectorAll('details.mgpu-mem-group')).map(
        d => ({
          host: d.dataset.host,
          open: d.open,
          summary: d.querySelector('summary').textContent
        })
      ),
      rows: v.querySelectorAll('.mgpu-mem-row').length,
      // a folded <details> hides its rows (content-visibility): they are there, not shown
      shownRows: Array.from(v.querySelectorAll('.mgpu-mem-row')).filter(r =>
        r.checkVisibility()
      ).length,
      rowHeight: Math.max(
        ...Array.from(v.querySelectorAll('.mgpu-mem-row'))
          .filter(r => r.checkVisibility())
          .map(r => r.getBoundingClientRect().height),
        0
      ),
      widgetWidth: v.getBoundingClientRect().width,
      outputWidth: out.getBoundingClientRect().width,
      scrollWidth: v.scrollWidth,
      clientWidth: v.clientWidth,
      wide,
      height: v.getBoundingClientRect().height,
      listHeight: rows.clientHeight,
      listScroll: rows.scrollHeight
    };
  });

try {
  await openNotebook(page, T);
  await runCell(0);
  await page.waitForFunction(
    () => document.querySelectorAll('.mgpu-mem .mgpu-mem-row').length === 2,
    null,
    { timeout: T, polling: 200 }
  );
  await runCell(1);
  await page.waitForFunction(
    () =>
      document.querySelectorAll('.mgpu-mem').length === 2 &&
      document.querySelectorAll('.mgpu-mem .mgpu-mem-row').length === 4,
    null,
    { timeout: T, polling: 200 }
  );
  await page.waitForTimeout(500);
  const before = await views();
  report('started', { before, initOutput: await cellOutput(0) });

  await runCell(2, false); // allocate 256 MiB on rank 1, then sleep 9 s: do not wait for it
  const during = [];
  const t0 = Date.now();
  while (Date.now() - t0 < 5000) {
    during.push({
      t: Date.now() - t0,
      running: await cellRunning(2),
      views: await views()
    });
    await page.waitForTimeout(100);
  }
  await page.screenshot({
    path: path.join(cfg.artifacts, 'dashboard_busy.png'),
    fullPage: true
  });
  report('during', { during });

  // pause from the second view: both views stop moving, both say "resume"
  await page.locator('.mgpu-mem').nth(1).locator('.mgpu-mem-pause').click();
  await page.waitForTimeout(400);
  const paused1 = await views();
  await page.waitForTimeout(1200);
  const paused2 = await views();
  await page.locator('.mgpu-mem').nth(0).locator('.mgpu-mem-pause').click();
  await page.waitForTimeout(600);
  const resumed = await views();
  report('paused', {
    paused1,
    paused2,
    resumed,
    stillRunning: await cellRunning(2)
  });

  await page.waitForFunction(
    () =>
      window.jupyterapp.shell.currentWidget.content.widgets[2].model
        .executionState !== 'running',
    null,
    { timeout: T, polling: 200 }
  );
  await runCell(3);
  await page.waitForTimeout(800);
  const freed = await views();

  // rank 1 killed and restarted: every state the sidebar's rank 1 row shows, sampled every 50 ms
  await page.evaluate(() =>
    window.jupyterapp.shell.activateById('jupyter-mgpu-panel')
  );
  await page.evaluate(() => {
    window.__mgpuStates = { sidebar: [], dashboard: [] };
    window.__mgpuSample = () => {
      const row = document.querySelector(
        '#jupyter-mgpu-panel .jp-mgpu-cluster .jp-mgpu-rank[data-rank="1"]'
      );
      window.__mgpuStates.sidebar.push(row?.dataset.state ?? null);
      const badge = document.querySelector(
        '.mgpu-mem .mgpu-mem-row[data-rank="1"] .mgpu-mem-badge'
      );
      window.__mgpuStates.dashboard.push(badge?.textContent ?? null);
    };
    window.__mgpuWatch = setInterval(window.__mgpuSample, 50);
  });
  await runCell(4);
  // as a person does: %mgpu_restart once the dashboard says the rank died (a restart begun in the same
  // instant could come before the reader's next look at the engines, 0.3 s, and the badge would skip it)
  await page.waitForFunction(
    () =>
      document.querySelector(
        '.mgpu-mem .mgpu-mem-row[data-rank="1"] .mgpu-mem-badge'
      )?.textContent === 'dead',
    null,
    { timeout: 20000, polling: 50 }
  );
  await runCell(5);
  await page.waitForFunction(
    () =>
      document.querySelector(
        '#jupyter-mgpu-panel .jp-mgpu-cluster .jp-mgpu-rank[data-rank="1"]'
      )?.dataset.state === 'idle' &&
      document.querySelectorAll('.mgpu-mem-timeline-restart').length === 2,
    null,
    { timeout: T, polling: 100 }
  );
  const watched = await page.evaluate(() => {
    clearInterval(window.__mgpuWatch);
    window.__mgpuSample(); // what the wait saw, even if a busy page's timer had not fired since
    return window.__mgpuStates;
  });
  const after = await views();
  await page.screenshot({
    path: path.join(cfg.artifacts, 'dashboard_restarted.png'),
    fullPage: true
  });
  report('restarted', {
    sidebarStates: watched.sidebar.filter(x => x !== null),
    dashboardBadges: watched.dashboard.filter(x => x !== null),
    after,
    noMarksOnRank0: await page.evaluate(
      () =>
        document.querySelectorAll(
          '.mgpu-mem-row[data-rank="0"] .mgpu-mem-timeline-restart'
        ).length === 0
    ),
    output: await cellOutput(5)
  });

  // the card's Where button while rank 1 naps in a function: the tree of both ranks, inside the sidebar
  await runCell(6);
  const card = page.locator('#jupyter-mgpu-panel .jp-mgpu-cluster').first();
  let where = null;
  for (let i = 0; i < 20 && !where; i++) {
    await card.locator('.jp-mgpu-where-button').click();
    await page.waitForSelector('#jupyter-mgpu-panel .jp-mgpu-where-caption', {
      timeout: T
    });
    const got = await page.evaluate(() => {
      const view = document.querySelector('#jupyter-mgpu-panel .jp-mgpu-where');
      const right =
        document.getElementById('jupyter-mgpu-panel').getBoundingClientRect()
          .right + 1;
      const lines = Array.from(view.querySelectorAll('.jp-mgpu-where-line'));
      return {
        caption: view.querySelector('.jp-mgpu-where-caption').textContent,
        lines: lines.map(l => [
          Math.round(parseFloat(l.style.paddingLeft) / 0.9),
          l.querySelector('.jp-mgpu-where-frame').textContent,
          l.querySelector('.jp-mgpu-where-ranks').textContent
        ]),
        wide: Array.from(view.querySelectorAll('*')).filter(
          e => e.getBoundingClientRect().right > right
        ).length
      };
    });
    if (got.lines.some(([, frame]) => frame.includes('nap()'))) {
      where = got;
    } else {
      await page.waitForTimeout(150);
    }
  }
  await page.screenshot({
    path: path.join(cfg.artifacts, 'sidebar_where.png'),
    fullPage: true
  });
  report('where', where ?? { caption: '', lines: [], wide: -1 });

  await runCell(7);
  await page.waitForFunction(
    () =>
      /engines stopped/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[7].node.innerText
      ),
    null,
    { timeout: T, polling: 200 }
  );
  await page.waitForTimeout(300);
  const stopped = await views();
  await page.screenshot({
    path: path.join(cfg.artifacts, 'dashboard_stopped.png'),
    fullPage: true
  });

  // 64 ranks on 4 hosts, synthetic samples: folded, within the cell; then two hosts opened: it scrolls
  await runCell(8);
  await page.waitForFunction(
    () => document.querySelectorAll('.mgpu-mem').length === 3,
    null,
    { timeout: T, polling: 200 }
  );
  await page.waitForTimeout(500);
  const folded = await bigLayout();
  const last = page.locator('.mgpu-mem').nth(2);
  await last.locator('details.mgpu-mem-group > summary').nth(0).click();
  await last.locator('details.mgpu-mem-group > summary').nth(1).click();
  await page.waitForTimeout(1200); // a redraw or two: the opened hosts stay open
  const opened = await bigLayout();
  await last.screenshot({
    path: path.join(cfg.artifacts, 'dashboard_64_ranks.png')
  });
  await page.setViewportSize({ width: 760, height: 900 }); // a narrow notebook
  await page.waitForTimeout(800);
  const narrow = await bigLayout();
  await last.screenshot({
    path: path.join(cfg.artifacts, 'dashboard_64_ranks_narrow.png')
  });
  report('big', { folded, opened, narrow });
  report('done', { freed, stopped, consoleErrors });
} catch (err) {
  await reportError(err, page, 'dashboard_error.png', consoleErrors);
} finally {
  await shutdownKernel(page);
  await close();
}
