// Drives a real JupyterLab in Debian's Chromium (playwright-core): runs %mgpu_collective all_reduce on
// 3 ranks, then uses the logical-schedule player's buttons (step forward, play, step back) and reads
// what it shows. Called by tests/browser/test_collective_player.py with one JSON argument
// {url, token, notebook, artifacts, chromium, profile}; prints one JSON line per step.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell as runCellIn,
  reportError,
  untilLastStep,
  shutdownKernel
} from './chromium.mjs';

const T = 90000;
const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 1000 }
});

const runCell = (i, wait = true) => runCellIn(page, i, wait);

const player = () =>
  page.evaluate(() => {
    const p = document.querySelector('.mgpu-player');
    if (!p) {
      return null;
    }
    const spans = p.querySelectorAll('span');
    return {
      counter: spans[spans.length - 1].textContent,
      badge: spans[0].textContent,
      play: p.querySelector('.mgpu-player-play').textContent,
      svgTitle: p.querySelector('svg text')?.textContent,
      caption: p.querySelector('svg text:nth-of-type(2)')?.textContent,
      slider: p.querySelector('input[type=range]').value
    };
  });

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
  await runCell(1);
  await page.waitForSelector('.mgpu-player svg', { timeout: T });
  const figure = await page.evaluate(
    () =>
      window.jupyterapp.shell.currentWidget.content.widgets[1].node.querySelector(
        '.mgpu-collective svg text'
      )?.textContent
  );
  const first = await player();
  await page.screenshot({
    path: path.join(cfg.artifacts, 'player_0.png'),
    fullPage: true
  });
  await page.click('.mgpu-player-step-forward');
  await page.waitForFunction(
    () => /step 1 \//.test(document.querySelector('.mgpu-player').innerText),
    null,
    { timeout: 10000 }
  );
  const stepped = await player();
  await page.screenshot({
    path: path.join(cfg.artifacts, 'player_1.png'),
    fullPage: true
  });
  await page.click('.mgpu-player-play');
  const sawPause = await page
    .waitForFunction(
      () =>
        document.querySelector('.mgpu-player-pause') !== null ||
        Array.from(document.querySelectorAll('.mgpu-player button')).some(
          b => b.textContent === '||'
        ),
      null,
      { timeout: 5000, polling: 50 }
    )
    .then(() => true)
    .catch(() => false);
  await untilLastStep(page, '.mgpu-player .mgpu-player-counter', 30000);
  await page.waitForTimeout(300);
  const end = await player();
  await page.screenshot({
    path: path.join(cfg.artifacts, 'player_end.png'),
    fullPage: true
  });
  await page.click('.mgpu-player-step-back');
  await page.waitForTimeout(300);
  const back = await player();
  // the kernel side sees the same index (state synced through the widget model)
  report('played', { figure, first, stepped, sawPause, end, back });
  await runCell(2);
  await page.waitForFunction(
    () =>
      /engines stopped/.test(
        window.jupyterapp.shell.currentWidget.content.widgets[2].node.innerText
      ),
    null,
    { timeout: T, polling: 200 }
  );
  report('done', { consoleErrors });
} catch (err) {
  await reportError(err, page, 'player_error.png', consoleErrors);
} finally {
  await shutdownKernel(page);
  await close();
}
