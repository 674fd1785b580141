// Drives a real JupyterLab in Debian's Chromium (playwright-core): runs %mgpu_collective all_gather on
// 32 ranks and measures what the user waits for and sees: the time until the figure and the player are
// drawn, the page's JS heap, the player's height at every step (it must not jump), the smallest text
// drawn. Called by tests/browser/test_collective_scale_in_lab.py with one JSON argument
// {url, token, notebook, artifacts, chromium, profile}; prints one JSON line per step.
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

const T = 180000;
const { context, page, consoleErrors } = await openBrowser({
  viewport: { width: 1280, height: 1000 }
});
const runCell = (i, wait = true) => runCellIn(page, i, wait);
const outputText = i =>
  page.evaluate(
    k =>
      window.jupyterapp.shell.currentWidget.content.widgets[k].node.innerText,
    i
  );

try {
  await openNotebook(page, T);
  await runCell(0);
  await page.waitForFunction(
    () =>
      /engines ready/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[0].node.innerText
      ),
    null,
    { timeout: T, polling: 200 }
  );
  const started = Date.now();
  await runCell(1, false);
  await page.waitForSelector('.mgpu-player svg', { timeout: T });
  await page.waitForSelector('.mgpu-collective svg', { timeout: T });
  const shownAfter = (Date.now() - started) / 1000;
  const look = await page.evaluate(() => {
    const fig = document.querySelector('.mgpu-collective svg');
    const scale = fig.getBoundingClientRect().width / fig.viewBox.baseVal.width;
    const sizes = Array.from(
      document.querySelectorAll(
        '.mgpu-collective svg text, .mgpu-player svg text'
      )
    )
      .map(t => parseFloat(getComputedStyle(t).fontSize))
      .filter(s => s > 0);
    return {
      title: fig.querySelector(':scope > text').textContent, // not a strip drawn once in <defs>
      width: fig.viewBox.baseVal.width,
      shownWidth: fig.getBoundingClientRect().width,
      smallestText: Math.min(...sizes) * scale,
      heapMB: performance.memory ? performance.memory.usedJSHeapSize / 1e6 : -1
    };
  });
  await page.screenshot({ path: path.join(cfg.artifacts, 'figure.png') });
  const heights = [];
  const counters = [];
  const steps = await page.evaluate(() =>
    parseInt(document.querySelector('.mgpu-player-slider').max, 10)
  );
  const stepStart = Date.now();
  for (let i = 0; i <= steps; i++) {
    if (i > 0) {
      await page.click('.mgpu-player-step-forward');
      await page.waitForFunction(
        k =>
          document
            .querySelector('.mgpu-player-counter')
            .textContent.startsWith(`step ${k} `),
        i,
        { timeout: 10000, polling: 20 }
      );
    }
    const h = await page.evaluate(
      () =>
        document.querySelector('.mgpu-player').getBoundingClientRect().height
    );
    heights.push(h);
    counters.push(
      await page.evaluate(
        () => document.querySelector('.mgpu-player-counter').textContent
      )
    );
  }
  const perStep = (Date.now() - stepStart) / 1000 / Math.max(1, steps);
  await page.evaluate(() =>
    document.querySelector('.mgpu-player').scrollIntoView()
  );
  await page.screenshot({ path: path.join(cfg.artifacts, 'player_end.png') });
  report('measured', { shownAfter, look, heights, counters, steps, perStep });
  await runCell(2);
  await page.waitForFunction(
    () =>
      /engines stopped/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[2].node.innerText
      ),
    null,
    { timeout: T, polling: 200 }
  );
  report('done', {
    consoleErrors,
    cell: await outputText(1).then(s => s.slice(0, 200))
  });
} catch (err) {
  await reportError(err, page, 'scale_error.png', consoleErrors);
} finally {
  await shutdownKernel(page);
  await context.close();
}
