// Drives a real JupyterLab in Debian's Chromium (playwright-core): %mgpu_init 2 shows the memory
// dashboard, a second view of it is displayed, then a %%mgpu cell allocates 256 MiB on rank 1 and
// sleeps; while that cell is still running the script reads rank 1's row in both views, pauses from
// the second view and checks the first froze too. Called by tests/browser/test_memory_dashboard.py with
// one JSON argument {url, token, notebook, artifacts, chromium, profile}; prints one JSON line per step.
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
const { context, page, consoleErrors } = await openBrowser({
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
        status: v.querySelector('.mgpu-mem-status')?.textContent ?? null
      };
    })
  );

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
  await runCell(4);
  await page.waitForFunction(
    () =>
      /engines stopped/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[4].node.innerText
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
  report('done', { freed, stopped, consoleErrors });
} catch (err) {
  await reportError(err, page, 'dashboard_error.png', consoleErrors);
} finally {
  await shutdownKernel(page);
  await context.close();
}
