// 07 parallelism: the pipeline schedule player while mg.compare trains (live: the counter grows), then the
// replayed player of the pipeline demo after its run — step it with its buttons and read what it draws,
// with each stage's computing | bubble | other bar — and the page that pipe.schedule("pp").save_html(...)
// wrote, opened from file:// with every network request refused and played through its last 24 steps to
// the end.
import {
  watchCell,
  stepForward,
  lastAndBack,
  offlinePage,
  playToEnd
} from '../chromium.mjs';

export async function during({ page, report, cellIndex }) {
  const cell = await cellIndex('r = mg.compare(model');
  const seen = await watchCell(
    page,
    cell,
    node => {
      const p = node.querySelector('.mgpu-schedule');
      if (!p) {
        return null;
      }
      return {
        counter: p.querySelector('.mgpu-player-counter')?.textContent ?? '',
        title: p.querySelector('b')?.textContent ?? '',
        badge: p.querySelector('.mgpu-badge')?.textContent ?? '',
        status: node.querySelector('.widget-html-content')?.textContent ?? ''
      };
    },
    { fields: ['counter', 'title'], observe: { characterData: true } }
  );
  report('live', { seen: seen.slice(0, 2000) });
}

export async function after({
  page,
  newPage,
  report,
  cellIndex,
  consoleErrors
}) {
  const cell = await cellIndex('pipe.schedule("pp").play()');
  const sel = `[data-mgpu-sched="${cell}"]`;
  await page.evaluate(k => {
    const node = window.jupyterapp.shell.currentWidget.content.widgets[k].node;
    node
      .querySelector('.mgpu-schedule')
      .setAttribute('data-mgpu-sched', String(k));
    node.scrollIntoView();
  }, cell);
  const readIn = () =>
    page.evaluate(s => {
      const p = document.querySelector(s);
      const svg = p.querySelector('svg.mgpu-schedule-svg');
      return {
        counter: p.querySelector('.mgpu-player-counter').textContent,
        boxes: svg.querySelectorAll('.mgpu-sched-box').length,
        arrows: svg.querySelectorAll('.mgpu-sched-arrow').length,
        idle: Array.from(svg.querySelectorAll('.mgpu-sched-idle')).map(
          t => t.textContent
        ),
        caption: svg.querySelector('text').textContent,
        caption2: svg.querySelectorAll('text')[1].textContent,
        splits: svg.querySelectorAll('.mgpu-sched-split').length,
        legend: svg.querySelectorAll('.mgpu-sched-legend text').length === 5,
        svgWidth: Math.round(svg.getBoundingClientRect().width),
        cellWidth: Math.round(
          p.closest('.jp-OutputArea-output').getBoundingClientRect().width
        )
      };
    }, sel);
  await page.click(`${sel} .mgpu-player-first`);
  await page.waitForFunction(
    s =>
      /^step 0 \//.test(
        document.querySelector(s + ' .mgpu-player-counter').textContent
      ),
    sel,
    { timeout: 10000 }
  );
  const steps = await stepForward(page, sel, 6, readIn);
  const { end: last, back } = await lastAndBack(page, sel, readIn);
  report('stepped', { steps, last, back });

  // the saved page: no kernel, no network
  const { page: off, requests } = await offlinePage(newPage);
  off.on('pageerror', err => consoleErrors.push('standalone: ' + String(err)));
  off.on('console', msg => {
    if (msg.type() === 'error') {
      consoleErrors.push('standalone: ' + msg.text());
    }
  });
  const saved = await cellIndex('import os'); // the cell prints where save_html wrote the page
  const file = (
    await page.evaluate(
      k =>
        window.jupyterapp.shell.currentWidget.content.widgets[
          k
        ].node.querySelector('.jp-OutputArea-output').innerText,
      saved
    )
  )
    .trim()
    .replace(/^'|'$/g, '');
  await off.goto('file://' + file, { timeout: 60000 });
  await off.waitForSelector('.mgpu-schedule svg', { timeout: 20000 });
  const start = await off.evaluate(
    () => document.querySelector('.mgpu-player-counter').textContent
  );
  await playToEnd(off, 120000, 24);
  const end = await off.evaluate(() => ({
    counter: document.querySelector('.mgpu-player-counter').textContent,
    play: document.querySelector('.mgpu-player-play, .mgpu-player-pause')
      .textContent,
    boxes: document.querySelectorAll('.mgpu-sched-box').length
  }));
  await off.close();
  report('standalone', { start, end, requests });
}
