// Busy is not hung, seen in a real JupyterLab (Debian's Chromium, playwright-core): while rank 0 computes
// and rank 1 waits in a barrier, the running cell gets a live status line after --status-after (2 s) that says who runs
// which line and who waits where, the Multi-GPU sidebar says each rank's activity, and both go when the
// cell ends. Called by tests/browser/test_stuck_cell_in_lab.py with {url, token, notebook, artifacts,
// chromium, profile, cells: {name: index}}; prints one JSON line per step.
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

const STEP_TIMEOUT = 90000;
const C = cfg.cells;
const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 900 }
});
const shot = (index, name) =>
  shotCell(page, index, path.join(cfg.artifacts, `${name}.png`));

// The text of the outputs of cell `index`.
const outputText = index =>
  page.evaluate(i => {
    const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
    return Array.from(cell.node.querySelectorAll('.jp-OutputArea-output')).map(
      o => o.innerText
    );
  }, index);

// The sidebar's rank rows: rank, state, activity and the label a person reads.
const rankRows = () =>
  page.evaluate(() =>
    Array.from(
      document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-rank')
    ).map(r => ({
      rank: Number(r.dataset.rank),
      state: r.dataset.state,
      activity: r.dataset.activity ?? null,
      label: r.querySelector('.jp-mgpu-label')?.textContent ?? '',
      shown: r.querySelector('.jp-mgpu-activity')?.checkVisibility()
        ? r.querySelector('.jp-mgpu-activity').textContent
        : null
    }))
  );

try {
  await openNotebook(page, STEP_TIMEOUT);
  await page.waitForSelector('.jp-mgpu-status', { timeout: STEP_TIMEOUT });
  await page.click('.jp-mgpu-status'); // the sidebar
  await page.waitForSelector('#jupyter-mgpu-panel:not(.lm-mod-hidden)', {
    timeout: 10000
  });
  await runCell(page, C.init);
  report('started', { init: (await outputText(C.init)).join('\n') });

  // rank 0 computes for 8 s, rank 1 waits in the barrier: busy, not hung
  await runCell(page, C.slow, false);
  const t0 = Date.now();
  let status = null,
    rows = [],
    statusAfter = null;
  while (Date.now() - t0 < 7500) {
    const texts = await outputText(C.slow);
    const line = texts.find(t => t.startsWith('mgpu: rank')) ?? null;
    rows = await rankRows();
    if (
      line &&
      rows.some(r => (r.activity ?? '').startsWith('waiting in barrier'))
    ) {
      status = line;
      statusAfter = Date.now() - t0;
      break;
    }
    await page.waitForTimeout(300);
  }
  await shot(C.slow, '01_status_line');
  await page.screenshot({ path: path.join(cfg.artifacts, '02_sidebar.png') });
  const layoutWhile = await notebookLayout(page);
  await page.waitForFunction(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[i].model
        .executionCount !== null,
    C.slow,
    { timeout: STEP_TIMEOUT, polling: 200 }
  );
  await page.waitForTimeout(1500); // the sidebar's next refresh
  await shot(C.slow, '03_done');
  report('slow', {
    status,
    statusAfter,
    rows,
    end: await outputText(C.slow),
    rowsAfter: await rankRows(),
    layoutWhile
  });

  await runCell(page, C.shutdown);
  const shutdown = (await outputText(C.shutdown)).join('\n');
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
